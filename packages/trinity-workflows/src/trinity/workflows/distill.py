"""On-policy distillation: the student samples, a teacher scores every sampled token.

``on_policy_distill_workflow`` (Trinity-RFT 0.6's name) asks the task's prompt, samples
``repeat_times`` answers from the model being trained (the student), and has the first
auxiliary model (``explorer.auxiliary_models[0]``: the teacher, not trained) score each
answer's tokens given their prefix. The teacher's log-probs of the response tokens go into
``Experience.teacher_logprobs`` (``[R]``, aligned with the student's ``logprobs``); the
algorithm types ``on_policy_distill`` and ``jsd`` turn them into per-token advantages in the
trainer (``teacher - student``: tokens the teacher likes more are reinforced). The reward is
not what trains here: ``0.0``, or the task's reward function when the task set names one (a
number to watch, e.g. accuracy). Each experience's ``kl_divergence`` metric is the sampled
sequence's ``sum(student - teacher)`` log-prob (a single-sample estimate of KL(student ||
teacher)).

``on_policy_distill_math_workflow`` asks as Qwen2.5-Math's evaluation does (the question, then
the instruction to box the final answer; system ``You are a helpful assistant.``) and rewards
the answer's accuracy (:func:`~trinity.workflows.math_eval.math_eval_accuracy`, also the
``accuracy`` metric).

Workflow arguments (``taskset.workflow_args``): ``temperature`` (default 1.0), the temperature
of the teacher's log-probs; plus those of every single-turn workflow.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from trinity.common.config import Field
from trinity.common.experience import Experience
from trinity.common.models.calls import call_model
from trinity.common.workflows import WORKFLOWS, Task
from trinity.workflows.common import generation_kwargs
from trinity.workflows.math_eval import EVAL_SYSTEM_PROMPT, math_eval_accuracy
from trinity.workflows.rewards.base import RewardSpec, apply_reward
from trinity.workflows.single_turn import BOXED_SYSTEM_PROMPT, SimpleWorkflow, SingleTurnArgs

__all__ = ["OnPolicyDistillMathWorkflow", "OnPolicyDistillWorkflow", "TeacherError"]


class TeacherError(ValueError):
    """The teacher is missing, or its log-probs do not line up with the student's sample."""


@WORKFLOWS.register_module("on_policy_distill_workflow")
class OnPolicyDistillWorkflow(SimpleWorkflow):
    """Sample with the student, score every sampled token with the teacher (see the module
    docstring).

    Task row: the prompt under ``format.prompt_key``. Model: the student; auxiliary models:
    the teacher first (a workflow without one is refused at construction, and a run without
    one at validation). Experience: ``teacher_logprobs`` ``[R]``, ``reward`` 0.0 (or the
    task's reward function's), metric ``kl_divergence``.
    """

    class Args(SingleTurnArgs):
        """``workflow_args`` of ``on_policy_distill_workflow``."""

        temperature: Annotated[float, Field(gt=0.0)] = Field(
            1.0, description="Temperature of the teacher's log-probs of the sampled tokens."
        )

    #: read by the distillation algorithm types' config check: this workflow supplies
    #: ``Experience.teacher_logprobs`` (from ``explorer.auxiliary_models[0]``)
    writes_teacher_logprobs = True

    def reset(self, task: Task) -> None:
        teachers = self.auxiliary_model_wrappers or []
        if not teachers:
            raise TeacherError(
                f"{self.workflow_name} needs a teacher model: configure one under "
                "explorer.auxiliary_models (the first one scores the student's samples)"
            )
        self.teacher = teachers[0]
        super().reset(task)

    async def run_async(self) -> list[Experience]:
        responses = await call_model(
            self.model,
            "chat",
            self.format_messages(),
            **generation_kwargs(self.rollout_args, n=self.repeat_times),
        )
        teacher = await asyncio.gather(*(self.teacher_logprobs(exp) for exp in responses))
        if self.reward_fn is not None:
            rewards = await asyncio.gather(*(self.score(exp) for exp in responses))
        else:  # the advantage comes from the teacher: no reward signal is needed
            rewards = [None] * len(responses)
        for i, (exp, scores, result) in enumerate(zip(responses, teacher, rewards, strict=True)):
            exp.teacher_logprobs = scores
            if result is None:
                exp.reward = 0.0
            else:
                apply_reward(exp, result)
            metrics = dict(exp.metrics or {})
            metrics["kl_divergence"] = float((exp.logprobs - scores).sum())
            exp.metrics = metrics
            exp.eid.run = self.run_id_base + i
        return list(responses)

    async def teacher_logprobs(self, exp: Experience) -> Any:
        """The teacher's log-probs of ``exp``'s response tokens, ``[R]`` (float32).

        Raises:
            TeacherError: the teacher scored another number of response tokens than the
                student sampled (a teacher with another tokenizer cannot score them).
        """
        tokens = exp.tokens.tolist()
        scores = await call_model(
            self.teacher, "logprobs", tokens, temperature=self.args.temperature
        )
        response = scores[exp.prompt_length - 1 :]
        if len(response) != len(exp.logprobs):
            raise TeacherError(
                f"{self.workflow_name}: the teacher scored {len(response)} response tokens, the "
                f"student sampled {len(exp.logprobs)} ({len(tokens)} tokens, prompt "
                f"{exp.prompt_length}); the teacher must share the student's tokenizer"
            )
        return response.float()


@WORKFLOWS.register_module("on_policy_distill_math_workflow")
class OnPolicyDistillMathWorkflow(OnPolicyDistillWorkflow):
    """:class:`OnPolicyDistillWorkflow` on math questions: Qwen2.5-Math's evaluation prompt and
    the answer's accuracy as the reward (``accuracy`` metric); a row needs the reference under
    ``format.response_key``."""

    default_system_prompt = EVAL_SYSTEM_PROMPT
    requires_truth = True

    def reward_spec(self, task: Task) -> RewardSpec:
        return math_eval_accuracy

    def build_prompt(self, task: Task) -> str:
        return f"{super().build_prompt(task)}\n{BOXED_SYSTEM_PROMPT}"
