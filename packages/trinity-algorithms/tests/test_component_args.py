"""Every built-in component declares its arguments (an ``Args`` model) and
:func:`resolve_algorithm` checks a config's ``*_args`` against those declarations.

The declaration is the one source: its defaults must be the component's ``default_args()``
and it must name every ``__init__`` parameter, or validation, forms and docs would disagree
with what the component does.
"""

from __future__ import annotations

import inspect
import math

import pytest

from trinity.algorithm import resolve_algorithm
from trinity.algorithm.algorithm import COMPONENT_FIELDS
from trinity.algorithm.resolve import component_registry
from trinity.common.config import ConfigError, args_model, is_open

BUILTINS = sorted(
    {
        (field if field != "kl_penalty_fn" else "kl_loss_fn", name)
        for field in COMPONENT_FIELDS
        for name in component_registry(field).list()
    }
)


@pytest.mark.parametrize("field, name", BUILTINS, ids=[f"{f}:{n}" for f, n in BUILTINS])
def test_every_builtin_declares_its_arguments(field: str, name: str) -> None:
    cls = component_registry(field).get(name)
    model = args_model(cls)
    assert model is not None and not is_open(model), f"{cls.__name__} declares no arguments"
    assert "Args" in vars(cls) or any("Args" in vars(k) for k in cls.__mro__[1:])
    fields = model.model_fields
    for key, value in (cls.default_args() or {}).items():
        assert key in fields, f"{cls.__name__}.default_args() has {key!r}, Args does not"
        assert fields[key].default == value, (cls.__name__, key)
    skip = {"self", "readers", "buffer_config", "kwargs"}  # wiring, not user arguments
    params = [p for p in inspect.signature(cls.__init__).parameters if p not in skip]
    assert set(params) <= set(fields), (cls.__name__, set(params) - set(fields))
    # the declared defaults build the component
    if field != "sample_strategy":
        from trinity.algorithm.utils import build_component

        build_component(cls, model().model_dump())


def error_of(algorithm: dict) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        resolve_algorithm(algorithm)
    return info.value


def only_issue(error: ConfigError, path: str) -> str:
    assert [i.path for i in error.errors] == [path], [str(i) for i in error.errors]
    return error.errors[0].message


def test_a_string_loss_coefficient_is_refused() -> None:
    message = only_issue(
        error_of({"algorithm_type": "grpo", "kl_loss_fn_args": {"kl_coef": "0.01"}}),
        "algorithm.kl_loss_fn_args.kl_coef",
    )
    assert "expected a number, got str '0.01'" in message and "kl_loss_fn" in message
    message = only_issue(
        error_of({"algorithm_type": "grpo", "entropy_loss_fn_args": {"entropy_coef": "high"}}),
        "algorithm.entropy_loss_fn_args.entropy_coef",
    )
    assert "got str" in message


def test_an_unknown_key_gets_the_closest_valid_name() -> None:
    message = only_issue(
        error_of({"algorithm_type": "ppo", "policy_loss_fn_args": {"clip_rnage": 0.2}}),
        "algorithm.policy_loss_fn_args.clip_rnage",
    )
    assert "did you mean 'clip_range'?" in message and "'ppo'" in message
    message = only_issue(
        error_of({"algorithm_type": "opmd", "advantage_fn_args": {"opmd_baseline": "logavg"}}),
        "algorithm.advantage_fn_args.opmd_baseline",
    )
    assert "did you mean 'logavgexp'?" in message


@pytest.mark.parametrize(
    "algorithm, path, expected",
    [
        (
            {"algorithm_type": "ppo", "advantage_fn_args": {"gamma": 1.5}},
            "advantage_fn_args.gamma",
            "<= 1",
        ),
        (
            {"algorithm_type": "ppo", "advantage_fn_args": {"lam": -0.1}},
            "advantage_fn_args.lam",
            ">= 0",
        ),
        (
            {"algorithm_type": "grpo", "advantage_fn_args": {"epsilon": 0}},
            "advantage_fn_args.epsilon",
            "> 0",
        ),
        (
            {"algorithm_type": "ppo", "policy_loss_fn_args": {"clip_range": math.inf}},
            "policy_loss_fn_args.clip_range",
            "finite",
        ),
        (
            {"algorithm_type": "ppo", "policy_loss_fn_args": {"clip_ratio_c": 0.5}},
            "policy_loss_fn_args.clip_ratio_c",
            "> 1",
        ),
        (
            {"algorithm_type": "grpo", "kl_loss_fn_args": {"kl_coef": -1}},
            "kl_loss_fn_args.kl_coef",
            ">= 0",
        ),
        (
            {"algorithm_type": "mix", "policy_loss_fn_args": {"ppo_mini_batch_size": True}},
            "policy_loss_fn_args.ppo_mini_batch_size",
            "got bool",
        ),
        (
            {"algorithm_type": "mix", "policy_loss_fn_args": {"mu": 2.0}},
            "policy_loss_fn_args.mu",
            "<= 1",
        ),
        (
            {"algorithm_type": "grpo", "advantage_fn_args": {"std_cal_level": "grop"}},
            "advantage_fn_args.std_cal_level",
            "did you mean 'group'",
        ),
        (
            {
                "algorithm_type": "grpo",
                "sample_strategy": "mix",
                "sample_strategy_args": {"expert_data_ratio": 1.5},
            },
            "sample_strategy_args.expert_data_ratio",
            "<= 1",
        ),
        (
            {"algorithm_type": "ppo", "policy_loss_fn_args": {"loss_agg_mode": "seq-mean"}},
            "policy_loss_fn_args.loss_agg_mode",
            "allowed values",
        ),
    ],
)
def test_types_and_ranges_of_component_arguments(algorithm, path, expected) -> None:
    message = only_issue(error_of(algorithm), f"algorithm.{path}")
    assert expected in message, message


def test_cross_argument_rules_of_a_component() -> None:
    error = error_of(
        {
            "algorithm_type": "grpo",
            "policy_loss_fn": "sapo",
            "policy_loss_fn_args": {"tau_pos": 2.0, "tau_neg": 1.0},
        }
    )
    assert "tau_neg (1.0) must be >= tau_pos (2.0)" in str(error)
    error = error_of({"algorithm_type": "grpo", "policy_loss_fn_args": {"clip_range": None}})
    assert "clip_range_low and clip_range_high" in str(error)


def test_every_bad_argument_of_every_component_is_reported_together() -> None:
    error = error_of(
        {
            "algorithm_type": "ppo",
            "advantage_fn_args": {"gamma": 2.0, "lamb": 0.9},
            "policy_loss_fn_args": {"clip_range": "0.2"},
            "kl_loss_fn_args": {"kl_coef": True},
        }
    )
    assert {i.path for i in error.errors} == {
        "algorithm.advantage_fn_args.gamma",
        "algorithm.advantage_fn_args.lamb",
        "algorithm.policy_loss_fn_args.clip_range",
        "algorithm.kl_loss_fn_args.kl_coef",
    }


def test_trinity_rft_arguments_are_accepted() -> None:
    resolved = resolve_algorithm(
        {
            "algorithm_type": "ppo",
            "policy_loss_fn_args": {
                "truncate_adv_pos_is": True,
                "truncate_is_range_low": 0.5,
                "truncate_adv_neg_is": True,
                "truncate_is_range_high": 2.0,
                "loss_agg_mode": "token-sum",
            },
        }
    )
    assert resolved.policy_loss_fn_args["truncate_adv_pos_is"] is True
    assert resolved.policy_loss_fn_args["truncate_is_range_low"] == 0.5
    # the guide's OPMD step 3
    resolve_algorithm(
        {
            "algorithm_type": "opmd",
            "repeat_times": 8,
            "advantage_fn_args": {"opmd_baseline": "logavgexp", "tau": 0.99},
            "policy_loss_fn_args": {"tau": 0.99},
        }
    )


def test_an_int_is_a_number() -> None:
    resolved = resolve_algorithm(
        {"algorithm_type": "ppo", "policy_loss_fn_args": {"clip_range": 1}}
    )
    assert resolved.policy_loss_fn_args["clip_range"] == 1
