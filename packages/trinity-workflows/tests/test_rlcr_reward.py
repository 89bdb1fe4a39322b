"""``rlcr_reward``: RLCR's five weighted components, checked number by number against the
formulas of Trinity-RFT's ``RLCRRewardFn`` (format, accuracy, Brier score, and the two
confidence monitors), its tag-chain rules and its argument checks."""

from __future__ import annotations

import math

import pytest

from trinity.common.config import FormatConfig, check_component_args
from trinity.common.models.testing import FakeModelWrapper
from trinity.common.rewards import REWARD_FUNCTIONS, RewardFn
from trinity.common.workflows import Task, run_task
from trinity.workflows.rewards.rlcr import (
    COMPONENTS,
    DEFAULT_WEIGHTS,
    RLCRRewardFn,
    last_confidence,
    parse_terminal_chain,
)

ZERO = dict.fromkeys(COMPONENTS, 0.0)
ONES = dict.fromkeys(COMPONENTS, 1.0)


def chain(answer: str = "42", q: str = "0.8", *, before: str = "", gap: str = "") -> str:
    """A response ending with the RLCR tag chain (``gap`` between its blocks)."""
    return (
        f"{before}<think>2 * 21</think>{gap}<answer>{answer}</answer>{gap}"
        f"<analysis>21 doubled is 42</analysis>{gap}<confidence>{q}</confidence>"
    )


def exact_match(**kwargs) -> RLCRRewardFn:
    """The reward with string comparison instead of math-verify (upstream's test set-up)."""
    return RLCRRewardFn(answer_parser=str.strip, verifier=lambda a, b: a == b, **kwargs)


def expected(fmt=0.0, acc=0.0, brier=0.0, q=0.0, extreme=0.0, weights=DEFAULT_WEIGHTS):
    raw = {
        "format": fmt,
        "accuracy": acc,
        "brier": brier,
        "mean_confidence": q,
        "confidence_one_or_zero": extreme,
    }
    return {name: weights[name] * raw[name] for name in COMPONENTS}


# ---------------------------------------------------------------------- registration
def test_registered_under_trinity_rft_name_and_module_path():
    from trinity.common.rewards import RLCRRewardFn as from_package
    from trinity.common.rewards.rlcr_reward import RLCRRewardFn as upstream_path

    assert REWARD_FUNCTIONS.get("rlcr_reward") is RLCRRewardFn
    assert upstream_path is RLCRRewardFn and from_package is RLCRRewardFn
    assert issubclass(RLCRRewardFn, RewardFn)


# ---------------------------------------------------------------------- the numbers
@pytest.mark.parametrize(
    ("answer", "q", "parts", "total"),
    [
        # right, q = 0.8: Brier 1 - (1 - 0.8)^2 = 0.96, weighted 0.48
        ("42", "0.8", dict(fmt=1, acc=1, brier=0.96, q=0.8), 1.480008),
        # right and sure: Brier 1, q = 1 is an extreme
        ("42", "1", dict(fmt=1, acc=1, brier=1.0, q=1.0, extreme=1), 1.50002),
        # right but unsure, q = 0.3: Brier 1 - 0.7^2 = 0.51
        ("42", "0.3", dict(fmt=1, acc=1, brier=0.51, q=0.3), 1.255003),
        # wrong, q = 0.2: Brier 1 - 0.2^2 = 0.96, the same formula as when right
        ("41", "0.2", dict(fmt=1, brier=0.96, q=0.2), 0.980002),
        # wrong and overconfident, q = 0.9: Brier 1 - 0.81 = 0.19
        ("41", "0.9", dict(fmt=1, brier=0.19, q=0.9), 0.595009),
        # wrong and sure: Brier 0
        ("41", "1.0", dict(fmt=1, brier=0.0, q=1.0, extreme=1), 0.50002),
        # wrong and knows it, q = 0: full Brier, q = 0 is an extreme
        ("41", "0", dict(fmt=1, brier=1.0, q=0.0, extreme=1), 1.00001),
    ],
)
def test_components_follow_the_rlcr_formulas(answer, q, parts, total):
    scores = exact_match()(response=chain(answer, q), truth="42")
    assert scores == pytest.approx(expected(**parts))
    assert list(scores) == list(COMPONENTS)
    assert all(type(v) is float for v in scores.values())
    assert sum(scores.values()) == pytest.approx(total)


def test_default_parser_and_verifier_compare_with_math_verify():
    fn = RLCRRewardFn()
    assert fn(response=chain("42", "1"), truth="42") == pytest.approx(
        expected(fmt=1, acc=1, brier=1, q=1, extreme=1)
    )
    # \frac{1}{2} = 0.5 for math-verify; q = 0.3: Brier 1 - 0.49
    assert fn(response=chain("\\frac{1}{2}", "0.3"), truth="0.5") == pytest.approx(
        expected(fmt=1, acc=1, brier=0.51, q=0.3)
    )
    assert fn(response=chain("7", "0.5"), truth="42") == pytest.approx(
        expected(fmt=1, brier=0.75, q=0.5)
    )


@pytest.mark.parametrize(
    ("q", "extreme"),
    [("0", 1), ("0.009", 1), ("0.01", 0), ("0.5", 0), ("0.99", 0), ("0.991", 1), ("1", 1)],
)
def test_confidence_one_or_zero_counts_strictly_below_001_or_above_099(q, extreme):
    scores = exact_match()(response=chain(q=q), truth="42")
    assert scores["confidence_one_or_zero"] == pytest.approx(1e-5 * extreme)
    assert scores["mean_confidence"] == pytest.approx(1e-5 * float(q))


def test_weights_apply_by_component_name():
    weights = {  # deliberately not in COMPONENTS order
        "confidence_one_or_zero": 5,
        "mean_confidence": 4.0,
        "brier": 3,
        "accuracy": 2.0,
        "format": 1,
    }
    fn = exact_match(weights=weights)
    assert fn(response=chain(q="1"), truth="42") == pytest.approx(
        {"format": 1.0, "accuracy": 2.0, "brier": 3.0, "mean_confidence": 4.0,
         "confidence_one_or_zero": 5.0}
    )  # fmt: skip
    # wrong with q = 0.5: format 1, Brier 0.75, q 0.5
    assert fn(response=chain("0", "0.5"), truth="42") == pytest.approx(
        expected(fmt=1, brier=0.75, q=0.5, weights=weights)
    )
    # a weight of 0 switches its component off; a negative one turns it into a penalty
    off = exact_match(weights={**DEFAULT_WEIGHTS, "format": 0, "brier": -1})
    assert off(response=chain(), truth="42") == pytest.approx(
        {**expected(acc=1, q=0.8), "format": 0.0, "brier": -0.96}
    )


# ---------------------------------------------------------------------- what is parsed
def test_the_answer_given_to_the_parser_is_the_chain_payload_and_truth_goes_separately():
    parsed, compared = [], []

    def parser(text):
        parsed.append(text)
        return text.strip()

    def verifier(answer, truth):
        compared.append((answer, truth))
        return True

    response = chain(" final ", "0.7", before="<answer>decoy</answer><confidence>0.1</confidence> ")
    scores = RLCRRewardFn(answer_parser=parser, verifier=verifier)(
        response=response, truth=42, prompt="What is 2 * 21?", source=["code", "math"]
    )
    assert parsed == [" final ", "42"]  # the payload as written; the truth as a string
    assert compared == [("final", "42")]  # verifier(parsed answer, parsed truth)
    assert scores == pytest.approx(expected(fmt=1, acc=1, brier=1 - 0.09, q=0.7))


def test_complete_earlier_tags_are_allowed_and_the_last_chain_counts():
    draft = (
        "draft <think>first try</think><answer>40</answer><analysis>unsure</analysis>"
        "<confidence>0.1</confidence> revised: "
    )
    scores = exact_match()(response=chain(before=draft, gap=" \n\t"), truth="42")
    assert scores == pytest.approx(expected(fmt=1, acc=1, brier=0.96, q=0.8))
    assert parse_terminal_chain(chain(before=draft)) == ("42", 0.8)


def test_only_whitespace_may_follow_the_chain():
    fn = exact_match()
    assert fn(response=chain() + " \r\n\t", truth="42")["format"] == 0.5
    assert fn(response=chain() + " ok", truth="42")["format"] == 0.0


MALFORMED = {
    "no-think-opener": (
        "work</think><answer>42</answer><analysis>x</analysis><confidence>0.8</confidence>"
    ),
    "blocks-out-of-order": (
        "<think>x</think><analysis>x</analysis><answer>42</answer><confidence>0.8</confidence>"
    ),
    "truncated-closing-tag": (
        "<think>x</think><answer>42</answer><analysis>x</analysis><confidence>0.8</confidence"
    ),
    "trailing-text": chain() + " trailing junk",
    "text-between-blocks": (
        "<think>x</think> so <answer>42</answer><analysis>x</analysis><confidence>0.8</confidence>"
    ),
    "nested-earlier-tags": "<think>x<answer>nested</answer></think>" + chain(),
    "crossed-tags": (
        "<think>x</answer><answer>42</think><analysis>x</analysis><confidence>0.8</confidence>"
    ),
    "unclosed-earlier-tag": "<answer>unclosed " + chain(),
    "nested-in-the-chain": (
        "<think>x</think><answer>42<analysis>nested</analysis></answer>"
        "<analysis>x</analysis><confidence>0.8</confidence>"
    ),
    "capitalised-tags": (
        "<Think>x</Think><answer>42</answer><analysis>x</analysis><confidence>0.8</confidence>"
    ),
    "missing-analysis": "<think>x</think><answer>42</answer><confidence>0.8</confidence>",
    "empty": "",
}


@pytest.mark.parametrize("response", list(MALFORMED.values()), ids=list(MALFORMED))
def test_a_malformed_chain_scores_no_format_accuracy_or_brier(response):
    scores = exact_match()(response=response, truth="42")
    assert (scores["format"], scores["accuracy"], scores["brier"]) == (0.0, 0.0, 0.0)
    assert parse_terminal_chain(response) is None


@pytest.mark.parametrize(
    "q", ["", "  ", "not-a-number", "NaN", "nan", "Inf", "+inf", "-inf", "1e400", "-0.01", "1.01"]
)
def test_an_invalid_confidence_zeroes_every_component(q):
    assert exact_match()(response=chain(q=q), truth="42") == ZERO
    assert last_confidence(chain(q=q)) is None


def test_confidence_payload_may_have_surrounding_whitespace_and_any_float_spelling():
    fn = exact_match()
    assert fn(response=chain(q=" 0.25\n"), truth="42") == pytest.approx(
        expected(fmt=1, acc=1, brier=1 - 0.75**2, q=0.25)
    )
    assert fn(response=chain(q="5e-1"), truth="42")["mean_confidence"] == pytest.approx(5e-6)


def test_monitors_read_the_last_closed_confidence_even_when_the_chain_is_malformed():
    no_think = "<answer>42</answer><analysis>x</analysis><confidence>1</confidence>"
    assert exact_match()(response=no_think, truth="42") == pytest.approx(expected(q=1.0, extreme=1))
    trailing = chain(q="0.4") + " and more text"
    assert exact_match()(response=trailing, truth="42") == pytest.approx(expected(q=0.4))


def test_a_later_unclosed_confidence_makes_the_monitors_zero_too():
    assert exact_match()(response=chain() + "<confidence>0.1", truth="42") == ZERO
    assert last_confidence(chain() + "<confidence>0.1") is None


def test_a_confidence_block_holding_another_tag_is_not_read():
    assert last_confidence("<confidence><answer>0.5</answer></confidence>") is None
    assert last_confidence("<confidence>0.5</confidence>") == 0.5
    assert last_confidence(None) is None


# ---------------------------------------------------------------------- unverifiable answers
@pytest.mark.parametrize("stage", ["answer", "truth", "verify"])
def test_a_failed_check_is_not_a_wrong_answer(stage):
    # q = 0 on a wrong answer would earn the full Brier weight; a check that fails must not
    def parser(text):
        if stage == "answer" and text == "42":
            raise TimeoutError("parsing the answer timed out")
        if stage == "truth" and text == "gold":
            raise ValueError("the reference does not parse")
        return text

    def verifier(answer, truth):
        if stage == "verify":
            raise TimeoutError("verification timed out")
        return answer == truth

    fn = RLCRRewardFn(answer_parser=parser, verifier=verifier)
    scores = fn(response=chain("42", "0"), truth="gold")
    assert scores == pytest.approx(expected(fmt=1, q=0.0, extreme=1))


def test_no_reference_scores_format_and_monitors_only():
    scores = exact_match()(response=chain(q="0"), truth=None)
    assert scores == pytest.approx(expected(fmt=1, q=0.0, extreme=1))


# ---------------------------------------------------------------------- arguments
FULL = {name: 1 for name in COMPONENTS}


@pytest.mark.parametrize(
    ("weights", "error", "says"),
    [
        ({k: 1 for k in COMPONENTS[:4]}, ValueError, r"missing keys \['confidence_one_or_zero'\]"),
        ({**FULL, "extra": 1}, ValueError, r"unknown keys \['extra'\]"),
        ({**FULL, "format": "0.5"}, TypeError, r"weights\['format'\] is '0.5' \(str\).*numeric"),
        ({**FULL, "format": True}, TypeError, r"weights\['format'\] is True.*numeric"),
        ({**FULL, "format": None}, TypeError, "numeric"),
        ({**FULL, "brier": math.nan}, ValueError, r"weights\['brier'\] is nan.*finite"),
        ({**FULL, "brier": math.inf}, ValueError, r"weights\['brier'\] is inf.*finite"),
        ([0.5, 0.5, 0.5, 1e-5, 1e-5], TypeError, "must be a mapping"),
    ],
)
def test_bad_weights_are_refused_naming_the_key_the_value_and_what_is_allowed(weights, error, says):
    with pytest.raises(error, match=says) as info:
        exact_match(weights=weights)
    assert "weights" in str(info.value)
    if error is ValueError and "key" in says:
        assert "format, accuracy, brier, mean_confidence, confidence_one_or_zero" in str(info.value)


@pytest.mark.parametrize("bad", [None, 3, "callable"])
def test_parser_and_verifier_must_be_callable(bad):
    with pytest.raises(TypeError, match=f"answer_parser must be callable.*{bad!r}"):
        RLCRRewardFn(answer_parser=bad, verifier=lambda a, b: True)
    with pytest.raises(TypeError, match=f"verifier must be callable.*{bad!r}"):
        RLCRRewardFn(answer_parser=str.strip, verifier=bad)


def test_config_validation_refuses_the_same_arguments_at_their_key():
    loc = ("buffer", "explorer_input", "taskset", "reward_fn_args")
    assert check_component_args(RLCRRewardFn, {"weights": dict(DEFAULT_WEIGHTS)}, loc)[0] == []
    assert check_component_args(RLCRRewardFn, {}, loc)[0] == []
    issues, _ = check_component_args(RLCRRewardFn, {"weights": {"format": 1}}, loc)
    assert len(issues) == 1 and "reward_fn_args.weights" in str(issues[0])
    assert "missing keys" in str(issues[0])
    issues, _ = check_component_args(RLCRRewardFn, {"weights": {**FULL, "brier": "1"}}, loc)
    assert issues and "weights['brier'] is '1'" in str(issues[0])
    issues, _ = check_component_args(RLCRRewardFn, {"answer_parser": "simple"}, loc)
    assert issues and "reward_fn_args.answer_parser" in str(issues[0])
    issues, _ = check_component_args(RLCRRewardFn, {"weight": dict(DEFAULT_WEIGHTS)}, loc)
    assert issues and "did you mean 'weights'" in str(issues[0])


def test_defaults_show_by_name():
    fn = RLCRRewardFn()
    assert repr(fn.answer_parser) == "simple_answer_parser"
    assert repr(fn.verifier) == "verify_with_timeout"
    assert fn.weights == DEFAULT_WEIGHTS and fn.weights is not DEFAULT_WEIGHTS


# ---------------------------------------------------------------------- in a workflow
SYSTEM = (
    "Solve the problem and finish with <think>…</think><answer>…</answer>"
    "<analysis>…</analysis><confidence>q</confidence>, q the probability you are right."
)


def test_trinity_rft_rlcr_math_example_runs_on_math_workflow():
    # Trinity-RFT's examples/rlcr_math: math_workflow + rlcr_reward, its own system prompt,
    # the reference under `solution`, the five weights spelled out
    seen = []

    def model(messages, sample_index):
        seen.append(messages)
        return [chain("4", "0.9"), "it is 4", chain("5", "0.9")][sample_index % 3]

    task = Task(
        workflow="math_workflow",
        reward_fn="rlcr_reward",
        raw_task={"prompt": "What is 2 + 2?", "solution": "4"},
        format_args=FormatConfig(
            prompt_key="prompt", response_key="solution", system_prompt=SYSTEM
        ),
        repeat_times=3,
        reward_fn_args={"weights": dict(DEFAULT_WEIGHTS)},
    )
    exps = run_task(task, FakeModelWrapper(model))
    assert seen and seen[0][0] == {"role": "system", "content": SYSTEM}
    right, unformatted, wrong = exps
    # right, q = 0.9: 0.5 + 0.5 + 0.5 * (1 - 0.01) + 1e-5 * 0.9
    assert right.reward == pytest.approx(0.5 + 0.5 + 0.495 + 9e-6)
    assert right.metrics["brier"] == pytest.approx(0.495)
    assert unformatted.reward == 0.0 and unformatted.metrics["format"] == 0.0
    # wrong, q = 0.9: 0.5 + 0.5 * (1 - 0.81) + 9e-6
    assert wrong.reward == pytest.approx(0.5 + 0.095 + 9e-6)
    assert all(e.metrics["reward_error"] == 0.0 for e in exps)
