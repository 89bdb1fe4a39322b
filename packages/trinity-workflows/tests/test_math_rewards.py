"""Math reward correctness: a verdict table over answer pairs, checked with real math-verify."""

from __future__ import annotations

import pytest

from trinity.common.rewards import REWARD_FUNCTIONS
from trinity.workflows.rewards.math import (
    AccuracyReward,
    MathBoxedRewardFn,
    MathRewardFn,
    extract_boxed,
    is_equivalent,
    validate_think_pattern,
)

# (model response, reference answer, expected verdict). Covers fractions, decimals, LaTeX,
# \boxed, units and percent/degree/currency marks, sets, intervals, tuples, symbolic forms and
# wrong answers that look close.
BOXED_TABLE = [
    ("The answer is \\boxed{2}.", "2", True),
    ("\\boxed{\\frac{1}{2}}", "0.5", True),
    ("\\boxed{0.5}", "\\frac{1}{2}", True),
    ("\\boxed{1/2}", "\\frac12", True),
    ("\\boxed{\\dfrac{3}{4}}", "0.75", True),
    ("\\boxed{\\tfrac{2}{4}}", "\\frac{1}{2}", True),
    ("\\boxed{5\\text{ cm}}", "5", True),
    ("\\boxed{5 cm}", "5", True),
    ("\\boxed{90^\\circ}", "90", True),
    ("\\boxed{\\$5}", "5", True),
    ("\\boxed{10\\%}", "10", True),
    ("\\boxed{1,000}", "1000", True),
    ("\\boxed{x=3}", "3", True),
    ("\\boxed{\\sqrt{2}/2}", "\\frac{\\sqrt{2}}{2}", True),
    ("\\boxed{2\\pi}", "2\\pi", True),
    ("\\boxed{x^2+2x+1}", "(x+1)^2", True),
    ("\\boxed{\\{1,2\\}}", "\\{2,1\\}", True),
    ("\\boxed{[0,1)}", "[0,1)", True),
    ("\\boxed{\\infty}", "\\infty", True),
    ("\\boxed{\\text{B}}", "B", True),
    ("We get $\\boxed{-7}$ after simplifying.", "-7", True),
    ("\\boxed{3}", "4", False),
    ("\\boxed{-3}", "3", False),
    ("\\boxed{6.28}", "2\\pi", False),
    ("\\boxed{(2,1)}", "(1,2)", False),
    ("\\boxed{[0,1]}", "[0,1)", False),
    ("\\boxed{\\frac{1}{3}}", "0.33", False),
    ("\\boxed{}", "1", False),
    ("I don't know.", "7", False),
    ("\\boxed{12} but maybe \\boxed{13}", "12", False),
]

PLAIN_TABLE = [
    ("42", "42", True),
    ("The answer is 5 meters", "5", True),
    ("so the total is 1/4", "0.25", True),
    ("The result is 41", "42", False),
]


@pytest.mark.parametrize(("response", "truth", "expected"), BOXED_TABLE)
def test_math_boxed_reward_table(response, truth, expected):
    reward = MathBoxedRewardFn()(response=response, truth=truth)
    assert reward["accuracy"] == (1.0 if expected else 0.0), (response, truth)
    assert reward["format_score"] == 0.0


def test_table_is_big_enough():
    assert len(BOXED_TABLE) + len(PLAIN_TABLE) >= 30
    assert {verdict for *_, verdict in BOXED_TABLE} == {True, False}


@pytest.mark.parametrize(("response", "truth", "expected"), PLAIN_TABLE + BOXED_TABLE[:6])
def test_accuracy_reward_reads_whole_responses(response, truth, expected):
    assert AccuracyReward()(response=response, truth=truth) == {
        "accuracy": 1.0 if expected else 0.0
    }


@pytest.mark.parametrize(
    ("response", "truth", "accuracy", "format_score"),
    [
        ("<think>half of one</think> <answer>\\frac12</answer>", "0.5", 1.0, 0.1),
        ("<think>x</think><answer>0.5</answer>", "1/2", 1.0, 0.1),
        ("<answer>0.5</answer>", "0.5", 1.0, -0.1),
        ("<think>x</think><answer>3</answer> trailing text", "3", 1.0, -0.1),
        ("<think>x</think><answer>4</answer>", "3", 0.0, 0.1),
        ("no tags, answer 3", "3", 1.0, -0.1),
        ("<think>x</think><answer>2</answer><answer>3</answer>", "3", 1.0, 0.1),
    ],
)
def test_math_reward_accuracy_and_format(response, truth, accuracy, format_score):
    out = MathRewardFn()(response=response, truth=truth)
    assert out == {"accuracy": accuracy, "format_score": format_score}


def test_math_boxed_reward_with_think():
    fn = MathBoxedRewardFn()
    assert fn(response="\\boxed{2}", truth="2", with_think=True) == {
        "accuracy": 1.0,
        "format_score": -0.1,
    }
    assert fn(response="<think>1+1</think> \\boxed{2}", truth="2", with_think=True) == {
        "accuracy": 1.0,
        "format_score": 0.0,
    }
    out = fn(response="\\boxed{2}", truth="2", with_think=True, format_score_coef=0.5)
    assert out["format_score"] == -0.5
    # constructor defaults (reward_fn_args) apply when the workflow passes nothing
    assert MathBoxedRewardFn(with_think=True)(response="\\boxed{2}", truth="2")["format_score"] < 0


def test_unparseable_reference_is_a_data_error_not_a_silent_zero():
    with pytest.raises(ValueError, match="could not be parsed"):
        is_equivalent("\\boxed{2}", "  ")


def test_extract_boxed_balances_braces():
    assert extract_boxed("x \\boxed{\\frac{1}{2}} y") == "\\frac{1}{2}"
    assert extract_boxed("\\boxed{a} then \\boxed{b}") == "b"
    assert extract_boxed("\\boxed{unclosed") is None
    assert extract_boxed("nothing") is None


def test_validate_think_pattern():
    assert validate_think_pattern("<think>a</think> b")
    assert not validate_think_pattern("</think><think>")
    assert not validate_think_pattern("<think>a</think><think>b</think>")
    assert not validate_think_pattern("plain")


def test_rewards_resolve_by_name():
    assert REWARD_FUNCTIONS.get("math_reward") is MathRewardFn
    assert REWARD_FUNCTIONS.get("math_boxed_reward") is MathBoxedRewardFn
    assert REWARD_FUNCTIONS.get("accuracy_reward") is AccuracyReward
    from trinity.common.rewards import MathRewardFn as from_core_path

    assert from_core_path is MathRewardFn
