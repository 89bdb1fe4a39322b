"""Trinity-RFT's math-answer toolbox, at each path its code imports it from.

The cases are the behaviour Trinity-RFT's ``tests/utils/eval_utils_test.py`` expects of
``compute_score_v0``, ``is_equiv``, ``extract_answer`` and ``verify_math_answer``.
"""

from __future__ import annotations

import importlib

import pytest

from trinity.common.rewards._toolbox import EVAL_UTILS, NAIVE_DAPO_SCORE, QWEN25_EVAL
from trinity.utils.eval_utils import compute_score_v0, is_equiv
from trinity.utils.qwen25_eval_utils import extract_answer, verify_math_answer
from trinity.workflows.rewards import eval_utils

PATHS = {
    "trinity.common.rewards.eval_utils": EVAL_UTILS,
    "trinity.utils.eval_utils": EVAL_UTILS,
    "trinity.common.rewards.qwen25_eval": QWEN25_EVAL,
    "trinity.utils.qwen25_eval_utils": QWEN25_EVAL,
    "trinity.common.rewards.naive_dapo_score": NAIVE_DAPO_SCORE,
    "trinity.utils.math_utils": NAIVE_DAPO_SCORE,
}


@pytest.mark.parametrize("path", sorted(PATHS))
def test_every_path_resolves_every_name_to_the_one_implementation(path):
    module = importlib.import_module(path)
    assert list(module.__all__) == list(PATHS[path])
    for name in PATHS[path]:
        assert getattr(module, name) is getattr(eval_utils, name), (path, name)


@pytest.mark.parametrize(
    ("solution", "truth", "score"),
    [
        ("The final answer is \\boxed{42}", "The correct result is \\boxed{42}", 1.0),
        ("Let's see, the result is \\boxed{100}", "100", 1.0),
        ("I think the answer is \\boxed{-1}", "The answer is \\boxed{1}", 0.0),
        ("The answer is \\boxed{apple}", "orange", 0.0),
        ("The answer is 42, but I'm not boxing it.", "The answer is \\boxed{42}", 0.0),
        ("The answer is 42, but I'm not boxing it.", "42", 0.0),
        ("", "\\boxed{10}", 0.0),
        ("The answer is \\boxed{}", "", 1.0),
        ("The answer is \\boxed{1}", "", 0.0),
        ("First \\boxed{A}, but then I realized it is \\boxed{B}", "\\boxed{B}", 1.0),
        ("First \\boxed{A}, but then I realized it is \\boxed{B}", "\\boxed{A}", 0.0),
    ],
)
def test_compute_score_v0(solution, truth, score):
    assert compute_score_v0(solution, truth) == score


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        ("  123  ", "123", True),
        ("50%", "50", True),
        ("$50", "50", True),
        ("hello", "world", False),
        ("123", "1234", False),
        (None, None, True),
        ("Some string", None, False),
        (None, "Some string", False),
        ("\\dfrac{1}{2}", "0.5", True),
        ("\\frac12", "\\frac{1}{2}", True),
    ],
)
def test_is_equiv(a, b, equal):
    assert is_equiv(a, b) is equal


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("The answer is \\boxed{42}", "42"),
        ("The result is \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("Therefore, the final answer is 100.", "100"),
        ("My final answer is: 3.14", "3.14"),
        ("所以，答案是x^2", "x^2"),
        ("The cost is 10 dollars and the profit is 20 dollars.", "20"),
        ("There are 1,000 apples and 2,000 oranges.", "2000"),
        ("The probability is 0.75.", "0.75"),
        ("This sentence has no answer.", None),
        ("The box is empty \\boxed{}", None),
        (12345, None),
    ],
)
def test_extract_answer(text, answer):
    assert extract_answer(text) == answer


@pytest.mark.parametrize(
    ("response", "truth", "correct"),
    [
        ("The answer is \\boxed{42}", "42", True),
        ("The result is 1,000.", "1000", True),
        ("The answer is -50.", "-50", True),
        ("The solution is 5", "x=5", True),
        ("The answer is \\boxed{42}", "43", False),
        ("The answer is \\boxed{x+1}", "x-1", False),
        (
            "The matrix is \\boxed{\\begin{pmatrix}1 & 1 \\\\ 0 & 1\\end{pmatrix}}",
            "\\begin{pmatrix}1&0\\\\0&1\\end{pmatrix}",
            False,
        ),
        ("The speed is 50 km/h", "50", True),
        ("So \\boxed{\\frac{1}{2}}", "0.5", True),
    ],
)
def test_verify_math_answer(response, truth, correct):
    accuracy, details = verify_math_answer(response, truth)
    assert (accuracy == 1.0) is correct, details
    assert details["is_correct"] is correct


def test_boxed_and_answer_tag_helpers():
    assert eval_utils.last_boxed_only_string("a \\boxed{x^{2}} b") == "\\boxed{x^{2}}"
    assert eval_utils.last_boxed_only_string("no box") is None
    assert eval_utils.remove_boxed("\\boxed{7}") == "7"
    with pytest.raises(ValueError):
        eval_utils.remove_boxed("7")
    assert eval_utils.find_boxed_answer("\\boxed{\\frac{1}{2}} then \\boxed{3}") == "3"
    assert eval_utils.extract_solution("think\n<answer> 1 + 2 </answer>") == "1 + 2"
    assert eval_utils.validate_think_pattern("<think>a</think> b")
    assert not eval_utils.validate_think_pattern("<think>a")


def test_countdown_helpers():
    assert eval_utils.validate_equation("(3 + 5) * 2", [2, 5, 3])
    assert not eval_utils.validate_equation("3 + 3", [3])
    assert eval_utils.evaluate_equation("(3 + 5) * 2") == 16
    assert eval_utils.evaluate_equation("8 / 4") == 2.0
    assert eval_utils.evaluate_equation("__import__('os')") is None


def test_dapo_grading():
    assert eval_utils.match_answer("<think>\\boxed{1}</think> so \\boxed{\\frac12}") == (
        True,
        "\\frac12",
    )
    assert eval_utils.match_answer("no box")[0] is False
    assert eval_utils.grade_answer("\\frac12", "0.5") == (True, "\\frac{1}{2}")
    assert eval_utils.compute_score("... \\boxed{6}", "6") == (1.0, "6")
    assert eval_utils.compute_score("... \\boxed{7}", "6")[0] == 0.0
    assert eval_utils.ANS_RE.search("#### 1,234").group(1) == "1,234"
