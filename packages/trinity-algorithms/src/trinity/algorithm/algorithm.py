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

Defaults follow Trinity-RFT's ``trinity/algorithm/algorithm.py`` so configs written for it
resolve to the same recipe. One deliberate difference: ``dapo`` also carries the DAPO paper's
clip-higher PPO arguments (``clip_range_low=0.2``, ``clip_range_high=0.28``) and token-mean
aggregation, which Trinity-RFT leaves to each YAML.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

from trinity.utils.log import get_logger
from trinity.utils.registry import Registry

if TYPE_CHECKING:  # only for annotations: core's config is never needed to define a type
    from trinity.common.config import Config

__all__ = [
    "ALGORITHM_TYPE",
    "COMPONENT_FIELDS",
    "GLOBAL_DEFAULT_CONFIG",
    "AlgorithmType",
    "AsymREAlgorithm",
    "CISPOAlgorithm",
    "DAPOAlgorithm",
    "DPOAlgorithm",
    "GRPOAlgorithm",
    "GSPOAlgorithm",
    "MIXAlgorithm",
    "MultiStepGRPOAlgorithm",
    "OPMDAlgorithm",
    "PPOAlgorithm",
    "RAFTAlgorithm",
    "RLOOAlgorithm",
    "ReinforcePlusPlusAlgorithm",
    "SAPOAlgorithm",
    "SFTAlgorithm",
    "TOPRAlgorithm",
]

logger = get_logger(__name__)

#: Registry of algorithm types (``algorithm.algorithm_type``); installed packages may add
#: more through the ``trinity.algorithm_type`` entry-point group.
ALGORITHM_TYPE: Registry[type[AlgorithmType]] = Registry("algorithm_type")

#: The component fields of ``algorithm``, each with an ``<field>_args`` dict.
COMPONENT_FIELDS: tuple[str, ...] = (
    "sample_strategy",
    "advantage_fn",
    "policy_loss_fn",
    "kl_penalty_fn",
    "kl_loss_fn",
    "entropy_loss_fn",
)

#: What every algorithm type falls back to for a field its ``default_config`` does not name
#: (Trinity-RFT's ``Config._check_algorithm`` defaults, with ``default`` sampling).
GLOBAL_DEFAULT_CONFIG: dict[str, Any] = {
    "repeat_times": 1,
    "sample_strategy": "default",
    "advantage_fn": "ppo",
    "policy_loss_fn": "ppo",
    "kl_penalty_fn": "none",
    "kl_loss_fn": "k2",
    "entropy_loss_fn": "default",
    "loss_agg_mode": "token-mean",
}

# Legacy ``schema`` values were buffer SQL model classes; map them to the schema names.
_LEGACY_SCHEMA_NAMES = {
    "ExperienceModel": "experience",
    "SFTDataModel": "sft",
    "DPODataModel": "dpo",
}


class AlgorithmType(ABC):
    """Describes one RL algorithm; subclass, set the flags, implement :meth:`default_config`.

    Class attributes (read by the trainer / explorer, never instantiated):

    * ``use_critic``: train a critic model (and compute values for the batch).
    * ``use_reference``: run a reference model (for KL penalties / losses).
    * ``compute_advantage_in_trainer``: the trainer calls the advantage function on the
      collated batch; when False the experience pipeline computes advantages before the
      buffer and the trainer skips the call (group-based methods need whole groups, which
      only the pipeline sees).
    * ``use_advantage``: the older guide's name for ``compute_advantage_in_trainer``; a
      subclass may set either and both read the same.
    * ``can_balance_batch``: the trainer may permute samples when balancing micro batches
      (False for DPO, whose chosen/rejected rows must stay adjacent).
    * ``schema``: the data format trained on: ``"experience"``, ``"sft"`` or ``"dpo"`` (a
      legacy schema class such as ``ExperienceModel`` is accepted, see :meth:`schema_name`).
    """

    use_critic: bool = False
    use_reference: bool = False
    compute_advantage_in_trainer: bool = False
    use_advantage: bool = False
    can_balance_batch: bool = True
    schema: Any = "experience"
    use_rollout: bool = True

    #: Keys ``default_config`` may return besides the component fields and their ``_args``.
    EXTRA_CONFIG_KEYS: ClassVar[tuple[str, ...]] = ("repeat_times", "loss_agg_mode")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Keep the older guide's ``use_advantage`` and the newer ``compute_advantage_in_trainer``
        # in step, whichever one the subclass sets (both set: each keeps its own value).
        super().__init_subclass__(**kwargs)
        own = cls.__dict__
        if "use_advantage" in own and "compute_advantage_in_trainer" not in own:
            cls.compute_advantage_in_trainer = bool(own["use_advantage"])
        elif "compute_advantage_in_trainer" in own and "use_advantage" not in own:
            cls.use_advantage = bool(own["compute_advantage_in_trainer"])

    @classmethod
    @abstractmethod
    def default_config(cls) -> dict[str, Any]:
        """Default ``algorithm`` settings of this type.

        Keys: component names (``sample_strategy``, ``advantage_fn``, ``policy_loss_fn``,
        ``kl_penalty_fn``, ``kl_loss_fn``, ``entropy_loss_fn``), optionally their
        ``<name>_args`` dicts, ``repeat_times`` and ``loss_agg_mode``. Fields left out take
        :data:`GLOBAL_DEFAULT_CONFIG`; fields the user sets override both.
        """

    @classmethod
    def name(cls) -> str:
        """The name this type is registered under (the class name if it is not registered)."""
        for registered_name, module in ALGORITHM_TYPE.modules.items():
            if module is cls:
                return registered_name
        return cls.__name__

    @classmethod
    def schema_name(cls) -> str:
        """``schema`` as a name (``experience`` / ``sft`` / ``dpo``), legacy classes included."""
        schema = cls.schema
        if isinstance(schema, str):
            return schema
        class_name = getattr(schema, "__name__", str(schema))
        return _LEGACY_SCHEMA_NAMES.get(class_name, class_name.lower())

    @classmethod
    def check_config(cls, config: Config) -> list[str]:
        """Run-level checks of a whole :class:`~trinity.common.config.Config` for this type.

        Called by the launcher before a run. Raises ``ValueError`` for a config this algorithm
        cannot run; may adjust settings the algorithm dictates (as Trinity-RFT does) and
        returns a warning per adjustment (also logged). The default accepts everything.
        """
        return []

    @classmethod
    def post_resolve(cls, values: dict[str, Any], user_set: set[str]) -> list[str]:
        """Adjust the resolved ``algorithm`` values in place; return a warning per change.

        ``values`` holds every resolved field (names, ``*_args``, ``repeat_times``,
        ``loss_agg_mode``); ``user_set`` the fields the user wrote. The hook exists for rules
        a default cannot express (DPO must keep a KL loss, whatever the user wrote).
        """
        return []

    @classmethod
    def flags(cls) -> dict[str, Any]:
        """The class attributes as a dict (for logs and the config generator)."""
        return {
            "use_critic": cls.use_critic,
            "use_reference": cls.use_reference,
            "compute_advantage_in_trainer": cls.compute_advantage_in_trainer,
            "can_balance_batch": cls.can_balance_batch,
            "schema": cls.schema_name(),
        }


def _train_only_checks(cls: type[AlgorithmType], config: Config) -> list[str]:
    """Shared by SFT and DPO: offline data, train mode only, checkpoint synchronisation."""
    name = cls.name()
    if config.mode in ("both", "colocate", "explore"):
        raise ValueError(
            f"algorithm.algorithm_type {name!r} trains on a fixed data set and does not "
            f"support mode {config.mode!r}; use mode 'train'"
        )
    if config.mode == "train":
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
class SFTAlgorithm(AlgorithmType):
    """Supervised fine-tuning on an offline ``sft`` data set (train mode only)."""

    use_critic: bool = False
    use_reference: bool = False
    compute_advantage_in_trainer: bool = False
    can_balance_batch: bool = True
    schema: str = "sft"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {
            "sample_strategy": "default",
            "policy_loss_fn": "sft",
            "kl_loss_fn": "none",
            "entropy_loss_fn": "none",
        }

    @classmethod
    def check_config(cls, config: Config) -> list[str]:
        return _train_only_checks(cls, config)


@ALGORITHM_TYPE.register_module("ppo")
class PPOAlgorithm(AlgorithmType):
    """PPO with a critic; GAE advantages are computed in the trainer from critic values."""

    use_critic: bool = True
    use_reference: bool = True
    compute_advantage_in_trainer: bool = True
    can_balance_batch: bool = True
    schema: str = "experience"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {
            "repeat_times": 1,
            "sample_strategy": "default",
            "policy_loss_fn": "ppo",
            "advantage_fn": "ppo",
            "kl_penalty_fn": "none",
            "kl_loss_fn": "k2",
            "entropy_loss_fn": "default",
        }


@ALGORITHM_TYPE.register_module("grpo")
class GRPOAlgorithm(AlgorithmType):
    """GRPO: group-normalised rewards as advantages (in the pipeline), PPO clip loss."""

    use_critic: bool = False
    use_reference: bool = True
    compute_advantage_in_trainer: bool = False
    can_balance_batch: bool = True
    schema: str = "experience"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {
            "repeat_times": 2,
            "advantage_fn": "grpo",
            "sample_strategy": "default",
            "policy_loss_fn": "ppo",
            "kl_penalty_fn": "none",
            "kl_loss_fn": "k2",
            "entropy_loss_fn": "default",
        }


@ALGORITHM_TYPE.register_module("dapo")
class DAPOAlgorithm(AlgorithmType):
    """DAPO: GRPO advantages, clip-higher PPO loss, token-level aggregation, no KL.

    Dynamic sampling and overlong reward shaping are configured elsewhere (experience
    pipeline operators / reward functions); the loss defaults are the paper's.
    """

    use_critic: bool = False
    use_reference: bool = False
    compute_advantage_in_trainer: bool = False
    can_balance_batch: bool = True
    schema: str = "experience"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {
            "repeat_times": 16,
            "advantage_fn": "grpo",
            "sample_strategy": "default",
            "policy_loss_fn": "ppo",
            "policy_loss_fn_args": {
                "clip_range_low": 0.2,
                "clip_range_high": 0.28,
                "loss_agg_mode": "token-mean",
            },
            "kl_penalty_fn": "none",
            "kl_loss_fn": "none",
            "entropy_loss_fn": "default",
            "loss_agg_mode": "token-mean",
        }


@ALGORITHM_TYPE.register_module("reinforceplusplus")
class ReinforcePlusPlusAlgorithm(AlgorithmType):
    """REINFORCE++: batch-normalised discounted returns, computed in the trainer."""

    use_critic: bool = False
    use_reference: bool = True
    compute_advantage_in_trainer: bool = True
    can_balance_batch: bool = True
    schema: str = "experience"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {
            "repeat_times": 2,
            "advantage_fn": "reinforceplusplus",
            "sample_strategy": "default",
            "policy_loss_fn": "ppo",
            "kl_penalty_fn": "none",
            "kl_loss_fn": "k2",
            "entropy_loss_fn": "default",
        }


@ALGORITHM_TYPE.register_module("rloo")
class RLOOAlgorithm(AlgorithmType):
    """RLOO: leave-one-out baselines over the runs of a task.

    Trinity-RFT computes them in the trainer; ours is a group advantage over Experiences, so it
    runs in the experience pipeline like GRPO (the same numbers, before collation).
    """

    use_critic: bool = False
    use_reference: bool = True
    compute_advantage_in_trainer: bool = False
    can_balance_batch: bool = True
    schema: str = "experience"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {
            "repeat_times": 2,
            "advantage_fn": "rloo",
            "sample_strategy": "default",
            "policy_loss_fn": "ppo",
            "kl_penalty_fn": "none",
            "kl_loss_fn": "k2",
            "entropy_loss_fn": "default",
        }


@ALGORITHM_TYPE.register_module("opmd")
class OPMDAlgorithm(AlgorithmType):
    """OPMD: group baselines (mean or log-avg-exp) in the pipeline, OPMD loss, k2 KL loss."""

    use_critic: bool = False
    use_reference: bool = True
    compute_advantage_in_trainer: bool = False
    can_balance_batch: bool = True
    schema: str = "experience"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {
            "repeat_times": 2,
            "advantage_fn": "opmd",
            "sample_strategy": "default",
            "policy_loss_fn": "opmd",
            "kl_penalty_fn": "none",
            "kl_loss_fn": "k2",
            "entropy_loss_fn": "default",
        }


@ALGORITHM_TYPE.register_module("asymre")
class AsymREAlgorithm(AlgorithmType):
    """AsymRE: asymmetric REINFORCE baseline with the OPMD loss, no reference model."""

    use_critic: bool = False
    use_reference: bool = False
    compute_advantage_in_trainer: bool = False
    can_balance_batch: bool = True
    schema: str = "experience"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {
            "repeat_times": 2,
            "sample_strategy": "default",
            "policy_loss_fn": "opmd",
            "advantage_fn": "asymre",
            "kl_penalty_fn": "none",
            "kl_loss_fn": "none",
            "entropy_loss_fn": "none",
        }


@ALGORITHM_TYPE.register_module("dpo")
class DPOAlgorithm(AlgorithmType):
    """DPO on an offline ``dpo`` data set (train mode only); always keeps a KL loss."""

    use_critic: bool = False
    use_reference: bool = True
    compute_advantage_in_trainer: bool = False
    can_balance_batch: bool = False
    schema: str = "dpo"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {
            "sample_strategy": "default",
            "policy_loss_fn": "dpo",
            "kl_loss_fn": "k2",
            "entropy_loss_fn": "default",
        }

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
class TOPRAlgorithm(AlgorithmType):
    """TOPR (https://arxiv.org/abs/2503.14286): REINFORCE advantages, TOPR loss."""

    use_critic: bool = False
    use_reference: bool = True
    compute_advantage_in_trainer: bool = False
    can_balance_batch: bool = True
    schema: str = "experience"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {
            "repeat_times": 2,
            "advantage_fn": "reinforce",
            "sample_strategy": "default",
            "policy_loss_fn": "topr",
            "kl_penalty_fn": "none",
            "kl_loss_fn": "k2",
            "entropy_loss_fn": "default",
        }


@ALGORITHM_TYPE.register_module("cispo")
class CISPOAlgorithm(AlgorithmType):
    """CISPO (https://arxiv.org/abs/2506.13585): GRPO advantages, clipped-IS-weight loss."""

    use_critic: bool = False
    use_reference: bool = True
    compute_advantage_in_trainer: bool = False
    can_balance_batch: bool = True
    schema: str = "experience"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {
            "repeat_times": 2,
            "advantage_fn": "grpo",
            "sample_strategy": "default",
            "policy_loss_fn": "cispo",
            "kl_penalty_fn": "none",
            "kl_loss_fn": "k2",
            "entropy_loss_fn": "default",
        }


@ALGORITHM_TYPE.register_module("gspo")
class GSPOAlgorithm(AlgorithmType):
    """GSPO (https://arxiv.org/abs/2507.18071): GRPO advantages, sequence-level ratio loss."""

    use_critic: bool = False
    use_reference: bool = True
    compute_advantage_in_trainer: bool = False
    can_balance_batch: bool = True
    schema: str = "experience"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {
            "repeat_times": 2,
            "advantage_fn": "grpo",
            "sample_strategy": "default",
            "policy_loss_fn": "gspo",
            "kl_penalty_fn": "none",
            "kl_loss_fn": "k2",
            "entropy_loss_fn": "default",
        }


@ALGORITHM_TYPE.register_module("sapo")
class SAPOAlgorithm(AlgorithmType):
    """SAPO: GRPO advantages, a temperature-controlled soft gate instead of hard clipping."""

    use_critic: bool = False
    use_reference: bool = True
    compute_advantage_in_trainer: bool = False
    can_balance_batch: bool = True
    schema: str = "experience"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {
            "repeat_times": 2,
            "advantage_fn": "grpo",
            "sample_strategy": "default",
            "policy_loss_fn": "sapo",
            "kl_penalty_fn": "none",
            "kl_loss_fn": "k2",
            "entropy_loss_fn": "default",
        }


@ALGORITHM_TYPE.register_module("mix")
class MIXAlgorithm(AlgorithmType):
    """MIX: RL rollouts and expert (SFT) data in one batch, GRPO advantages, mix loss.

    The ``mix`` sample strategy marks expert rows (``info["is_expert"]``, collated into the
    ``expert_mask`` / ``is_expert_mask`` batch fields) for the ``mix`` policy loss.
    """

    use_critic: bool = False
    use_reference: bool = True
    compute_advantage_in_trainer: bool = False
    use_rollout: bool = True
    can_balance_batch: bool = True
    schema: str = "experience"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {
            "repeat_times": 8,
            "advantage_fn": "grpo",
            "policy_loss_fn": "mix",
            "sample_strategy": "mix",
            "entropy_loss_fn": "mix",
        }


#: The reward a rollout needs for RAFT to train on it when the config names no ``reward_filter``:
#: success for the 0/1 verifiable rewards (``math_reward``, ``arithmetic_reward``, countdown).
RAFT_DEFAULT_REWARD_THRESHOLD = 1.0


@ALGORITHM_TYPE.register_module("raft")
class RAFTAlgorithm(AlgorithmType):
    """RAFT (reward-ranked fine-tuning): the SFT loss on the *successful* rollouts only.

    The filter is the algorithm: SFT on every rollout only imitates the current policy (its own
    samples, wrong ones included) and teaches nothing, which is what RAFT did here before its
    :meth:`check_config` added the filter. A config whose experience pipeline names no
    ``reward_filter`` gets one keeping rollouts with reward ``>=``
    :data:`RAFT_DEFAULT_REWARD_THRESHOLD` (a warning says so); a ``reward_filter`` the user
    configured, with any threshold, is left as it is.
    """

    use_critic: bool = False
    use_reference: bool = False
    compute_advantage_in_trainer: bool = False
    can_balance_batch: bool = True
    schema: str = "experience"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {
            "sample_strategy": "default",
            "policy_loss_fn": "sft",
            "kl_loss_fn": "none",
            "entropy_loss_fn": "none",
        }

    @classmethod
    def check_config(cls, config: Config) -> list[str]:
        from trinity.common.config import OperatorConfig

        if config.mode == "train":  # offline RAFT trains on a prepared (filtered) data set
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
class MultiStepGRPOAlgorithm(AlgorithmType):
    """GRPO for multi-step (agentic) runs: episode advantages broadcast to every step."""

    use_critic: bool = False
    use_reference: bool = True
    compute_advantage_in_trainer: bool = False
    can_balance_batch: bool = True
    schema: str = "experience"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {
            "repeat_times": 8,
            "advantage_fn": "step_wise_grpo",
            "sample_strategy": "default",
            "policy_loss_fn": "ppo",
            "kl_penalty_fn": "none",
            "kl_loss_fn": "k2",
            "entropy_loss_fn": "default",
        }
