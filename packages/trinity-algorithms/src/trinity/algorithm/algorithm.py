"""Algorithm types: one name (``algorithm.algorithm_type``) standing for a whole RL recipe.

An :class:`AlgorithmType` bundles what the trainer and explorer need to know about an algorithm
besides its components: whether it trains a critic, needs a reference model, computes advantages
in the trainer, may have its batches re-ordered, and which data schema it trains on. Its
:meth:`~AlgorithmType.default_config` names the components (sample strategy, advantage, policy
loss, KL penalty / loss, entropy loss) and their default arguments, so
``algorithm: {algorithm_type: grpo}`` is a complete configuration; whatever the user sets on top
wins (see :func:`trinity.algorithm.resolve.resolve_algorithm`).

Types register in :data:`ALGORITHM_TYPE` under the name configs use, exactly as the
developer guide shows::

    @ALGORITHM_TYPE.register_module("opmd")
    class OPMDAlgorithm(AlgorithmType):
        use_critic: bool = False
        ...

The built-in types below are :class:`~trinity.algorithm.algorithm_base.DeclarativeAlgorithmType`
subclasses: each states only the flags that differ from :class:`AlgorithmType`'s and the
``config_overrides`` that differ from the recipe it builds on
(:data:`~trinity.algorithm.algorithm_base.RL_BASE_CONFIG`, or
:data:`~trinity.algorithm.algorithm_base.SUPERVISED_BASE_CONFIG`). The base classes, the
registry and the recipes live in :mod:`trinity.algorithm.algorithm_base`; the names this module
always had (``ALGORITHM_TYPE``, ``AlgorithmType`` ...) are re-exported here.

The 24 built-in types are Trinity-RFT 0.6's: ``sft``, ``cpt``, ``ppo``, ``grpo``, ``dapo``,
``reinforceplusplus``, ``rloo``, ``opmd``, ``asymre``, ``dpo``, ``topr``, ``cispo``, ``gspo``,
``sapo``, ``mix``, ``mix_chord``, ``raft``, ``sppo``, ``rec``, ``multi_step_grpo``, ``gigpo``,
``on_policy_distill``, ``jsd`` and ``grpo_verl``.

Defaults follow Trinity-RFT's ``trinity/algorithm/algorithm.py`` so configs written for it
resolve to the same recipe. Deliberate differences: ``dapo`` also carries the DAPO paper's
clip-higher PPO arguments (``clip_range_low=0.2``, ``clip_range_high=0.28``) and token-mean
aggregation, which Trinity-RFT leaves to each YAML; ``grpo_verl`` names the advantage
``grpo_verl`` (GRPO computed in the trainer), where Trinity-RFT's recipe names ``grpo`` (see
:class:`GRPOverlAlgorithm`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trinity.algorithm.algorithm_base import (
    ALGORITHM_TYPE,
    COMPONENT_FIELDS,
    GLOBAL_DEFAULT_CONFIG,
    SUPERVISED_BASE_CONFIG,
    USE_GLOBAL_DEFAULT,
    AlgorithmType,
    DeclarativeAlgorithmType,
)
from trinity.common.config.modes import run_mode_spec
from trinity.utils.log import get_logger

if TYPE_CHECKING:  # only for annotations: core's config is never needed to define a type
    from trinity.common.config import Config

__all__ = [
    "ALGORITHM_TYPE",
    "COMPONENT_FIELDS",
    "GLOBAL_DEFAULT_CONFIG",
    "AlgorithmType",
    "AsymREAlgorithm",
    "CISPOAlgorithm",
    "CPTAlgorithm",
    "DAPOAlgorithm",
    "DPOAlgorithm",
    "GRPOAlgorithm",
    "GRPOverlAlgorithm",
    "GSPOAlgorithm",
    "GiGPOAlgorithm",
    "JSDAlgorithm",
    "MIXAlgorithm",
    "MIXCHORDAlgorithm",
    "MultiStepGRPOAlgorithm",
    "OPMDAlgorithm",
    "OnPolicyDistillAlgorithm",
    "PPOAlgorithm",
    "RAFTAlgorithm",
    "RECAlgorithm",
    "RLOOAlgorithm",
    "ReinforcePlusPlusAlgorithm",
    "SAPOAlgorithm",
    "SFTAlgorithm",
    "TOPRAlgorithm",
    "sPPOAlgorithm",
]

logger = get_logger(__name__)


def _train_only_checks(cls: type[AlgorithmType], config: Config) -> list[str]:
    """Shared by SFT and DPO: offline data, train mode only, checkpoint synchronisation."""
    name = cls.name()
    mode = run_mode_spec(config.mode)
    if mode.explores:
        raise ValueError(
            f"algorithm.algorithm_type {name!r} trains on a fixed data set and does not "
            f"support mode {config.mode!r}; use mode 'train'"
        )
    if mode.trains_on_dataset:
        exp = config.buffer.trainer_input.experience_buffer
        if exp is None or not exp.path:
            raise ValueError(
                "buffer.trainer_input.experience_buffer.path is required when "
                f"algorithm.algorithm_type is {name!r}"
            )
    warnings: list[str] = []
    sync = config.synchronizer
    if sync.sync_method != "checkpoint":
        sync.sync_method = "checkpoint"
        warnings.append(
            f"{name} only supports checkpoint synchronization; "
            "synchronizer.sync_method set to 'checkpoint'"
        )
    if config.trainer.save_interval > 0 and sync.sync_interval != config.trainer.save_interval:
        sync.sync_interval = config.trainer.save_interval
        warnings.append(
            f"{name}: synchronizer.sync_interval set to trainer.save_interval "
            f"({config.trainer.save_interval})"
        )
    for message in warnings:
        logger.warning(message)
    return warnings


@ALGORITHM_TYPE.register_module("sft")
class SFTAlgorithm(DeclarativeAlgorithmType):
    """Supervised fine-tuning on an offline ``sft`` data set (train mode only)."""

    schema = "sft"
    config_base = SUPERVISED_BASE_CONFIG

    @classmethod
    def check_config(cls, config: Config) -> list[str]:
        return _train_only_checks(cls, config)


@ALGORITHM_TYPE.register_module("ppo")
class PPOAlgorithm(DeclarativeAlgorithmType):
    """PPO with a critic; GAE advantages are computed in the trainer from critic values."""

    use_critic = True
    use_reference = True
    compute_advantage_in_trainer = True
    config_overrides = {"repeat_times": 1, "advantage_fn": "ppo"}


@ALGORITHM_TYPE.register_module("grpo")
class GRPOAlgorithm(DeclarativeAlgorithmType):
    """GRPO: group-normalised rewards as advantages (in the pipeline), PPO clip loss."""

    use_reference = True


@ALGORITHM_TYPE.register_module("dapo")
class DAPOAlgorithm(DeclarativeAlgorithmType):
    """DAPO: GRPO advantages, clip-higher PPO loss, token-level aggregation, no KL.

    Dynamic sampling and overlong reward shaping are configured elsewhere (experience
    pipeline operators / reward functions); the loss defaults are the paper's.
    """

    config_overrides = {
        "repeat_times": 16,
        "policy_loss_fn_args": {
            "clip_range_low": 0.2,
            "clip_range_high": 0.28,
            "loss_agg_mode": "token-mean",
        },
        "kl_loss_fn": "none",
        "loss_agg_mode": "token-mean",
    }


@ALGORITHM_TYPE.register_module("reinforceplusplus")
class ReinforcePlusPlusAlgorithm(DeclarativeAlgorithmType):
    """REINFORCE++: batch-normalised discounted returns, computed in the trainer."""

    use_reference = True
    compute_advantage_in_trainer = True
    config_overrides = {"advantage_fn": "reinforceplusplus"}


@ALGORITHM_TYPE.register_module("rloo")
class RLOOAlgorithm(DeclarativeAlgorithmType):
    """RLOO: leave-one-out baselines over the runs of a task.

    Trinity-RFT computes them in the trainer; ours is a group advantage over Experiences, so it
    runs in the experience pipeline like GRPO (the same numbers, before collation).
    """

    use_reference = True
    config_overrides = {"advantage_fn": "rloo"}


@ALGORITHM_TYPE.register_module("opmd")
class OPMDAlgorithm(DeclarativeAlgorithmType):
    """OPMD: group baselines (mean or log-avg-exp) in the pipeline, OPMD loss, k2 KL loss."""

    use_reference = True
    config_overrides = {"advantage_fn": "opmd", "policy_loss_fn": "opmd"}


@ALGORITHM_TYPE.register_module("asymre")
class AsymREAlgorithm(DeclarativeAlgorithmType):
    """AsymRE: asymmetric REINFORCE baseline with the OPMD loss, no reference model."""

    config_overrides = {
        "advantage_fn": "asymre",
        "policy_loss_fn": "opmd",
        "kl_loss_fn": "none",
        "entropy_loss_fn": "none",
    }


@ALGORITHM_TYPE.register_module("dpo")
class DPOAlgorithm(DeclarativeAlgorithmType):
    """DPO on an offline ``dpo`` data set (train mode only); always keeps a KL loss."""

    use_reference = True
    can_balance_batch = False
    schema = "dpo"
    config_base = SUPERVISED_BASE_CONFIG
    config_overrides = {"policy_loss_fn": "dpo", "kl_loss_fn": "k2", "entropy_loss_fn": "default"}

    @classmethod
    def check_config(cls, config: Config) -> list[str]:
        return _train_only_checks(cls, config)

    @classmethod
    def post_resolve(cls, values: dict[str, Any], user_set: set[str]) -> list[str]:
        # Each DPO sample is a (chosen, rejected) pair: two rows, hence the fake group of 2;
        # the reference log-probabilities are only computed when a KL loss is configured.
        warnings: list[str] = []
        if values.get("repeat_times") != 2:
            if "repeat_times" in user_set:
                warnings.append(
                    f"DPO uses repeat_times 2 (chosen + rejected); "
                    f"algorithm.repeat_times {values.get('repeat_times')} ignored"
                )
            values["repeat_times"] = 2
        if values.get("kl_loss_fn") in (None, "none"):
            values["kl_loss_fn"] = "k2"
            values["kl_loss_fn_args"] = {}
            warnings.append("DPO must use a KL loss; algorithm.kl_loss_fn set to 'k2'")
        return warnings


@ALGORITHM_TYPE.register_module("topr")
class TOPRAlgorithm(DeclarativeAlgorithmType):
    """TOPR (https://arxiv.org/abs/2503.14286): REINFORCE advantages, TOPR loss."""

    use_reference = True
    config_overrides = {"advantage_fn": "reinforce", "policy_loss_fn": "topr"}


@ALGORITHM_TYPE.register_module("cispo")
class CISPOAlgorithm(DeclarativeAlgorithmType):
    """CISPO (https://arxiv.org/abs/2506.13585): GRPO advantages, clipped-IS-weight loss."""

    use_reference = True
    config_overrides = {"policy_loss_fn": "cispo"}


@ALGORITHM_TYPE.register_module("gspo")
class GSPOAlgorithm(DeclarativeAlgorithmType):
    """GSPO (https://arxiv.org/abs/2507.18071): GRPO advantages, sequence-level ratio loss."""

    use_reference = True
    config_overrides = {"policy_loss_fn": "gspo"}


@ALGORITHM_TYPE.register_module("sapo")
class SAPOAlgorithm(DeclarativeAlgorithmType):
    """SAPO: GRPO advantages, a temperature-controlled soft gate instead of hard clipping."""

    use_reference = True
    config_overrides = {"policy_loss_fn": "sapo"}


@ALGORITHM_TYPE.register_module("mix")
class MIXAlgorithm(DeclarativeAlgorithmType):
    """MIX: RL rollouts and expert (SFT) data in one batch, GRPO advantages, mix loss.

    The ``mix`` sample strategy marks expert rows (``info["is_expert"]``, collated into the
    ``expert_mask`` / ``is_expert_mask`` batch fields) for the ``mix`` policy loss. Its recipe
    names no KL functions (Trinity-RFT's), so they take ``GLOBAL_DEFAULT_CONFIG``'s.
    """

    use_reference = True
    config_overrides = {
        "repeat_times": 8,
        "policy_loss_fn": "mix",
        "sample_strategy": "mix",
        "entropy_loss_fn": "mix",
        "kl_penalty_fn": USE_GLOBAL_DEFAULT,
        "kl_loss_fn": USE_GLOBAL_DEFAULT,
    }


#: The reward a rollout needs for RAFT to train on it when the config names no ``reward_filter``:
#: success for the 0/1 verifiable rewards (``math_reward``, ``arithmetic_reward``, countdown).
RAFT_DEFAULT_REWARD_THRESHOLD = 1.0


@ALGORITHM_TYPE.register_module("raft")
class RAFTAlgorithm(DeclarativeAlgorithmType):
    """RAFT (reward-ranked fine-tuning): the SFT loss on the *successful* rollouts only.

    The filter is the algorithm: SFT on every rollout only imitates the current policy (its own
    samples, wrong ones included) and teaches nothing, which is what RAFT did here before its
    :meth:`check_config` added the filter. A config whose experience pipeline names no
    ``reward_filter`` gets one keeping rollouts with reward ``>=``
    :data:`RAFT_DEFAULT_REWARD_THRESHOLD` (a warning says so); a ``reward_filter`` the user
    configured, with any threshold, is left as it is.
    """

    config_base = SUPERVISED_BASE_CONFIG

    @classmethod
    def check_config(cls, config: Config) -> list[str]:
        from trinity.common.config import OperatorConfig

        if run_mode_spec(config.mode).trains_on_dataset:  # offline RAFT: a prepared data set
            return []
        pipeline = config.data_processor.experience_pipeline
        if any(op.name == "reward_filter" for op in pipeline.operators):
            return []
        threshold = RAFT_DEFAULT_REWARD_THRESHOLD
        pipeline.operators.insert(
            0, OperatorConfig(name="reward_filter", args={"threshold": threshold})
        )
        message = (
            "raft trains only on successful rollouts: added the experience operator "
            f"reward_filter (threshold {threshold}: reward >= {threshold} is kept) to "
            "data_processor.experience_pipeline.operators; configure a reward_filter yourself "
            "for another reward scale"
        )
        logger.warning(message)
        return [message]


@ALGORITHM_TYPE.register_module("multi_step_grpo")
class MultiStepGRPOAlgorithm(DeclarativeAlgorithmType):
    """GRPO for multi-step (agentic) runs: episode advantages broadcast to every step."""

    use_reference = True
    config_overrides = {"repeat_times": 8, "advantage_fn": "step_wise_grpo"}


# ---------------------------------------------------------------- Trinity-RFT 0.6's other types


@ALGORITHM_TYPE.register_module("cpt")
class CPTAlgorithm(SFTAlgorithm):
    """Continued pre-training: the language-model loss on every token of raw text (train mode).

    Trinity-RFT 0.6's ``cpt``: SFT's loss and checks, with the ``cpt`` schema, whose formatter
    (``trinity.buffer.formatter.CPTFormatter``) tokenizes ``format.prompt_key`` as plain text
    without a chat template and trains on every token after the first. Its rows are plain
    text, so ``format.prompt_type`` must be ``plaintext`` (0.6 fails at the first row).
    """

    schema = "cpt"

    @classmethod
    def check_config(cls, config: Config) -> list[str]:
        warnings = _train_only_checks(cls, config)
        exp = config.buffer.trainer_input.experience_buffer
        if exp is not None and exp.format.prompt_type != "plaintext":
            raise ValueError(
                "buffer.trainer_input.experience_buffer.format.prompt_type: algorithm_type "
                f"'cpt' trains on raw text rows (format.prompt_key), got "
                f"{exp.format.prompt_type!r}; allowed: 'plaintext'"
            )
        return warnings


@ALGORITHM_TYPE.register_module("mix_chord")
class MIXCHORDAlgorithm(MIXAlgorithm):
    """CHORD (https://arxiv.org/abs/2508.11408): ``mix`` with a scheduled SFT weight.

    Everything as ``mix`` (the ``mix`` sample strategy puts expert rows from the
    ``sft_dataset`` auxiliary buffer into every batch; the trainer refuses to start without
    that buffer), but the ``mix_chord`` loss weighs the expert part by ``mu(step)`` (linear
    warm-up then cosine decay, from the batch's ``step`` field the strategy adds) and uses the
    ``sft_phi`` token weighting ``p * (1 - p)`` so the expert data guides without overwriting.
    """

    config_overrides = {"policy_loss_fn": "mix_chord"}


@ALGORITHM_TYPE.register_module("sppo")
class sPPOAlgorithm(DeclarativeAlgorithmType):
    """sPPO: OPMD group baselines with the ``sppo`` loss, no reference model, no KL, no entropy.

    Trinity-RFT's name and recipe: the loss is the log-ratio surrogate, trained only on tokens
    whose ratio stays in ``[1 / (1 + epsilon), 1 + epsilon]``; that trust region keeps the
    policy near the rollout policy without a KL term against a reference model.
    """

    config_overrides = {
        "advantage_fn": "opmd",
        "policy_loss_fn": "sppo",
        "kl_loss_fn": "none",
        "entropy_loss_fn": "none",
    }


@ALGORITHM_TYPE.register_module("rec")
class RECAlgorithm(DeclarativeAlgorithmType):
    """REC: group-relative advantages (``rec``) and the REC loss, k2 KL loss.

    The loss's ``clip_mode`` / ``weight`` / ``regularizer`` arguments select the REC variant
    (plain REINFORCE by default); the advantages run in the experience pipeline, on whole groups.
    """

    use_reference = True
    config_overrides = {"advantage_fn": "rec", "policy_loss_fn": "rec"}


@ALGORITHM_TYPE.register_module("gigpo")
class GiGPOAlgorithm(DeclarativeAlgorithmType):
    """GiGPO (https://arxiv.org/abs/2505.10978): group-in-group advantages for agents.

    For multi-step runs, as ``multi_step_grpo`` (one experience per step, ``eid.step``): each
    run's return is compared with the task's other runs, and steps taken from the same
    environment state (``info["env_state_hash"]``) with each other, crediting single actions.
    A workflow that records no state hashes gets the episode term alone (``multi_step_grpo``'s
    signal), so the type runs on any workflow. PPO with symmetric 0.2 clipping and token-mean
    aggregation, as Trinity-RFT's recipe.
    """

    use_reference = True
    config_overrides = {
        "repeat_times": 8,
        "advantage_fn": "gigpo",
        "advantage_fn_args": {"omega": 1.0, "gamma": 1.0, "fnorm": "none", "epsilon": 1e-6},
        "policy_loss_fn_args": {
            "clip_range_low": 0.2,
            "clip_range_high": 0.2,
            "loss_agg_mode": "token-mean",
        },
    }


def _train_workflows(config: Config) -> list[tuple[str, Any]]:
    """``(name, class)`` of the train task sets' workflows (unknown names are left to the
    name check)."""
    from trinity.common.workflows.workflow import WORKFLOWS

    explorer_input = config.buffer.explorer_input
    found: list[tuple[str, Any]] = []
    for taskset in explorer_input.get_tasksets():
        name = taskset.default_workflow_type or explorer_input.default_workflow_type
        if not name or name in (n for n, _ in found):
            continue
        try:
            found.append((name, WORKFLOWS.get(name)))
        except (KeyError, ValueError):
            continue
    return found


def _builtin_workflows_without_teacher(config: Config) -> list[str]:
    """The train task sets' workflows that cannot supply teacher log-probs: this release's
    own workflows (``trinity.*`` modules) but the distillation ones (``writes_teacher_logprobs``).
    A workflow from elsewhere (a plugin) may write them, so it is left out."""
    return [
        name
        for name, workflow in _train_workflows(config)
        if workflow.__module__.split(".")[0] == "trinity"
        and not getattr(workflow, "writes_teacher_logprobs", False)
    ]


class _TeacherDistillation(DeclarativeAlgorithmType):
    """Shared by ``on_policy_distill`` and ``jsd``: the student samples, a teacher scores each
    sampled token, and the advantage (computed in the trainer from ``batch.teacher_logprobs``
    and the rollout's log-probs) says how much more the teacher likes it.

    The teacher's log-probs must come with the experiences: a workflow scores the rollout with
    a teacher (``on_policy_distill_workflow`` / ``on_policy_distill_math_workflow``: the first
    of ``explorer.auxiliary_models``) and sets ``Experience.teacher_logprobs``.
    :meth:`check_config` refuses a run that explores with another built-in workflow, or with
    a distillation workflow but no auxiliary model, rather than failing at its first train
    step; a plugin workflow, or ``mode: train`` on stored experiences that carry them, is
    accepted.
    """

    compute_advantage_in_trainer = True
    config_overrides = {
        "repeat_times": 8,
        "kl_loss_fn": "none",
        "entropy_loss_fn": "none",
    }

    @classmethod
    def check_config(cls, config: Config) -> list[str]:
        if not run_mode_spec(config.mode).explores:
            return []
        builtin = _builtin_workflows_without_teacher(config)
        if builtin:
            raise ValueError(
                f"algorithm.algorithm_type {cls.name()!r} trains on the teacher's log-probs of "
                f"the sampled tokens (Experience.teacher_logprobs), which the workflow must "
                f"write; {', '.join(map(repr, builtin))} does not. Use "
                "on_policy_distill_workflow or on_policy_distill_math_workflow (the teacher "
                "is explorer.auxiliary_models[0]), or a workflow of your own that sets "
                "teacher_logprobs"
            )
        distilling = [
            name
            for name, workflow in _train_workflows(config)
            if getattr(workflow, "writes_teacher_logprobs", False)
        ]
        if distilling and not config.explorer.auxiliary_models:
            raise ValueError(
                f"{', '.join(map(repr, distilling))} scores the student's samples with a "
                "teacher model, and explorer.auxiliary_models is empty; allowed: the teacher "
                "as explorer.auxiliary_models[0] (its model_path; it must share the student's "
                "tokenizer)"
            )
        return []


@ALGORITHM_TYPE.register_module("on_policy_distill")
class OnPolicyDistillAlgorithm(_TeacherDistillation):
    """On-policy distillation: ``A_t = kl_coef * (log p_teacher - log p_student)`` per token,
    trained with the PPO loss (its clipping keeps the steps stable; ``importance_sampling``
    when no clipping is wanted), no reference model. See :class:`_TeacherDistillation`."""

    config_overrides = {
        "advantage_fn": "on_policy_distill",
        "advantage_fn_args": {"kl_coef": 1.0},
    }


@ALGORITHM_TYPE.register_module("jsd")
class JSDAlgorithm(_TeacherDistillation):
    """On-policy distillation by the Jensen-Shannon divergence between student and teacher
    (``lambda_coef`` weighs the teacher in the mixture; 0.5 is symmetric): bounded, unlike the
    reverse KL of ``on_policy_distill``. See :class:`_TeacherDistillation`."""

    config_overrides = {
        "advantage_fn": "jsd",
        "advantage_fn_args": {"kl_coef": 1.0, "lambda_coef": 0.5},
    }


@ALGORITHM_TYPE.register_module("grpo_verl")
class GRPOverlAlgorithm(GRPOAlgorithm):
    """GRPO with the advantages computed in the trainer, on the collated batch.

    The same group-normalised rewards as ``grpo`` (grouped by task within the train batch),
    for setups where the experience pipeline should not touch the experiences. Trinity-RFT's
    recipe names the advantage ``grpo``; here that name is the pipeline's grouped GRPO, so the
    recipe names ``grpo_verl``, Trinity-RFT's own name for the trainer-side GRPO (arguments:
    ``epsilon``). A group split across two train batches is normalised within each part.
    """

    compute_advantage_in_trainer = True
    config_overrides = {"advantage_fn": "grpo_verl"}
