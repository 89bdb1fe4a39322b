"""The built-in algorithm types, pinned: registry name, class, flags and ``default_config()``.

Written down before the types were folded into one declarative base, so the fold (and any later
one) keeps every observable value: configs written for Trinity-RFT must resolve to the same recipe.
Also checks that a type written the guide's old way (set the flags, override ``default_config``)
behaves exactly as before, next to one using the declarative ``config_overrides``.
"""

from __future__ import annotations

from typing import Any

import pytest

import trinity.algorithm.algorithm as algorithm_module
from trinity.algorithm import ALGORITHM_TYPE, AlgorithmType
from trinity.algorithm.algorithm_base import (
    RL_BASE_CONFIG,
    USE_GLOBAL_DEFAULT,
    DeclarativeAlgorithmType,
)

#: name -> (class name, use_critic, use_reference, compute_advantage_in_trainer,
#: can_balance_batch, schema)
FLAGS: dict[str, tuple[str, bool, bool, bool, bool, str]] = {
    "sft": ("SFTAlgorithm", False, False, False, True, "sft"),
    "ppo": ("PPOAlgorithm", True, True, True, True, "experience"),
    "grpo": ("GRPOAlgorithm", False, True, False, True, "experience"),
    "dapo": ("DAPOAlgorithm", False, False, False, True, "experience"),
    "reinforceplusplus": ("ReinforcePlusPlusAlgorithm", False, True, True, True, "experience"),
    "rloo": ("RLOOAlgorithm", False, True, False, True, "experience"),
    "opmd": ("OPMDAlgorithm", False, True, False, True, "experience"),
    "asymre": ("AsymREAlgorithm", False, False, False, True, "experience"),
    "dpo": ("DPOAlgorithm", False, True, False, False, "dpo"),
    "topr": ("TOPRAlgorithm", False, True, False, True, "experience"),
    "cispo": ("CISPOAlgorithm", False, True, False, True, "experience"),
    "gspo": ("GSPOAlgorithm", False, True, False, True, "experience"),
    "sapo": ("SAPOAlgorithm", False, True, False, True, "experience"),
    "mix": ("MIXAlgorithm", False, True, False, True, "experience"),
    "raft": ("RAFTAlgorithm", False, False, False, True, "experience"),
    "multi_step_grpo": ("MultiStepGRPOAlgorithm", False, True, False, True, "experience"),
    "cpt": ("CPTAlgorithm", False, False, False, True, "cpt"),
    "mix_chord": ("MIXCHORDAlgorithm", False, True, False, True, "experience"),
    "sppo": ("sPPOAlgorithm", False, False, False, True, "experience"),
    "rec": ("RECAlgorithm", False, True, False, True, "experience"),
    "gigpo": ("GiGPOAlgorithm", False, True, False, True, "experience"),
    "on_policy_distill": ("OnPolicyDistillAlgorithm", False, False, True, True, "experience"),
    "jsd": ("JSDAlgorithm", False, False, True, True, "experience"),
    "grpo_verl": ("GRPOverlAlgorithm", False, True, True, True, "experience"),
}

#: The columns of CONFIGS: what ``default_config()`` names (``None``: the key is absent, so the
#: field falls back to ``GLOBAL_DEFAULT_CONFIG``).
COLUMNS = (
    "repeat_times",
    "advantage_fn",
    "sample_strategy",
    "policy_loss_fn",
    "kl_penalty_fn",
    "kl_loss_fn",
    "entropy_loss_fn",
)
CONFIGS: dict[str, tuple[Any, ...]] = {
    "sft": (None, None, "default", "sft", None, "none", "none"),
    "ppo": (1, "ppo", "default", "ppo", "none", "k2", "default"),
    "grpo": (2, "grpo", "default", "ppo", "none", "k2", "default"),
    "dapo": (16, "grpo", "default", "ppo", "none", "none", "default"),
    "reinforceplusplus": (2, "reinforceplusplus", "default", "ppo", "none", "k2", "default"),
    "rloo": (2, "rloo", "default", "ppo", "none", "k2", "default"),
    "opmd": (2, "opmd", "default", "opmd", "none", "k2", "default"),
    "asymre": (2, "asymre", "default", "opmd", "none", "none", "none"),
    "dpo": (None, None, "default", "dpo", None, "k2", "default"),
    "topr": (2, "reinforce", "default", "topr", "none", "k2", "default"),
    "cispo": (2, "grpo", "default", "cispo", "none", "k2", "default"),
    "gspo": (2, "grpo", "default", "gspo", "none", "k2", "default"),
    "sapo": (2, "grpo", "default", "sapo", "none", "k2", "default"),
    "mix": (8, "grpo", "mix", "mix", None, None, "mix"),
    "raft": (None, None, "default", "sft", None, "none", "none"),
    "multi_step_grpo": (8, "step_wise_grpo", "default", "ppo", "none", "k2", "default"),
    "cpt": (None, None, "default", "sft", None, "none", "none"),
    "mix_chord": (8, "grpo", "mix", "mix_chord", None, None, "mix"),
    "sppo": (2, "opmd", "default", "sppo", "none", "none", "none"),
    "rec": (2, "rec", "default", "rec", "none", "k2", "default"),
    "gigpo": (8, "gigpo", "default", "ppo", "none", "k2", "default"),
    "on_policy_distill": (8, "on_policy_distill", "default", "ppo", "none", "none", "none"),
    "jsd": (8, "jsd", "default", "ppo", "none", "none", "none"),
    # Trinity-RFT names "grpo" (the pipeline's grouped GRPO); ours the trainer-side variant
    "grpo_verl": (2, "grpo_verl", "default", "ppo", "none", "k2", "default"),
}
#: Keys beyond the columns (DAPO's clip-higher PPO arguments and token-mean aggregation).
EXTRA: dict[str, dict[str, Any]] = {
    "dapo": {
        "policy_loss_fn_args": dict(
            clip_range_low=0.2, clip_range_high=0.28, loss_agg_mode="token-mean"
        ),
        "loss_agg_mode": "token-mean",
    },
    "gigpo": {
        "advantage_fn_args": dict(omega=1.0, gamma=1.0, fnorm="none", epsilon=1e-6),
        "policy_loss_fn_args": dict(
            clip_range_low=0.2, clip_range_high=0.2, loss_agg_mode="token-mean"
        ),
    },
    "on_policy_distill": {"advantage_fn_args": {"kl_coef": 1.0}},
    "jsd": {"advantage_fn_args": {"kl_coef": 1.0, "lambda_coef": 0.5}},
}


def pinned_config(name: str) -> dict[str, Any]:
    named = {k: v for k, v in zip(COLUMNS, CONFIGS[name], strict=True) if v is not None}
    return {**named, **EXTRA.get(name, {})}


PINNED = sorted(FLAGS)


@pytest.mark.parametrize("name", PINNED)
def test_builtin_type_is_pinned(name: str) -> None:
    class_name, critic, reference, in_trainer, balance, schema = FLAGS[name]
    cls = ALGORITHM_TYPE.get(name)
    assert cls is getattr(algorithm_module, class_name)
    assert cls.__name__ == class_name and cls.name() == name
    assert issubclass(cls, AlgorithmType)
    assert cls.use_critic is critic
    assert cls.use_reference is reference
    assert cls.compute_advantage_in_trainer is in_trainer
    assert cls.use_advantage is in_trainer  # the older guide's name reads the same
    assert cls.can_balance_batch is balance
    assert cls.schema == schema and cls.schema_name() == schema
    assert cls.use_rollout is True
    assert cls.flags() == {
        "use_critic": critic,
        "use_reference": reference,
        "compute_advantage_in_trainer": in_trainer,
        "can_balance_batch": balance,
        "schema": schema,
    }
    assert cls.default_config() == pinned_config(name)


def test_every_builtin_type_is_pinned() -> None:
    builtin = {
        name
        for name in ALGORITHM_TYPE.list()
        if ALGORITHM_TYPE.get(name).__module__.startswith("trinity.algorithm.")
    }
    assert builtin == set(FLAGS) == set(CONFIGS)
    assert {row[0] for row in FLAGS.values()} <= set(algorithm_module.__all__)


@pytest.mark.parametrize("name", PINNED)
def test_default_config_is_a_fresh_copy(name: str) -> None:
    """Callers may edit the dict they get (nested ``*_args`` included) without touching the type."""
    cls = ALGORITHM_TYPE.get(name)
    first = cls.default_config()
    for value in first.values():
        if isinstance(value, dict):
            value["edited"] = True
    first["repeat_times"] = -1
    assert cls.default_config() == pinned_config(name)


def test_old_style_subclass_works_as_before() -> None:
    """The README / guide pattern: flags as class attributes, ``default_config`` overridden."""

    class MyGRPO(AlgorithmType):
        use_critic = False
        use_reference = True
        compute_advantage_in_trainer = False
        can_balance_batch = True
        schema = "experience"

        @classmethod
        def default_config(cls):
            return {"repeat_times": 8, "advantage_fn": "grpo", "kl_loss_fn": "k3"}

    assert MyGRPO.default_config() == {
        "repeat_times": 8,
        "advantage_fn": "grpo",
        "kl_loss_fn": "k3",
    }
    assert MyGRPO.flags()["use_reference"] is True
    assert MyGRPO.name() == "MyGRPO"

    class Forgot(AlgorithmType):  # no default_config: still abstract, as before
        pass

    with pytest.raises(TypeError):
        Forgot()  # type: ignore[abstract]

    class OnBuiltin(ALGORITHM_TYPE.get("grpo")):  # a built-in subclassed the old way
        @classmethod
        def default_config(cls):
            return {**super().default_config(), "repeat_times": 4}

    assert OnBuiltin.default_config() == {**pinned_config("grpo"), "repeat_times": 4}
    assert OnBuiltin.use_reference is True


def test_declarative_subclass_merges_overrides() -> None:
    """A subclass of a built-in may declare only what differs; overrides stack along the MRO."""
    GRPO = ALGORITHM_TYPE.get("grpo")

    class Longer(GRPO):
        config_overrides = {"repeat_times": 4}

    class LongerK3(Longer):
        config_overrides = {"kl_loss_fn": "k3"}

    assert Longer.default_config() == {**pinned_config("grpo"), "repeat_times": 4}
    expected = {**pinned_config("grpo"), "repeat_times": 4, "kl_loss_fn": "k3"}
    assert LongerK3.default_config() == expected
    assert GRPO.default_config() == pinned_config("grpo")


def test_declared_keys_are_checked_when_the_class_is_defined() -> None:
    with pytest.raises(TypeError, match="repeat_time"):

        class Typo(DeclarativeAlgorithmType):
            config_overrides = {"repeat_time": 4}


def test_use_global_default_leaves_the_key_out() -> None:
    class NoKL(DeclarativeAlgorithmType):
        config_overrides = {"kl_loss_fn": USE_GLOBAL_DEFAULT, "kl_penalty_fn": USE_GLOBAL_DEFAULT}

    assert "kl_loss_fn" not in NoKL.default_config()
    assert "kl_penalty_fn" not in NoKL.default_config()
    assert NoKL.default_config()["repeat_times"] == RL_BASE_CONFIG["repeat_times"]
