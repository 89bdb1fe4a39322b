"""Trinity-RFT 0.6's eight other algorithm types: ``cpt``, ``mix_chord``, ``sppo``, ``rec``,
``gigpo``, ``on_policy_distill``, ``jsd`` and ``grpo_verl``.

Each resolves to 0.6's recipe (components, their arguments, flags); each component of that
recipe, built with the resolved arguments, passes the plugin contract kit (``trinity.testing``),
so the recipe a config gets is one the trainer can run; and the types that need something this
release lacks refuse their configs with a message that says what is missing.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from trinity.algorithm import ALGORITHM_TYPE, resolve_algorithm
from trinity.algorithm.algorithm import COMPONENT_FIELDS
from trinity.common.config import load_config
from trinity.common.experience import Experiences
from trinity.testing import (
    AdvantageFnContract,
    EntropyLossContract,
    KLFnContract,
    PolicyLossContract,
    SampleStrategyContract,
)

NEW_TYPES = ("cpt", "mix_chord", "sppo", "rec", "gigpo", "on_policy_distill", "jsd", "grpo_verl")

#: name -> (use_critic, use_reference, compute_advantage_in_trainer, can_balance_batch, schema),
#: Trinity-RFT 0.6's values.
FLAGS: dict[str, tuple[bool, bool, bool, bool, str]] = {
    "cpt": (False, False, False, True, "cpt"),
    "mix_chord": (False, True, False, True, "experience"),
    "sppo": (False, False, False, True, "experience"),
    "rec": (False, True, False, True, "experience"),
    "gigpo": (False, True, False, True, "experience"),
    "on_policy_distill": (False, False, True, True, "experience"),
    "jsd": (False, False, True, True, "experience"),
    "grpo_verl": (False, True, True, True, "experience"),
}

#: name -> resolved (repeat_times, sample_strategy, advantage_fn, policy_loss_fn, kl_penalty_fn,
#: kl_loss_fn, entropy_loss_fn); fields 0.6's recipe leaves out take the global defaults.
RECIPES: dict[str, tuple[Any, ...]] = {
    "cpt": (1, "default", "ppo", "sft", "none", "none", "none"),
    "mix_chord": (8, "mix", "grpo", "mix_chord", "none", "k2", "mix"),
    "sppo": (2, "default", "opmd", "sppo", "none", "none", "none"),
    "rec": (2, "default", "rec", "rec", "none", "k2", "default"),
    "gigpo": (8, "default", "gigpo", "ppo", "none", "k2", "default"),
    "on_policy_distill": (8, "default", "on_policy_distill", "ppo", "none", "none", "none"),
    "jsd": (8, "default", "jsd", "ppo", "none", "none", "none"),
    # 0.6 names "grpo" here; ours names the trainer-side GRPO (0.6's own "grpo_verl")
    "grpo_verl": (2, "default", "grpo_verl", "ppo", "none", "k2", "default"),
}
_RECIPE_FIELDS = ("repeat_times", *COMPONENT_FIELDS)

#: Arguments 0.6's recipes set (a subset of the resolved arguments).
RECIPE_ARGS: dict[str, dict[str, dict[str, Any]]] = {
    "gigpo": {
        "advantage_fn_args": {"omega": 1.0, "gamma": 1.0, "fnorm": "none", "epsilon": 1e-6},
        "policy_loss_fn_args": {
            "clip_range_low": 0.2,
            "clip_range_high": 0.2,
            "loss_agg_mode": "token-mean",
        },
    },
    "on_policy_distill": {"advantage_fn_args": {"kl_coef": 1.0}},
    "jsd": {"advantage_fn_args": {"kl_coef": 1.0, "lambda_coef": 0.5}},
}


def test_all_24_trinity_rft_types_are_registered() -> None:
    assert set(NEW_TYPES) <= set(ALGORITHM_TYPE.list())
    assert len(ALGORITHM_TYPE.list()) >= 24


@pytest.mark.parametrize("name", NEW_TYPES)
def test_resolves_to_the_trinity_rft_recipe(name: str) -> None:
    resolved = resolve_algorithm({"algorithm_type": name})
    assert resolved.algorithm is ALGORITHM_TYPE.get(name)
    assert tuple(getattr(resolved, f) for f in _RECIPE_FIELDS) == RECIPES[name]
    for field, args in RECIPE_ARGS.get(name, {}).items():
        assert getattr(resolved, field).items() >= args.items(), field
    use_critic, use_reference, in_trainer, balance, schema = FLAGS[name]
    assert resolved.use_critic is use_critic
    assert resolved.use_reference is use_reference
    assert resolved.compute_advantage_in_trainer is in_trainer
    assert resolved.can_balance_batch is balance
    assert resolved.schema == schema
    assert resolved.warnings == ()
    if "advantage_fn" in resolved.algorithm.default_config():  # cpt (SFT) uses none
        # where the type computes advantages is where its advantage function runs
        assert resolved.classes["advantage_fn"].compute_in_trainer() is in_trainer


def test_grpo_verl_user_args_reach_the_trainer_side_advantage() -> None:
    resolved = resolve_algorithm(
        {"algorithm_type": "grpo_verl", "advantage_fn_args": {"epsilon": 1e-3}}
    )
    assert resolved.build_advantage_fn().epsilon == 1e-3


# ----------------------------------------------------------------- contract kit, per recipe


def _step(inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """The ``step`` field ``[batch]`` the 'mix' sample strategy adds (mix_chord reads it)."""
    return torch.full((inputs["logprob"].shape[0],), 5, dtype=torch.int32)


def _teacher(batch: Experiences) -> torch.Tensor:
    """Seeded teacher log-probs ``[B, R]`` (a workflow writes them for distillation)."""
    gen = torch.Generator().manual_seed(21)
    return -3.0 * torch.rand(batch.action_mask.shape, generator=gen)


_CONTRACTS = {
    "sample_strategy": (SampleStrategyContract, {}),
    "advantage_fn": (AdvantageFnContract, {"trainer_fields": {"teacher_logprobs": _teacher}}),
    "policy_loss_fn": (PolicyLossContract, {"extra_inputs": {"step": _step}}),
    "kl_penalty_fn": (KLFnContract, {}),
    "kl_loss_fn": (KLFnContract, {}),
    "entropy_loss_fn": (EntropyLossContract, {}),
}
_ATTRS_NEEDED = {  # which components read the extra inputs above
    ("advantage_fn", "on_policy_distill"),
    ("advantage_fn", "jsd"),
    ("policy_loss_fn", "mix_chord"),
}


def _used_fields(name: str) -> tuple[str, ...]:
    """The component fields a type's training uses: all, except the advantage of a type whose
    recipe names none (``cpt`` is supervised: the global fallback ``ppo`` is never called)."""
    if "advantage_fn" in ALGORITHM_TYPE.get(name).default_config():
        return COMPONENT_FIELDS
    return tuple(f for f in COMPONENT_FIELDS if f != "advantage_fn")


def _recipe_contracts() -> dict[str, type]:
    """One contract class per (type, component field): the resolved component and arguments."""
    classes: dict[str, type] = {}
    for name in NEW_TYPES:
        resolved = resolve_algorithm({"algorithm_type": name})
        for field in _used_fields(name):
            contract, attrs = _CONTRACTS[field]
            component = getattr(resolved, field)
            body: dict[str, Any] = {
                "component": resolved.classes[field],
                "registered_name": component,
                "component_args": resolved.args(field),
                "__module__": __name__,
            }
            if (field, component) in _ATTRS_NEEDED:
                body.update(attrs)
            cls_name = f"TestRecipe_{name}_{field}"
            classes[cls_name] = type(cls_name, (contract,), body)
    return classes


globals().update(_recipe_contracts())


def test_every_recipe_component_has_a_contract_class() -> None:
    for name in NEW_TYPES:
        for field in _used_fields(name):
            assert f"TestRecipe_{name}_{field}" in globals()
    assert "TestRecipe_cpt_advantage_fn" not in globals()


# ----------------------------------------------------------------------------- refusals


def _config(algorithm_type: str, mode: str = "both", workflow: str = "math_workflow") -> Any:
    return load_config(
        {
            "mode": mode,
            "algorithm": {"algorithm_type": algorithm_type},
            "buffer": {
                "explorer_input": {
                    "taskset": {
                        "name": "tasks",
                        "path": "/data/tasks.jsonl",
                        "default_workflow_type": workflow,
                    }
                },
                "trainer_input": {
                    "experience_buffer": {
                        "name": "offline",
                        "storage_type": "file",
                        "path": "/data/train.jsonl",
                    }
                },
            },
        }
    )


def test_cpt_trains_on_raw_text_in_mode_train_only() -> None:
    """``cpt`` is SFT on plain text: mode train, ``format.prompt_type: plaintext``; other
    modes and chat-message rows are refused naming the field."""
    cpt = ALGORITHM_TYPE.get("cpt")
    with pytest.raises(ValueError, match=r"'cpt' trains on a fixed data set.*mode 'both'"):
        cpt.check_config(_config("cpt", "both"))
    config = _config("cpt", "train")
    with pytest.raises(ValueError) as info:
        cpt.check_config(config)
    message = str(info.value)
    assert message.startswith("buffer.trainer_input.experience_buffer.format.prompt_type:")
    assert "'messages'" in message and "allowed: 'plaintext'" in message
    config = _config("cpt", "train")
    config.buffer.trainer_input.experience_buffer.format.prompt_type = "plaintext"
    warnings = cpt.check_config(config)
    assert config.synchronizer.sync_method == "checkpoint"
    assert all("cpt" in w for w in warnings)


@pytest.fixture
def math_workflow():
    """``math_workflow`` as registered: trinity-workflows' own where installed (the full
    workspace); in this package's own environment, a stand-in from a ``trinity.*`` module, which
    is what marks a workflow as one of this release's (none writes teacher log-probs)."""
    from trinity.common.workflows.workflow import WORKFLOWS, Workflow

    if "math_workflow" in WORKFLOWS.list():
        yield
        return

    class MathWorkflow(Workflow):
        def run(self) -> list:
            return []

    MathWorkflow.__module__ = "trinity.workflows.single_turn"
    WORKFLOWS.register_module("math_workflow")(MathWorkflow)
    try:
        yield
    finally:
        WORKFLOWS.unregister("math_workflow")


@pytest.mark.parametrize("name", ["on_policy_distill", "jsd"])
def test_distillation_refuses_builtin_workflows_without_teacher_logprobs(
    name: str, math_workflow: None
) -> None:
    with pytest.raises(ValueError) as info:
        ALGORITHM_TYPE.get(name).check_config(_config(name, "both", "math_workflow"))
    message = str(info.value)
    assert message.startswith(f"algorithm.algorithm_type {name!r} ")
    assert "'math_workflow' does not" in message and "teacher_logprobs" in message
    assert "Use on_policy_distill_workflow or on_policy_distill_math_workflow" in message


@pytest.mark.parametrize("name", ["on_policy_distill", "jsd"])
def test_distillation_accepts_plugin_workflows_and_stored_experiences(name: str) -> None:
    from trinity.common.workflows.workflow import WORKFLOWS, Workflow

    cls = ALGORITHM_TYPE.get(name)
    assert cls.check_config(_config(name, "train")) == []  # experiences may carry them

    @WORKFLOWS.register_module("test_teacher_scoring_workflow")
    class TeacherScoring(Workflow):  # a plugin's workflow: its module is not trinity.*
        def run(self) -> list:
            return []

    try:
        config = _config(name, "both", "test_teacher_scoring_workflow")
        assert cls.check_config(config) == []
    finally:
        WORKFLOWS.unregister("test_teacher_scoring_workflow")


@pytest.mark.parametrize("name", ["mix_chord", "sppo", "rec", "gigpo", "grpo_verl"])
def test_online_types_accept_builtin_workflows(name: str) -> None:
    assert ALGORITHM_TYPE.get(name).check_config(_config(name, "both")) == []
