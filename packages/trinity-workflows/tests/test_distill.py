"""On-policy distillation workflows: the teacher's log-probs of every sampled token land in
``Experience.teacher_logprobs``, aligned with the student's, and the distillation algorithm
types accept them (and refuse a run with no teacher)."""

from __future__ import annotations

import pytest
import torch

from trinity.common.config import FormatConfig, GenerationConfig
from trinity.common.models.testing import FakeModelWrapper
from trinity.common.workflows import Task, run_task
from trinity.workflows.distill import TeacherError
from trinity.workflows.math_eval import EVAL_SYSTEM_PROMPT
from trinity.workflows.single_turn import BOXED_SYSTEM_PROMPT

QA = FormatConfig(prompt_key="question", response_key="answer")


def _task(workflow: str, **kwargs) -> Task:
    task = Task(
        workflow=workflow,
        raw_task={"question": "Half of 1?", "answer": "\\frac{1}{2}"},
        repeat_times=3,
        format_args=QA,
        **kwargs,
    )
    task.rollout_args = GenerationConfig(temperature=1.0, max_tokens=32)
    return task


def test_the_teachers_logprobs_of_each_sampled_token_are_stored():
    student = FakeModelWrapper(["\\boxed{0.5}", "no idea", "1/2 it is"])
    teacher = FakeModelWrapper("never asked to generate")
    task = _task("on_policy_distill_workflow", workflow_args={"temperature": 0.5})
    exps = run_task(task, student, auxiliary_models=[teacher])
    assert [e.eid.run for e in exps] == [0, 1, 2]
    for exp in exps:
        # exactly the teacher's scores (temperature 0.5) of the response tokens
        want = teacher.token_logprobs(exp.tokens.tolist(), 0.5)[exp.prompt_length - 1 :]
        assert exp.teacher_logprobs.dtype == torch.float32
        assert torch.equal(exp.teacher_logprobs, want)
        assert exp.teacher_logprobs.shape == exp.logprobs.shape
        # the student sampled at 1.0, the teacher scored at 0.5: different numbers
        assert not torch.equal(exp.teacher_logprobs, exp.logprobs)
        kl = float((exp.logprobs - exp.teacher_logprobs).sum())
        assert exp.metrics["kl_divergence"] == pytest.approx(kl)
        assert exp.reward == 0.0  # no reward signal: the teacher gives the advantage
    assert not teacher.calls_of("chat")
    assert len(teacher.calls_of("logprobs")) == 3


def test_the_task_reward_function_is_a_number_to_watch():
    student = FakeModelWrapper(["\\boxed{2}", "3"])
    task = _task("on_policy_distill_workflow", reward_fn="math_boxed_reward")
    task.repeat_times = 2
    exps = run_task(task, student, auxiliary_models=[FakeModelWrapper()])
    assert all(e.teacher_logprobs is not None for e in exps)
    assert "kl_divergence" in exps[0].metrics


def test_the_math_variant_asks_as_qwen_math_evaluates_and_rewards_accuracy():
    student = FakeModelWrapper(["\\boxed{\\frac{1}{2}}", "\\boxed{3}", "0.5"])
    exps = run_task(
        _task("on_policy_distill_math_workflow"), student, auxiliary_models=[FakeModelWrapper()]
    )
    (call,) = student.calls_of("chat")
    assert call.messages == [
        {"role": "system", "content": EVAL_SYSTEM_PROMPT},
        {"role": "user", "content": f"Half of 1?\n{BOXED_SYSTEM_PROMPT}"},
    ]
    assert [e.reward for e in exps] == [1.0, 0.0, 1.0]
    assert [e.metrics["accuracy"] for e in exps] == [1.0, 0.0, 1.0]
    assert all(e.teacher_logprobs is not None for e in exps)


def test_no_teacher_is_refused_naming_where_to_configure_it():
    with pytest.raises(TeacherError, match="explorer.auxiliary_models"):
        run_task(_task("on_policy_distill_workflow"), FakeModelWrapper())


def test_a_teacher_that_scores_other_tokens_is_refused():
    class OtherTokenizer(FakeModelWrapper):
        async def _logprobs(self, tokens, temperature):
            return self.token_logprobs(list(tokens) + [7, 7], temperature)

    with pytest.raises(TeacherError, match="share the student's tokenizer"):
        run_task(
            _task("on_policy_distill_workflow"),
            FakeModelWrapper("x"),
            auxiliary_models=[OtherTokenizer()],
        )
