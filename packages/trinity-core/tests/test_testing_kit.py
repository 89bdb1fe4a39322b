"""The contract kit itself: its rules fail on components that break them, naming the rule.

Each broken component below breaks exactly one promise; the kit must refuse it with a message
that starts ``rule '<the promise>' broke``. A well-behaved component (written here, duck typed,
no sibling package needed) passes every rule. Rules are called directly on an instance of the
contract class, as pytest would.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from trinity.common.experience import Experience
from trinity.common.models.testing import FakeModelWrapper
from trinity.common.rewards import REWARD_FUNCTIONS, RewardFn
from trinity.common.workflows import WORKFLOWS, Workflow
from trinity.testing import (
    AdvantageFnContract,
    ExperienceOperatorContract,
    KLFnContract,
    PolicyLossContract,
    RewardFnContract,
    RuleBroken,
    SampleStrategyContract,
    WorkflowContract,
)
from trinity.testing.sampling import ListReader


def _rules(contract: type) -> list[str]:
    return [n for n in dir(contract) if n.startswith("test_")]


def _run_all(contract: type) -> dict[str, str]:
    """Run every rule method; ``{method: "passed" | "skipped: why" | failure message}``."""
    out = {}
    for name in _rules(contract):
        try:
            getattr(contract(), name)()
            out[name] = "passed"
        except pytest.skip.Exception as exc:
            out[name] = f"skipped: {exc}"
        except AssertionError as exc:
            out[name] = str(exc)
    return out


def _breaks(contract: type, method: str, title: str) -> str:
    with pytest.raises(RuleBroken) as caught:
        getattr(contract(), method)()
    message = str(caught.value)
    assert message.startswith(f"rule '{title}' broke"), message
    return message


# ---------------------------------------------------------------------- policy losses
def _masked_mean(values, mask):
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp_min(1e-8)


class GoodLoss:
    """A duck-typed policy loss (no PolicyLossFn base) that keeps every rule."""

    def __init__(self, tau: float = 1.0) -> None:
        self.tau = tau

    def __call__(self, logprob, action_mask, advantages, **kwargs):
        loss = _masked_mean(-advantages * logprob, action_mask) / (1 + self.tau)
        return loss, {"loss": loss.item()}


class IgnoresMask(GoodLoss):
    def __call__(self, logprob, action_mask, advantages, **kwargs):
        loss = (-advantages * logprob).mean()
        return loss, {"loss": loss.item()}


class NaNOnEmptyMask(GoodLoss):
    def __call__(self, logprob, action_mask, advantages, **kwargs):
        m = action_mask.to(logprob.dtype)
        loss = (-advantages * logprob * m).sum(-1) / m.sum(-1)  # 0/0 on an all-masked row
        return loss.mean(), {}


class TextMetric(GoodLoss):
    def __call__(self, logprob, action_mask, advantages, **kwargs):
        loss, _ = super().__call__(logprob, action_mask, advantages)
        return loss, {"note": "fine"}


class NeedsUnknownField(GoodLoss):
    def __call__(self, logprob, action_mask, my_weights, **kwargs):
        return _masked_mean(-logprob * my_weights, action_mask), {}


class _Loss(PolicyLossContract):
    skip_rules = {"registered": "written in this test; trinity-algorithms' registry not used"}


def test_a_good_duck_typed_loss_passes_every_rule():
    class TestGood(_Loss):
        component = GoodLoss
        component_args = {"tau": 0.5}

    results = _run_all(TestGood)
    assert results.pop("test_registry_round_trip").startswith("skipped: rule 'registered'")
    assert set(results.values()) == {"passed"}, results


def test_a_loss_that_ignores_the_mask_breaks_the_mask_rules():
    class TestBad(_Loss):
        component = IgnoresMask

    msg = _breaks(
        TestBad, "test_masked_tokens_do_not_change_the_loss", "masked tokens do not change the loss"
    )
    assert "IgnoresMask" in msg and "changed the loss" in msg
    _breaks(TestBad, "test_masked_tokens_get_no_gradient", "masked tokens get no gradient")


def test_nan_on_an_all_masked_row_breaks_that_rule():
    class TestBad(_Loss):
        component = NaNOnEmptyMask

    msg = _breaks(
        TestBad, "test_all_masked_row", "an all-masked row gives a finite loss and gradient"
    )
    assert "non-finite" in msg
    TestBad().test_finite()  # ordinary inputs are fine: only the edge case breaks


def test_a_text_metric_breaks_the_output_rule():
    class TestBad(_Loss):
        component = TextMetric

    msg = _breaks(
        TestBad,
        "test_output_types",
        "it returns (a scalar loss of the input's dtype, a dict of numbers)",
    )
    assert "'note'" in msg and "not a number" in msg


def test_a_field_the_kit_does_not_know_is_asked_for_by_name():
    class TestBad(_Loss):
        component = NeedsUnknownField

    with pytest.raises(RuleBroken, match="extra_inputs"):
        TestBad().test_finite()

    class TestFixed(_Loss):
        component = NeedsUnknownField
        extra_inputs = {"my_weights": lambda inputs: torch.ones_like(inputs["logprob"])}

    TestFixed().test_finite()


def test_skip_rules_need_known_ids_and_reasons():
    class TestTypo(_Loss):
        component = GoodLoss
        skip_rules = {"masked-tokenz": "typo"}

    with pytest.raises(AssertionError, match="unknown rules.*masked-tokenz"):
        TestTypo().test_contract_is_set_up()

    class TestNoReason(_Loss):
        component = GoodLoss
        skip_rules = {"masked-tokens": " "}

    with pytest.raises(AssertionError, match="needs a reason"):
        TestNoReason().test_contract_is_set_up()

    class TestExempt(_Loss):
        component = IgnoresMask
        skip_rules = {"masked-tokens": "this loss is meant to see padding"}

    with pytest.raises(pytest.skip.Exception, match="meant to see padding"):
        TestExempt().test_masked_tokens_do_not_change_the_loss()


def test_the_registration_rule_skips_when_the_registry_package_is_missing():
    class TestElsewhere(PolicyLossContract):
        component = GoodLoss
        registry_path = "trinity_kit_no_such_package.registry:REGISTRY"

    with pytest.raises(pytest.skip.Exception, match="trinity_kit_no_such_package.* not installed"):
        TestElsewhere().test_registry_round_trip()


# ---------------------------------------------------------------------- KL
class SelfKLNotZero:
    def __init__(self, kl_coef: float = 0.1) -> None:
        self.kl_coef = kl_coef

    def calculate_kl(self, logprob, ref_logprob, old_logprob=None):
        return (logprob - ref_logprob).abs() + 0.01

    def calculate_kl_loss(
        self, logprob, ref_logprob, response_mask, loss_agg_mode, old_logprob=None
    ):
        kl = self.calculate_kl(logprob, ref_logprob)
        return _masked_mean(kl, response_mask) * self.kl_coef, {}


def test_a_kl_that_is_not_zero_against_itself_breaks_that_rule():
    class TestKL(KLFnContract):
        component = SelfKLNotZero

    _breaks(TestKL, "test_kl_to_itself_is_zero", "the KL of a policy with itself is 0")
    TestKL().test_masked_tokens_do_not_change_the_loss()


# ---------------------------------------------------------------------- advantages
class PlainGroupAdvantage:
    """Duck-typed GRPO without epsilon: a constant group divides 0 by 0."""

    @classmethod
    def compute_in_trainer(cls) -> bool:
        return False

    def __call__(self, exps, **kwargs):
        groups: dict = {}
        for e in exps:
            groups.setdefault(e.eid.tid, []).append(e)
        for group in groups.values():
            r = torch.tensor([e.reward for e in group])
            std = r.std() if len(group) > 1 else torch.tensor(1.0)
            for e, s in zip(group, (r - r.mean()) / std, strict=True):
                e.advantages = s * e.action_mask
                e.returns = e.advantages.clone()
        return exps, {}


def test_nan_advantages_on_identical_rewards_break_the_edge_rule():
    class TestAdv(AdvantageFnContract):
        component = PlainGroupAdvantage

    msg = _breaks(
        TestAdv,
        "test_edge_inputs",
        "edge inputs give finite advantages (identical rewards, one member, all masked)",
    )
    assert "on a group of identical rewards" in msg


# ---------------------------------------------------------------------- sample strategies
class RepeatingStrategy:
    """Peeks instead of consuming: hands the same batch out every step."""

    def __init__(self, readers, train_batch_size=None, **kwargs):
        self.reader = readers["experience_buffer"]
        self.n = train_batch_size

    async def sample(self, step, current_model_version=None):
        exps = self.reader.experiences[: self.n]
        if not exps:
            raise StopAsyncIteration
        return exps, {"sample/count": float(len(exps))}


def test_a_strategy_that_repeats_experiences_breaks_no_repeats():
    class TestStrategy(SampleStrategyContract):
        component = RepeatingStrategy

    _breaks(TestStrategy, "test_no_repeats", "an experience is handed out once")
    TestStrategy().test_output()


def test_the_kits_reader_follows_the_reader_protocol():
    reader = ListReader([Experience(tokens=[1, 2, 3]) for _ in range(3)], batch_size=2)
    assert len(reader.read()) == 2 and len(reader.read()) == 1
    with pytest.raises(StopIteration):
        reader.read()


# ---------------------------------------------------------------------- operators
class ListMetricOperator:
    def process(self, exps):
        return exps, {"rewards": [e.reward for e in exps]}


def test_an_operator_with_a_list_metric_breaks_the_output_rule():
    class TestOp(ExperienceOperatorContract):
        component = ListMetricOperator

    msg = _breaks(
        TestOp, "test_output", "process() returns (a list of Experience, a dict of numbers)"
    )
    assert "'rewards'" in msg

    class TestAllowed(TestOp):
        non_numeric_metrics = frozenset({"rewards"})

    TestAllowed().test_output()


# ---------------------------------------------------------------------- workflows and rewards
class EchoWorkflow(Workflow):
    """Asks the question, rewards an exact answer; resettable."""

    can_reset = True

    def __init__(self, *, task, model, auxiliary_models=None):
        super().__init__(task=task, model=model, auxiliary_models=auxiliary_models)
        self.reset(task)

    def reset(self, task):
        self.question = task.raw_task["q"]
        self.answer = task.raw_task["a"]

    def run(self):
        out = []
        for exp in self.model.chat([{"role": "user", "content": self.question}]):
            exp.reward = float(exp.response_text == self.answer)
            out.append(exp)
        return out


class LeakyWorkflow(EchoWorkflow):
    """reset() forgets to take the new answer: the previous task's answer leaks."""

    def reset(self, task):
        self.question = task.raw_task["q"]
        if not hasattr(self, "answer"):
            self.answer = task.raw_task["a"]


class NoRewardWorkflow(EchoWorkflow):
    def run(self):
        return self.model.chat([{"role": "user", "content": self.question}])


_TASK = {"raw_task": {"q": "2+2?", "a": "4"}}
_OTHER = {"raw_task": {"q": "3+3?", "a": "6"}}


def _reply(messages, sample_index):
    return {"2+2?": "4", "3+3?": "6"}[messages[-1]["content"]]


class _Flow(WorkflowContract):
    task_args = _TASK
    other_task_args = _OTHER
    responses = _reply


@pytest.fixture
def registered_echo():
    WORKFLOWS.register_module("kit_echo_workflow", EchoWorkflow)
    yield
    WORKFLOWS.unregister("kit_echo_workflow")


def test_a_good_workflow_passes_every_rule_on_the_fake_model(registered_echo):
    class TestEcho(_Flow):
        component = EchoWorkflow

    results = _run_all(TestEcho)
    assert set(results.values()) == {"passed"}, results


def test_model_factory_replaces_the_fake_model():
    made = []

    def engine():
        made.append(FakeModelWrapper(_reply, model_path="fake/engine"))
        return made[-1]

    class TestEcho(_Flow):
        component = EchoWorkflow
        model_factory = engine

    TestEcho().test_output()
    assert made and made[0].calls, "the workflow ran on the factory's model"


def test_an_unregistered_workflow_breaks_the_registration_rule():
    class TestEcho(_Flow):
        component = EchoWorkflow

    msg = _breaks(
        TestEcho, "test_registry_round_trip", "the registry resolves its name back to the class"
    )
    assert "register_module" in msg


def test_state_leaking_through_reset_breaks_the_reset_rule():
    class TestLeaky(_Flow):
        component = LeakyWorkflow

    msg = _breaks(
        TestLeaky, "test_reset_reuse", "a reset instance gives what a fresh instance gives"
    )
    assert "leaked" in msg


def test_a_missing_reward_breaks_the_output_rule():
    class TestNoReward(_Flow):
        component = NoRewardWorkflow

    msg = _breaks(
        TestNoReward, "test_output", "it returns well-formed Experiences with finite float rewards"
    )
    assert "reward is None" in msg


class FragileReward(RewardFn):
    def __call__(self, response, truth=None, **kwargs):
        return {"accuracy": float(response.split()[0] == truth)}  # IndexError on ""


def test_a_reward_that_crashes_on_an_empty_response_breaks_that_rule():
    class TestFragile(RewardFnContract):
        component = FragileReward

    msg = _breaks(
        TestFragile, "test_empty_response", "an empty response gets a finite reward, not an error"
    )
    assert "IndexError" in msg
    TestFragile().test_output()
    REWARD_FUNCTIONS.register_module("kit_fragile_reward", FragileReward)
    try:
        TestFragile().test_registry_round_trip()
    finally:
        REWARD_FUNCTIONS.unregister("kit_fragile_reward")


# ---------------------------------------------------------------------- packaging
def test_importing_the_kit_without_pytest_says_how_to_install_it():
    code = "import sys; sys.modules['pytest'] = None\nimport trinity.testing\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode != 0
    assert 'pip install "trinity-core[testing]"' in out.stderr


def test_the_pytest_plugin_provides_the_fixtures(
    trinity_fake_model, trinity_experiences, trinity_list_reader
):
    assert trinity_fake_model("4").chat([{"role": "user", "content": "q"}])[0].response_text == "4"
    assert len(trinity_experiences) == 10
    assert len(trinity_list_reader(trinity_experiences, batch_size=3).read()) == 3
