"""resolve_algorithm: type defaults, user overrides, argument merging, errors, building."""

from __future__ import annotations

import pytest

from trinity.algorithm.advantage_fn import ADVANTAGE_FN
from trinity.algorithm.algorithm import ALGORITHM_TYPE, COMPONENT_FIELDS, OPMDAlgorithm
from trinity.algorithm.entropy_loss_fn import ENTROPY_LOSS_FN
from trinity.algorithm.kl_fn import KL_FN
from trinity.algorithm.policy_loss_fn import POLICY_LOSS_FN
from trinity.algorithm.resolve import ResolvedAlgorithm, UnknownComponentError, resolve_algorithm
from trinity.algorithm.sample_strategy import SAMPLE_STRATEGY
from trinity.common.config import AlgorithmConfig, load_config
from trinity.utils.registry import UnknownModuleError

STEP3 = {
    "algorithm_type": "opmd",
    "repeat_times": 8,
    "advantage_fn_args": {"opmd_baseline": "logavgexp", "tau": 0.99},
    "policy_loss_fn_args": {"tau": 0.99},
}


def test_opmd_alone_resolves_to_trinity_rft_defaults():
    resolved = resolve_algorithm(load_config({"algorithm": {"algorithm_type": "opmd"}}))
    assert isinstance(resolved, ResolvedAlgorithm)
    assert resolved.algorithm is OPMDAlgorithm
    # Trinity-RFT's OPMDAlgorithm.default_config()
    assert resolved.repeat_times == 2
    assert resolved.sample_strategy == "default"
    assert resolved.advantage_fn == "opmd"
    assert resolved.policy_loss_fn == "opmd"
    assert resolved.kl_penalty_fn == "none"
    assert resolved.kl_loss_fn == "k2"
    assert resolved.entropy_loss_fn == "default"
    assert resolved.loss_agg_mode == "token-mean"
    # arguments: each component's default_args (the type sets none for OPMD)
    assert resolved.advantage_fn_args == {"opmd_baseline": "mean", "tau": 1.0}
    assert resolved.policy_loss_fn_args == {"tau": 1.0, "loss_agg_mode": "token-mean"}
    assert resolved.classes["advantage_fn"] is ADVANTAGE_FN.get("opmd")
    assert resolved.classes["policy_loss_fn"] is POLICY_LOSS_FN.get("opmd")
    assert resolved.classes["kl_loss_fn"] is KL_FN.get("k2")
    assert resolved.classes["entropy_loss_fn"] is ENTROPY_LOSS_FN.get("default")
    assert resolved.classes["sample_strategy"] is SAMPLE_STRATEGY.get("default")
    assert (resolved.use_critic, resolved.use_reference) == (False, True)
    assert resolved.compute_advantage_in_trainer is False
    assert resolved.schema == "experience"
    assert resolved.warnings == ()


def test_step3_overrides_exactly_the_fields_it_sets():
    base = resolve_algorithm({"algorithm_type": "opmd"}).to_dict()
    step3 = resolve_algorithm(load_config({"algorithm": STEP3})).to_dict()
    changed = {k for k in base if base[k] != step3[k]}
    assert changed == {"repeat_times", "advantage_fn_args", "policy_loss_fn_args"}
    assert step3["repeat_times"] == 8
    assert step3["advantage_fn_args"] == {"opmd_baseline": "logavgexp", "tau": 0.99}
    assert step3["policy_loss_fn_args"] == {"tau": 0.99, "loss_agg_mode": "token-mean"}


def test_accepts_config_algorithm_config_and_mapping():
    from_config = resolve_algorithm(load_config({"algorithm": STEP3})).to_dict()
    from_section = resolve_algorithm(AlgorithmConfig(**STEP3)).to_dict()
    from_mapping = resolve_algorithm(STEP3).to_dict()
    from_config_dict = resolve_algorithm({"algorithm": STEP3}).to_dict()
    assert from_config == from_section == from_mapping == from_config_dict
    with pytest.raises(TypeError):
        resolve_algorithm(42)  # type: ignore[arg-type]


def test_explicit_value_equal_to_the_global_default_still_counts():
    # AlgorithmConfig.repeat_times defaults to 1; writing 1 must beat GRPO's default 2
    assert resolve_algorithm({"algorithm_type": "grpo"}).repeat_times == 2
    assert resolve_algorithm({"algorithm_type": "grpo", "repeat_times": 1}).repeat_times == 1


def test_user_names_override_type_defaults():
    resolved = resolve_algorithm(
        {"algorithm_type": "grpo", "policy_loss_fn": "gspo", "kl_loss_fn": "low_var_kl"}
    )
    assert resolved.policy_loss_fn == "gspo"
    assert resolved.classes["policy_loss_fn"] is POLICY_LOSS_FN.get("gspo")
    assert resolved.kl_loss_fn == "low_var_kl"
    assert resolved.advantage_fn == "grpo"


def test_user_args_merge_over_type_default_args():
    resolved = resolve_algorithm(
        {"algorithm_type": "dapo", "policy_loss_fn_args": {"clip_range_high": 0.3}}
    )
    args = resolved.policy_loss_fn_args
    assert args["clip_range_high"] == 0.3
    assert args["clip_range_low"] == 0.2  # DAPO default kept
    assert args["loss_agg_mode"] == "token-mean"
    ppo_defaults = POLICY_LOSS_FN.get("ppo").default_args()
    assert set(ppo_defaults) <= set(args)  # the loss's own defaults underneath


def test_type_default_args_do_not_follow_a_swapped_component():
    resolved = resolve_algorithm({"algorithm_type": "dapo", "policy_loss_fn": "gspo"})
    assert resolved.policy_loss_fn_args == POLICY_LOSS_FN.get("gspo").default_args()


def test_top_level_loss_agg_mode_overrides_the_policy_loss():
    resolved = resolve_algorithm({"algorithm_type": "grpo", "loss_agg_mode": "seq-mean-token-sum"})
    assert resolved.loss_agg_mode == "seq-mean-token-sum"
    assert resolved.policy_loss_fn_args["loss_agg_mode"] == "seq-mean-token-sum"
    assert resolved.build_policy_loss_fn().loss_agg_mode == "seq-mean-token-sum"
    assert resolved.warnings == ()

    conflicting = resolve_algorithm(
        {
            "algorithm_type": "grpo",
            "loss_agg_mode": "seq-mean-token-sum",
            "policy_loss_fn_args": {"loss_agg_mode": "token-mean"},
        }
    )
    assert conflicting.policy_loss_fn_args["loss_agg_mode"] == "seq-mean-token-sum"
    assert len(conflicting.warnings) == 1 and "overrides" in conflicting.warnings[0]


def test_loss_agg_mode_follows_the_policy_loss_when_not_set():
    resolved = resolve_algorithm({"algorithm_type": "gspo"})
    assert resolved.loss_agg_mode == POLICY_LOSS_FN.get("gspo").default_args()["loss_agg_mode"]
    resolved = resolve_algorithm(
        {"algorithm_type": "grpo", "policy_loss_fn_args": {"loss_agg_mode": "seq-mean-token-mean"}}
    )
    assert resolved.loss_agg_mode == "seq-mean-token-mean"


@pytest.mark.parametrize(
    ("field", "value", "registry_name"),
    [
        ("algorithm_type", "opmdd", "algorithm_type"),
        ("policy_loss_fn", "ppoo", "policy_loss_fn"),
        ("advantage_fn", "grpoo", "advantage_fn"),
        ("kl_loss_fn", "k9", "kl_fn"),
        ("kl_penalty_fn", "nope", "kl_fn"),
        ("entropy_loss_fn", "maximal", "entropy_loss_fn"),
        ("sample_strategy", "fancy", "sample_strategy"),
    ],
)
def test_unknown_names_name_the_field_and_list_known_names(field, value, registry_name):
    config = {"algorithm_type": "grpo", field: value}
    with pytest.raises(UnknownComponentError) as info:
        resolve_algorithm(config)
    err = info.value
    assert isinstance(err, UnknownModuleError) and isinstance(err, ValueError)
    assert err.field == f"algorithm.{field}"
    message = str(err)
    assert message.startswith(f"algorithm.{field}: Unknown {registry_name} name {value!r}")
    assert "Known names:" in message and err.known
    if field == "policy_loss_fn":
        assert "Did you mean 'ppo'?" in message


def test_user_chosen_advantage_with_another_placement_warns():
    resolved = resolve_algorithm({"algorithm_type": "ppo", "advantage_fn": "grpo"})
    assert len(resolved.warnings) == 1
    assert "experience pipeline" in resolved.warnings[0]


def test_build_components():
    resolved = resolve_algorithm(STEP3)
    built = resolved.build_components()
    assert set(built) == set(COMPONENT_FIELDS) - {"sample_strategy"}
    for field, obj in built.items():
        assert isinstance(obj, resolved.classes[field])
    assert built["advantage_fn"].opmd_baseline == "logavgexp"
    assert built["advantage_fn"].tau == 0.99
    assert built["policy_loss_fn"].tau == 0.99
    with pytest.raises(ValueError, match="build_sample_strategy"):
        resolved.build("sample_strategy")


def test_build_sample_strategy_with_readers():
    class Reader:
        def read(self, batch_size=None):
            return []

        async def read_async(self, batch_size=None):
            return []

    resolved = resolve_algorithm(
        {
            "algorithm_type": "grpo",
            "sample_strategy": "staleness_control",
            "sample_strategy_args": {"max_staleness": 2},
        }
    )
    strategy = resolved.build_sample_strategy({"experience_buffer": Reader()}, train_batch_size=8)
    assert strategy.max_staleness == 2 and strategy.train_batch_size == 8


def test_apply_to_fills_every_field():
    config = AlgorithmConfig(**STEP3)
    filled = resolve_algorithm(config).apply_to(config)
    for field in COMPONENT_FIELDS:
        assert getattr(filled, field) is not None
        assert getattr(filled, f"{field}_args") is not None
    assert filled.loss_agg_mode == "token-mean" and filled.repeat_times == 8
    assert config.advantage_fn is None  # the input is left alone
    # resolving the filled config again changes nothing
    assert resolve_algorithm(filled).to_dict() == resolve_algorithm(config).to_dict()


@pytest.mark.parametrize("name", ALGORITHM_TYPE.list())
def test_every_type_builds_all_components(name):
    resolved = resolve_algorithm({"algorithm_type": name})
    built = resolved.build_components()
    assert all(obj is not None for obj in built.values())


def test_apply_algorithm_defaults_rederives_batch_sizes_from_the_type():
    from trinity.algorithm import apply_algorithm_defaults
    from trinity.common.config import Config

    data = {
        "algorithm": {"algorithm_type": "grpo"},
        "buffer": {"batch_size": 8, "explorer_input": {"taskset": {"path": "tasks.jsonl"}}},
    }
    config = Config.from_dict(data)
    assert config.buffer.train_batch_size == 8  # schema default repeat_times 1
    done = apply_algorithm_defaults(config)
    assert done.algorithm.repeat_times == 2  # GRPO's default
    assert done.buffer.train_batch_size == 16
    assert done.buffer.explorer_input.taskset.repeat_times == 2
    assert done.algorithm.policy_loss_fn == "ppo" and done.algorithm.kl_loss_fn == "k2"
    # what the user set wins
    data["algorithm"]["repeat_times"] = 4
    assert apply_algorithm_defaults(Config.from_dict(data)).buffer.train_batch_size == 32


@pytest.mark.parametrize("name", ALGORITHM_TYPE.list())
def test_each_algorithm_type_is_one_line_of_yaml(name, tmp_path):
    """`algorithm: {algorithm_type: NAME}` alone resolves and builds every component."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"algorithm:\n  algorithm_type: {name}\n")
    resolved = resolve_algorithm(load_config(cfg))
    built = resolved.build_components()
    assert resolved.algorithm_type == name
    assert built["policy_loss_fn"] is not None
    assert all(v is not None for k, v in built.items() if k != "advantage_fn")


def test_staleness_control_corrects_stale_samples_when_rollout_correction_is_set():
    """``sample_strategy_args.stale`` is filled from ``algorithm.rollout_correction``: a run
    that reweights the rollout/training mismatch keeps samples beyond ``max_staleness``
    (``correct``), any other drops them; ``correct`` without a correction is refused."""
    from trinity.common.config import ConfigError

    def resolved(**algorithm):
        section = {
            "algorithm_type": "grpo",
            "sample_strategy": "staleness_control",
            "sample_strategy_args": {"max_staleness": 1},
            **algorithm,
        }
        return resolve_algorithm(load_config({"algorithm": section}))

    assert resolved().sample_strategy_args["stale"] == "drop"
    token_is = {"rollout_is": "token", "rollout_is_threshold": 2.0}
    assert resolved(rollout_correction=token_is).sample_strategy_args["stale"] == "correct"
    bypass = {"bypass_mode": True}
    assert resolved(rollout_correction=bypass).sample_strategy_args["stale"] == "correct"
    metrics_only: dict = {}  # the section set, but nothing that acts on a sample
    assert resolved(rollout_correction=metrics_only).sample_strategy_args["stale"] == "drop"
    kept = resolved(
        rollout_correction=token_is,
        sample_strategy_args={"max_staleness": 1, "stale": "drop"},
    )
    assert kept.sample_strategy_args["stale"] == "drop"  # the user's choice stands
    with pytest.raises(ConfigError, match="sample_strategy_args.stale"):
        resolved(sample_strategy_args={"max_staleness": 1, "stale": "correct"})
