"""``algorithm.rollout_correction``: verl 0.9's keys and values, checked when the config loads,
each bad value reported at its key with what is allowed."""

from __future__ import annotations

import pytest

from trinity.common.config import ConfigError, load_config
from trinity.common.config.rollout_correction import (
    PRESETS,
    RolloutCorrectionConfig,
    parse_is_threshold,
    parse_rs_thresholds,
)


def section(**values):
    return load_config({"algorithm": {"rollout_correction": values}}).algorithm.rollout_correction


def test_unset_is_off_and_empty_takes_verls_yaml_defaults():
    assert load_config({}).algorithm.rollout_correction is None
    rc = section()
    assert (rc.rollout_is, rc.rollout_is_threshold, rc.rollout_rs, rc.bypass_mode) == (
        None,
        2.0,
        None,
        False,
    )
    assert (rc.rollout_is_batch_normalize, rc.loss_type) == (False, "ppo_clip")


def test_a_trinity_rft_mapping_loads_and_round_trips():
    values = {
        "rollout_is": "Token",
        "rollout_is_threshold": "0.5_5.0",
        "rollout_is_batch_normalize": True,
        "rollout_rs": "seq_mean_k1, token_k3,seq_mean_k1",
        "rollout_rs_threshold": "0.999_1.001,0.02",
        "bypass_mode": True,
        "loss_type": "REINFORCE",
    }
    config = load_config({"algorithm": {"rollout_correction": values}})
    rc = config.algorithm.rollout_correction
    assert rc.rollout_is == "token" and rc.loss_type == "reinforce"
    assert rc.rollout_rs == "seq_mean_k1,token_k3"  # normalised, the duplicate dropped
    assert rc.is_bounds == (5.0, 0.5)
    assert rc.rs_bounds == {"seq_mean_k1": (0.999, 1.001), "token_k3": (None, 0.02)}
    dumped = config.to_dict()["algorithm"]["rollout_correction"]
    assert RolloutCorrectionConfig.model_validate(dumped) == rc


@pytest.mark.parametrize(
    "values,key,expected",
    [
        ({"rollout_is": "seq"}, "rollout_is", "allowed values: 'token' or 'sequence'"),
        ({"loss_type": "pg"}, "loss_type", "allowed values: 'ppo_clip' or 'reinforce'"),
        ({"rollout_is_threshold": True}, "rollout_is_threshold", "'lower_upper' string"),
        ({"rollout_is_threshold": "5_0.5"}, "rollout_is_threshold", "lower bound exceeds"),
        ({"rollout_is_threshold": 0}, "rollout_is_threshold", "must be > 0"),
        ({"rollout_is_threshold": "two"}, "rollout_is_threshold", "'two' is not a number"),
        ({"rollout_rs": "token_k4"}, "rollout_rs", "allowed options: token_k1, token_k2"),
        ({"rollout_rs": ""}, "rollout_rs", "names no option"),
        ({"rollout_rs": "token_k1"}, "rollout_rs_threshold", "is required with rollout_rs"),
        (
            {"rollout_rs": "token_k2", "rollout_rs_threshold": "0.5_2"},
            "rollout_rs_threshold",
            "single upper bound",
        ),
        (
            {"rollout_rs": "token_k1,token_k2", "rollout_rs_threshold": "1,2,3"},
            "rollout_rs_threshold",
            "3 thresholds for 2 rollout_rs options",
        ),
        (
            {"rollout_rs": "seq_sum_k1", "rollout_rs_threshold": "2_1"},
            "rollout_rs_threshold",
            "lower bound exceeds",
        ),
        ({"rollout_rs_threshold": [1]}, "rollout_rs_threshold", "a number or a string"),
        ({"rollout_is_level": "token"}, "rollout_is_level", "unknown key"),
    ],
)
def test_bad_values_name_the_key_and_what_is_allowed(values, key, expected):
    with pytest.raises(ConfigError) as info:
        section(**values)
    (issue,) = info.value.errors
    assert issue.path == f"algorithm.rollout_correction.{key}"
    assert expected in issue.message


def test_threshold_forms_are_verls():
    assert parse_is_threshold(2) == (2.0, None)
    assert parse_is_threshold(" 3.5 ") == (3.5, None)
    assert parse_is_threshold("0.5_5") == (5.0, 0.5)
    # one k1 number u is the window [1/u, u]; one threshold serves every option
    bounds = parse_rs_thresholds(["token_k1", "seq_max_k3"], 2.0)
    assert bounds == {"token_k1": (0.5, 2.0), "seq_max_k3": (None, 2.0)}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_are_valid_sections(name):
    rc = PRESETS[name]()
    assert RolloutCorrectionConfig.model_validate(rc.model_dump()) == rc
    assert rc.bypass_mode == name.startswith("bypass")
