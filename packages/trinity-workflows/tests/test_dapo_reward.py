"""``math_dapo_reward``: DAPO's math accuracy and its soft overlong punishment, checked as
Trinity-RFT's DAPO example (``examples/dapo_math/dapo.yaml``) configures them."""

from __future__ import annotations

import pytest

from trinity.common.config import FormatConfig, check_component_args
from trinity.common.models.testing import FakeModelWrapper
from trinity.common.rewards import REWARD_FUNCTIONS
from trinity.common.workflows import Task, run_task
from trinity.workflows.rewards.dapo import MathDAPORewardFn, overlong_penalty


def test_overlong_penalty_is_zero_then_a_ramp_then_the_full_factor():
    # max 20, cache 4: no penalty up to 16 tokens, -factor/4 a token after, -factor past 20
    assert [overlong_penalty(n, 20, 4, 1.0) for n in (0, 16, 17, 18, 20, 21, 500)] == [
        0.0,
        0.0,
        -0.25,
        -0.5,
        -1.0,
        -1.0,
        -1.0,
    ]
    assert overlong_penalty(18, 20, 4, 0.5) == -0.25
    values = [overlong_penalty(n, 64, 16, 2.0) for n in range(100)]
    assert all(a >= b for a, b in zip(values, values[1:], strict=False))  # never rewards length
    assert min(values) == -2.0 and max(values) == 0.0


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("<think>\\boxed{3} was my guess</think> so the answer is \\boxed{4}", 1.0),
        ("<think>it is 4</think> Answer: \\boxed{5}", 0.0),  # the thinking's answer is not it
        ("2 + 2 makes 4", 1.0),  # no \boxed: math-verify's final expression
        ("\\boxed{\\frac{8}{2}}", 1.0),
        ("no idea", 0.0),
    ],
)
def test_accuracy_reads_the_final_answer_after_the_thinking(response, expected):
    out = MathDAPORewardFn()(response=response, truth="4")
    assert out == {"accuracy": expected, "format_score": 0.0}


def test_penalty_counts_the_response_tokens():
    fn = MathDAPORewardFn(
        enable_overlong_penalty=True, penalty_factor=1.0, max_response_length=20, cache_length=4
    )
    assert fn(response="\\boxed{4}", truth="4", response_token=list(range(18))) == {
        "accuracy": 1.0,
        "format_score": -0.5,
    }
    with pytest.raises(ValueError, match="needs the response's tokens"):
        fn(response="\\boxed{4}", truth="4")
    with pytest.raises(ValueError, match="reference answer"):
        fn(response="\\boxed{4}", response_token=[1])


def test_incomplete_penalty_settings_are_refused_naming_the_fields():
    with pytest.raises(ValueError, match="cache_length must be set"):
        MathDAPORewardFn(enable_overlong_penalty=True, penalty_factor=1.0, max_response_length=8)
    with pytest.raises(ValueError, match=r"max_response_length \(4\) must be greater"):
        MathDAPORewardFn(
            enable_overlong_penalty=True, penalty_factor=1, max_response_length=4, cache_length=4
        )
    # config validation (what --dry-run runs) refuses the same, at reward_fn_args
    loc = ("buffer", "explorer_input", "taskset", "reward_fn_args")
    issues, _ = check_component_args(
        MathDAPORewardFn, {"enable_overlong_penalty": True, "penalty_factor": 1.0}, loc
    )
    assert issues and "max_response_length, cache_length must be set" in str(issues[0])
    issues, _ = check_component_args(MathDAPORewardFn, {"cache_lenght": 4}, loc)
    assert issues and "cache_length" in str(issues[0])  # the closest valid name
    assert check_component_args(MathDAPORewardFn, {"enable_overlong_penalty": False}, loc)[0] == []


def test_dapo_example_settings_run_on_math_boxed_workflow():
    # Trinity-RFT's DAPO example: math_boxed_workflow (use_base) + math_dapo_reward with the
    # overlong penalty; a response past the ramp loses part of its reward
    assert REWARD_FUNCTIONS.get("math_dapo_reward") is MathDAPORewardFn
    short, long = "\\boxed{4}", "x" * 30 + " \\boxed{4}"
    model = FakeModelWrapper([short, long])
    task = Task(
        workflow="math_boxed_workflow",
        reward_fn="math_dapo_reward",
        raw_task={"prompt": "2+2?", "solution": "4"},
        format_args=FormatConfig(prompt_key="prompt", response_key="solution"),
        repeat_times=2,
        workflow_args={"use_base": True},
        reward_fn_args={
            "enable_overlong_penalty": True,
            "penalty_factor": 1.0,
            "max_response_length": 48,
            "cache_length": 16,
        },
    )
    exps = run_task(task, model)
    lengths = [len(e.tokens) - e.prompt_length for e in exps]
    assert lengths[0] <= 32 < lengths[1] <= 48, lengths
    assert exps[0].reward == 1.0 and exps[0].metrics["format_score"] == 0.0
    expected = 1.0 + (32 - lengths[1]) / 16
    assert exps[1].reward == pytest.approx(expected) and exps[1].metrics["accuracy"] == 1.0


def test_trinity_rft_module_path():
    from trinity.common.rewards.dapo_reward import MathDAPORewardFn as Upstream

    assert Upstream is MathDAPORewardFn
