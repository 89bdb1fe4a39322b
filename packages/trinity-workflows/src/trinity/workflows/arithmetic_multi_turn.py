"""A multi-turn version of the quickstart's task, for step-wise algorithms (``multi_step_grpo``).

One episode is a conversation: the user asks the row's questions one per turn (``"2+4="``, then
``"1+3="`` ...), the model answers each with the earlier turns, its own answers included, in
context. The episode's reward is the share of questions answered right (``arithmetic_reward``
on each answer). Each turn is one :class:`Experience`, exactly as sampled (prompt = the
conversation so far, response = the answer), with ``eid.run`` = the episode and ``eid.step`` =
the turn, every turn carrying the episode's reward: the shape ``step_wise_grpo`` expects (it
reads the last step's reward and broadcasts the episode's advantage to every step).

Each turn's ``info`` also carries what GiGPO (``gigpo``) groups and credits steps by:
``env_state_hash``, the SHA-256 of the conversation the model saw before answering (turns that
acted from the same state share it: every run's first turn of a question, and the second turns
of runs that gave the same first answer), and ``step_reward``, the turn's own share of the
episode reward (``1 / len(questions)`` when answered right, else 0; the turns' step rewards sum
to the episode reward).

Small enough for the tiny arithmetic model (digits, ``+``, ``=`` and chat words only) to learn
on a CPU; ``benchmarks/learning_matrix.py`` runs it with ``examples/data/arithmetic_multi_turn``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json

from trinity.common.experience import Experience
from trinity.common.models.calls import call_model
from trinity.common.workflows import WORKFLOWS, Task, Workflow
from trinity.workflows.common import (
    MissingTaskFieldError,
    ResettableWorkflowMixin,
    generation_kwargs,
)
from trinity.workflows.rewards.base import (
    DEFAULT_REWARD_TIMEOUT,
    build_reward_fn,
    compute_reward_async,
)

__all__ = ["ArithmeticMultiTurnWorkflow"]


@WORKFLOWS.register_module("arithmetic_multi_turn_workflow")
class ArithmeticMultiTurnWorkflow(ResettableWorkflowMixin, Workflow):
    """Ask the row's arithmetic questions one per turn; reward the share answered right.

    Task row: a list of questions under ``workflow_args.questions_key`` (default
    ``"questions"``), e.g. ``{"questions": ["2+4=", "1+3="]}``; the truth of each question is
    computed from it (an ``answers`` column, which a task set's ``format.response_key`` may
    name, is not needed). ``workflow_args``: ``questions_key``, ``reward_timeout`` (seconds,
    30).
    Runs: ``repeat_times`` episodes; the first turn of all of them is one call with
    ``n=repeat_times``, later turns one call per episode (their contexts differ).
    """

    can_reset = True
    can_repeat = True
    is_async = True

    def reset(self, task: Task) -> None:
        self.task = task
        self.raw_task: dict = dict(task.raw_task or {})
        self.workflow_args: dict = dict(task.workflow_args or {})
        self.rollout_args = task.rollout_args
        self.is_eval = task.is_eval
        self.repeat_times = task.repeat_times or task.rollout_args.n or 1
        key = str(self.workflow_args.get("questions_key", "questions"))
        questions = self.raw_task.get(key)
        if not isinstance(questions, list) or not questions:
            raise MissingTaskFieldError(
                f"{self.workflow_name}: the row needs a non-empty list of questions under "
                f"{key!r} (workflow_args.questions_key); got {questions!r}"
            )
        from trinity.workflows.rewards.arithmetic import evaluate_question

        self.questions = [str(q) for q in questions]
        self.truths = [str(evaluate_question(q)) for q in self.questions]
        self.reward_timeout = float(
            self.workflow_args.get("reward_timeout", DEFAULT_REWARD_TIMEOUT)
        )
        spec = task.reward_fn if task.reward_fn is not None else "arithmetic_reward"
        self.reward_fn = build_reward_fn(spec, dict(task.reward_fn_args or {}), None)

    async def _right(self, answer: str, index: int) -> bool:
        result = await compute_reward_async(
            self.reward_fn,
            self.reward_timeout,
            response=answer,
            truth=self.truths[index],
            prompt=self.questions[index],
        )
        return result.reward >= 1.0

    async def run_async(self) -> list[Experience]:
        n = self.repeat_times
        first = {"role": "user", "content": self.questions[0]}
        turns: list[list[Experience]] = [
            list(
                await call_model(
                    self.model, "chat", [first], **generation_kwargs(self.rollout_args, n=n)
                )
            )
        ]
        conversations = [[first] for _ in range(n)]
        # per turn, per run: the hash of the conversation the model answered (GiGPO's anchor)
        states = [[_state_hash(conv) for conv in conversations]]
        for index in range(1, len(self.questions)):
            for conv, exp in zip(conversations, turns[-1], strict=True):
                conv.append({"role": "assistant", "content": exp.response_text or ""})
                conv.append({"role": "user", "content": self.questions[index]})
            states.append([_state_hash(conv) for conv in conversations])
            calls = [
                call_model(self.model, "chat", conv, **generation_kwargs(self.rollout_args, n=1))
                for conv in conversations
            ]
            turns.append([result[0] for result in await asyncio.gather(*calls)])
        out: list[Experience] = []
        for run in range(n):
            steps = [turns[t][run] for t in range(len(self.questions))]
            right = [await self._right(exp.response_text or "", t) for t, exp in enumerate(steps)]
            reward = sum(right) / len(right)
            for t, exp in enumerate(steps):
                exp.reward = reward
                exp.eid.run = self.run_id_base + run
                exp.eid.step = t
                exp.info = {
                    **(exp.info or {}),
                    "turn": t,
                    "turn_correct": float(right[t]),
                    "env_state_hash": states[t][run],
                    "step_reward": float(right[t]) / len(right),
                }
                exp.metrics = {**(exp.metrics or {}), "accuracy": reward}
            out.extend(steps)
        return out


def _state_hash(messages: list[dict]) -> str:
    """SHA-256 of a conversation (the state a turn acts from)."""
    text = json.dumps(messages, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
