"""Algorithm types: registered names, flags and defaults (Trinity-RFT's), hooks."""

from __future__ import annotations

import pytest

from trinity.algorithm.algorithm import (
    ALGORITHM_TYPE,
    COMPONENT_FIELDS,
    GLOBAL_DEFAULT_CONFIG,
    AlgorithmType,
    DPOAlgorithm,
    SFTAlgorithm,
)
from trinity.algorithm.resolve import component_registry, resolve_algorithm
from trinity.common.config import load_config

REQUIRED = [
    "ppo",
    "grpo",
    "dapo",
    "opmd",
    "rloo",
    "reinforceplusplus",
    "gspo",
    "cispo",
    "topr",
    "asymre",
    "sapo",
    "dpo",
    "sft",
    "mix",
]

# name: (use_critic, use_reference, compute_advantage_in_trainer, can_balance_batch, schema)
FLAGS = {
    "ppo": (True, True, True, True, "experience"),
    "grpo": (False, True, False, True, "experience"),
    "dapo": (False, False, False, True, "experience"),
    "opmd": (False, True, False, True, "experience"),
    "rloo": (False, True, False, True, "experience"),
    "reinforceplusplus": (False, True, True, True, "experience"),
    "gspo": (False, True, False, True, "experience"),
    "cispo": (False, True, False, True, "experience"),
    "topr": (False, True, False, True, "experience"),
    "asymre": (False, False, False, True, "experience"),
    "sapo": (False, True, False, True, "experience"),
    "dpo": (False, True, False, False, "dpo"),
    "sft": (False, False, False, True, "sft"),
    "mix": (False, True, False, True, "experience"),
    "raft": (False, False, False, True, "experience"),
    "multi_step_grpo": (False, True, False, True, "experience"),
}

# name: (repeat_times, advantage_fn, policy_loss_fn, kl_loss_fn, entropy_loss_fn, sample_strategy)
# after resolution (so including the global fallbacks for what a type leaves out)
RECIPES = {
    "ppo": (1, "ppo", "ppo", "k2", "default", "default"),
    "grpo": (2, "grpo", "ppo", "k2", "default", "default"),
    "dapo": (16, "grpo", "ppo", "none", "default", "default"),
    "opmd": (2, "opmd", "opmd", "k2", "default", "default"),
    "rloo": (2, "rloo", "ppo", "k2", "default", "default"),
    "reinforceplusplus": (2, "reinforceplusplus", "ppo", "k2", "default", "default"),
    "gspo": (2, "grpo", "gspo", "k2", "default", "default"),
    "cispo": (2, "grpo", "cispo", "k2", "default", "default"),
    "topr": (2, "reinforce", "topr", "k2", "default", "default"),
    "asymre": (2, "asymre", "opmd", "none", "none", "default"),
    "sapo": (2, "grpo", "sapo", "k2", "default", "default"),
    "dpo": (2, "ppo", "dpo", "k2", "default", "default"),
    "sft": (1, "ppo", "sft", "none", "none", "default"),
    "mix": (8, "grpo", "mix", "k2", "mix", "mix"),
    "raft": (1, "ppo", "sft", "none", "none", "default"),
    "multi_step_grpo": (8, "step_wise_grpo", "ppo", "k2", "default", "default"),
}


def test_required_types_are_registered():
    assert set(REQUIRED) <= set(ALGORITHM_TYPE.list())
    for name in REQUIRED:
        cls = ALGORITHM_TYPE.get(name)
        assert issubclass(cls, AlgorithmType)
        assert cls.name() == name


@pytest.mark.parametrize("name", sorted(FLAGS))
def test_flags(name):
    cls = ALGORITHM_TYPE.get(name)
    use_critic, use_reference, in_trainer, balance, schema = FLAGS[name]
    assert cls.flags() == {
        "use_critic": use_critic,
        "use_reference": use_reference,
        "compute_advantage_in_trainer": in_trainer,
        "can_balance_batch": balance,
        "schema": schema,
    }
    assert cls.use_advantage is in_trainer  # the older guide's alias


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_default_recipe_resolves_with_registered_components(name):
    resolved = resolve_algorithm({"algorithm_type": name})
    repeat, adv, loss, kl_loss, entropy, sample = RECIPES[name]
    assert resolved.repeat_times == repeat
    assert resolved.advantage_fn == adv
    assert resolved.policy_loss_fn == loss
    assert resolved.kl_loss_fn == kl_loss
    assert resolved.kl_penalty_fn == "none"
    assert resolved.entropy_loss_fn == entropy
    assert resolved.sample_strategy == sample
    assert resolved.warnings == ()
    for field in COMPONENT_FIELDS:  # every default name exists in its registry
        assert resolved.classes[field] is component_registry(field).get(getattr(resolved, field))


def test_default_configs_only_use_known_keys():
    allowed = set(COMPONENT_FIELDS) | {f"{f}_args" for f in COMPONENT_FIELDS}
    allowed |= set(AlgorithmType.EXTRA_CONFIG_KEYS)
    for name in ALGORITHM_TYPE.list():
        assert set(ALGORITHM_TYPE.get(name).default_config()) <= allowed, name


def test_global_defaults_cover_every_component():
    assert set(COMPONENT_FIELDS) <= set(GLOBAL_DEFAULT_CONFIG)


def test_ppo_uses_critic_and_gae_in_trainer():
    resolved = resolve_algorithm({"algorithm_type": "ppo"})
    assert resolved.use_critic and resolved.compute_advantage_in_trainer
    assert resolved.classes["advantage_fn"].compute_in_trainer() is True
    assert set(resolved.advantage_fn_args) >= {"gamma", "lam"}


def test_dapo_uses_clip_higher_and_token_mean():
    config = ALGORITHM_TYPE.get("dapo").default_config()
    assert config["policy_loss_fn_args"] == {
        "clip_range_low": 0.2,
        "clip_range_high": 0.28,
        "loss_agg_mode": "token-mean",
    }
    resolved = resolve_algorithm({"algorithm_type": "dapo"})
    assert resolved.policy_loss_fn_args["clip_range_low"] == 0.2
    assert resolved.policy_loss_fn_args["clip_range_high"] == 0.28
    assert resolved.loss_agg_mode == "token-mean"
    loss = resolved.build_policy_loss_fn()
    assert loss.loss_agg_mode == "token-mean"


# ---------------------------------------------------------------- use_advantage / schema


def test_older_guide_use_advantage_alias():
    class ExperienceModel:  # stands in for the buffer's SQL model class the old guide used
        pass

    class OldStyle(AlgorithmType):
        use_critic: bool = False
        use_reference: bool = True
        use_advantage: bool = True
        can_balance_batch: bool = True
        schema: type = ExperienceModel

        @classmethod
        def default_config(cls):
            return {"repeat_times": 2, "advantage_fn": "opmd", "policy_loss_fn": "opmd"}

    assert OldStyle.compute_advantage_in_trainer is True
    assert OldStyle.schema_name() == "experience"
    assert OldStyle.name() == "OldStyle"  # not registered

    class NewStyle(AlgorithmType):
        compute_advantage_in_trainer: bool = True

        @classmethod
        def default_config(cls):
            return {}

    assert NewStyle.use_advantage is True


def test_legacy_schema_classes_map_to_names():
    for class_name, expected in (("SFTDataModel", "sft"), ("DPODataModel", "dpo")):
        model = type(class_name, (), {})
        algo = type("A", (SFTAlgorithm,), {"schema": model})
        assert algo.schema_name() == expected


def test_default_config_is_abstract():
    with pytest.raises(TypeError):
        AlgorithmType()  # type: ignore[abstract]


def test_custom_type_registers_and_resolves():
    @ALGORITHM_TYPE.register_module("test_custom_algo")
    class Custom(AlgorithmType):
        use_reference: bool = True

        @classmethod
        def default_config(cls):
            return {"repeat_times": 4, "advantage_fn": "grpo", "policy_loss_fn": "sapo"}

    try:
        resolved = resolve_algorithm({"algorithm_type": "test_custom_algo"})
        assert resolved.algorithm is Custom and Custom.name() == "test_custom_algo"
        assert (resolved.repeat_times, resolved.policy_loss_fn) == (4, "sapo")
        assert resolved.kl_loss_fn == GLOBAL_DEFAULT_CONFIG["kl_loss_fn"]
    finally:
        ALGORITHM_TYPE.unregister("test_custom_algo")


# ---------------------------------------------------------------- check_config / post_resolve


def _config(mode: str, algorithm_type: str, path: str | None = "/data/train.jsonl"):
    data: dict = {"mode": mode, "algorithm": {"algorithm_type": algorithm_type}}
    if path is not None:
        data["buffer"] = {
            "trainer_input": {
                "experience_buffer": {"name": "offline", "storage_type": "file", "path": path}
            }
        }
    return load_config(data)


@pytest.mark.parametrize("cls", [SFTAlgorithm, DPOAlgorithm])
@pytest.mark.parametrize("mode", ["both", "colocate", "explore"])
def test_offline_algorithms_refuse_online_modes(cls, mode):
    with pytest.raises(ValueError, match=f"does not support mode '{mode}'"):
        cls.check_config(_config(mode, cls.name()))


@pytest.mark.parametrize("cls", [SFTAlgorithm, DPOAlgorithm])
def test_offline_algorithms_need_a_data_path(cls):
    with pytest.raises(ValueError, match="experience_buffer.path is required"):
        cls.check_config(_config("train", cls.name(), path=None))


def test_offline_algorithms_use_checkpoint_sync():
    config = _config("train", "dpo")
    config.synchronizer.sync_method = "memory"
    config.trainer.save_interval = 50
    warnings = DPOAlgorithm.check_config(config)
    assert config.synchronizer.sync_method == "checkpoint"
    assert config.synchronizer.sync_interval == 50
    assert len(warnings) == 2
    assert DPOAlgorithm.check_config(config) == []  # already adjusted: nothing to say


def test_online_types_accept_any_config():
    assert ALGORITHM_TYPE.get("grpo").check_config(_config("both", "grpo")) == []


def test_dpo_keeps_a_kl_loss_and_pairs():
    resolved = resolve_algorithm({"algorithm_type": "dpo", "kl_loss_fn": "none", "repeat_times": 4})
    assert resolved.kl_loss_fn == "k2"
    assert resolved.repeat_times == 2
    assert len(resolved.warnings) == 2
    assert resolve_algorithm({"algorithm_type": "dpo", "kl_loss_fn": "k3"}).kl_loss_fn == "k3"


@pytest.mark.parametrize("name", ALGORITHM_TYPE.list())
def test_advantage_placement_agrees_with_the_default_advantage_fn(name):
    """Where the type says advantages are computed is where its advantage fn expects to run."""
    from trinity.algorithm.advantage_fn import ADVANTAGE_FN

    algo = ALGORITHM_TYPE.get(name)
    adv_name = algo.default_config().get("advantage_fn")
    if adv_name is None:
        return
    fn = ADVANTAGE_FN.get(adv_name)
    assert fn.compute_in_trainer() == algo.compute_advantage_in_trainer, (name, adv_name)
