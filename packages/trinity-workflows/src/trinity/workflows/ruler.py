"""RULER for math: a judge model ranks a task's group of answers against each other.

RULER (Relative Universal LLM-Elicited Rewards, OpenPipe ART) needs no reference answer and no
hand-written reward: a judge model sees the question and all answers of one group at once and
scores each in ``[0, 1]``. Scores given side by side are consistent *within* the group, which is
all a group-relative algorithm (GRPO) uses.

``math_ruler_workflow`` samples ``repeat_times`` answers as ``math_workflow`` does, scores each
with the task's reward function only to *report* it (``gold_reward`` metric: how well the judge
tracks the truth), then asks the judge -- an auxiliary model (``explorer.auxiliary_models``),
reached through its OpenAI API -- for the group's scores, which become the rewards.

The judge must end its reply with the scores as a list, ``[0.9, 0.1, 0.5]``, one per answer in
the order shown. A reply without such a list, or with a list of the wrong length or with
something else than numbers in it, gives every answer 0 (``judge_success`` 0, why in
``info["judge_error"]``): a group with equal rewards has no advantage, so a judge's slip costs one group's
learning signal, not a wrong update.
"""

from __future__ import annotations

import ast
import asyncio
import math
from collections.abc import Sequence
from typing import Annotated, Any, Optional

from trinity.common.config import Field
from trinity.common.experience import Experience
from trinity.common.models.calls import call_model
from trinity.common.models.model import ModelWrapper
from trinity.common.workflows import WORKFLOWS, Task
from trinity.workflows.common import generation_kwargs
from trinity.workflows.single_turn import MathWorkflow, SingleTurnArgs

__all__ = [
    "AsyncMathRULERWorkflow",
    "MathRULERWorkflow",
    "MathTrainableRULERWorkflow",
    "ask_judge",
    "build_ruler_messages",
    "parse_ruler_scores",
]

RULER_SYSTEM_PROMPT = (
    "You are an impartial judge. You will see a question and {count} candidate answers to it. "
    "Compare the answers with each other, decide how well each one solves the question, and "
    "give each a score between 0 and 1."
)
RULER_USER_TEMPLATE = (
    "[Question]\n{question}\n"
    "{instructions}"
    "\n{answers}\n\n"
    "Score every candidate between 0 (wrong or useless) and 1 (correct and well argued). "
    "You may reason about them briefly first. Finish your reply with the scores as one list, "
    "in the order of the candidates: [score of candidate 1, ..., score of candidate {count}]"
)


def build_ruler_messages(
    question: str, answers: Sequence[str], instructions: Optional[str] = None
) -> list[dict[str, str]]:
    """The judge's chat messages for one group of ``answers`` to ``question``.

    ``instructions``: what the answers were asked to follow (the system prompt they were
    sampled with), shown to the judge so it can judge the format too.
    """
    shown = f"\n[Instructions the candidates were given]\n{instructions}\n" if instructions else ""
    blocks = "\n\n".join(f"[Candidate {i + 1}]\n{text}" for i, text in enumerate(answers))
    user = RULER_USER_TEMPLATE.format(
        question=question, instructions=shown, answers=blocks, count=len(answers)
    )
    return [
        {"role": "system", "content": RULER_SYSTEM_PROMPT.format(count=len(answers))},
        {"role": "user", "content": user},
    ]


def parse_ruler_scores(reply: Optional[str], count: int) -> list[float]:
    """The ``count`` scores of the last ``[...]`` list in the judge's reply, clipped to [0, 1].

    Raises:
        ValueError: no list, a list of another length, or an item that is not a finite number
            (the message says which and quotes the end of the reply).
    """
    text = reply or ""
    start, end = text.rfind("["), text.rfind("]")
    shown = text[-300:]
    if start < 0 or end < start:
        raise ValueError(f"the judge's reply ends with no [score, ...] list: {shown!r}")
    try:
        scores = ast.literal_eval(text[start : end + 1])
    except (ValueError, SyntaxError) as exc:
        raise ValueError(f"the judge's score list is not a list of numbers: {shown!r}") from exc
    if not isinstance(scores, (list, tuple)) or len(scores) != count:
        got = len(scores) if isinstance(scores, (list, tuple)) else type(scores).__name__
        raise ValueError(f"the judge gave {got} scores for {count} answers: {shown!r}")
    out = []
    for score in scores:
        if isinstance(score, bool) or not isinstance(score, (int, float)):
            raise ValueError(f"the judge's score {score!r} is not a number: {shown!r}")
        if not math.isfinite(score):
            raise ValueError(f"the judge's score {score!r} is not finite: {shown!r}")
        out.append(min(max(float(score), 0.0), 1.0))
    return out


async def ask_judge(judge: Any, messages: list[dict[str, str]], max_tokens: Optional[int]) -> str:
    """A judge model's reply text, through whichever client form the workflow holds: an
    ``openai.AsyncOpenAI`` client (async workflows get their auxiliary models so), an
    ``openai.OpenAI`` client (the older API; called in a worker thread) or a ``ModelWrapper``."""
    import openai

    if isinstance(judge, ModelWrapper):
        judge = judge.get_openai_async_client()
    name = getattr(judge, "model_path", None)
    kwargs: dict[str, Any] = {"messages": messages}
    if max_tokens is not None:
        kwargs["max_tokens"] = max_tokens
    if isinstance(judge, openai.AsyncOpenAI):
        if name is None:
            name = (await judge.models.list()).data[0].id
        completion = await judge.chat.completions.create(model=name, **kwargs)
    elif isinstance(judge, openai.OpenAI):
        if name is None:
            name = (await asyncio.to_thread(judge.models.list)).data[0].id
        completion = await asyncio.to_thread(judge.chat.completions.create, model=name, **kwargs)
    else:
        raise TypeError(
            "the RULER judge must be a ModelWrapper or an openai.OpenAI / openai.AsyncOpenAI "
            f"client, got {type(judge).__name__}"
        )
    if not completion.choices:
        return ""
    return completion.choices[0].message.content or ""


@WORKFLOWS.register_module("math_ruler_workflow")
class MathRULERWorkflow(MathWorkflow):
    """Math answers rewarded by a judge model ranking each group (RULER, see the module).

    Task row and prompt: as ``math_workflow`` (R1 format and system prompt with the default
    ``math_reward``). Auxiliary model ``workflow_args.judge_index`` (default 0) judges.

    Experience: ``reward`` = the judge's score in ``[0, 1]``; metrics: ``judge_success`` (1 when
    the judge's list was read) and, when the row has a reference answer, the task reward's
    components and their sum ``gold_reward`` (reported, not trained on). No auxiliary model
    configured is an error at construction.
    """

    class Args(SingleTurnArgs):
        """``workflow_args`` of ``math_ruler_workflow``."""

        judge_index: Annotated[int, Field(ge=0)] = Field(
            0, description="Which of explorer.auxiliary_models judges."
        )
        judge_max_tokens: Optional[Annotated[int, Field(gt=0)]] = Field(
            None, description="Cap on the judge's reply (None: the judge engine's default)."
        )

    requires_truth = False  # RULER needs no reference; with one, gold_reward is reported

    def reset(self, task: Task) -> None:
        super().reset(task)
        judges = self.auxiliary_models or self.auxiliary_model_wrappers or []
        if not judges:
            raise ValueError(
                f"{self.workflow_name} needs a judge model: configure one under "
                "explorer.auxiliary_models (workflow_args.judge_index picks it, default 0)"
            )
        if self.args.judge_index >= len(judges):
            raise ValueError(
                f"{self.workflow_name}: workflow_args.judge_index is {self.args.judge_index}, "
                f"but only {len(judges)} auxiliary model(s) are configured "
                "(explorer.auxiliary_models); allowed: 0"
                + (f" to {len(judges) - 1}" if len(judges) > 1 else "")
            )
        self.judge = judges[self.args.judge_index]

    async def judge_group(self, responses: Sequence[Experience]) -> list[float]:
        """The judge's scores of ``responses``, in their order.

        Raises:
            ValueError: the judge's reply has no usable score list (see
                :func:`parse_ruler_scores`); the judge's client errors pass through.
        """
        messages = build_ruler_messages(
            self.task_desc, [exp.response_text or "" for exp in responses], self.system_prompt
        )
        reply = await ask_judge(self.judge, messages, self.args.judge_max_tokens)
        return parse_ruler_scores(reply, len(responses))

    async def run_async(self) -> list[Experience]:
        responses = list(
            await call_model(
                self.model,
                "chat",
                self.format_messages(),
                **generation_kwargs(self.rollout_args, n=self.repeat_times),
            )
        )
        if self.truth is not None:  # the gold reward is reported, never trained on
            responses = await self.score_all(responses)
            for exp in responses:
                exp.metrics = {**(exp.metrics or {}), "gold_reward": float(exp.reward or 0.0)}
        else:
            for i, exp in enumerate(responses):
                exp.eid.run = self.run_id_base + i
        error: Optional[str] = None
        try:
            scores = await self.judge_group(responses)
        except Exception as exc:  # noqa: BLE001 - a judge failure costs the group its signal
            self.logger.warning("%s: RULER judge failed: %s", self.workflow_name, exc)
            scores, error = [0.0] * len(responses), f"{type(exc).__name__}: {exc}"
        for exp, score in zip(responses, scores, strict=True):
            exp.reward = score
            exp.metrics = {**(exp.metrics or {}), "judge_success": 0.0 if error else 1.0}
            if error:
                exp.info = {**(exp.info or {}), "judge_error": error}
        return responses


@WORKFLOWS.register_module("async_math_ruler_workflow")
class AsyncMathRULERWorkflow(MathRULERWorkflow):
    """Trinity-RFT's ``async_math_ruler_workflow``: :class:`MathRULERWorkflow` (async here
    already)."""


@WORKFLOWS.register_module("math_trainable_ruler_workflow")
class MathTrainableRULERWorkflow(MathRULERWorkflow):
    """RULER with the policy as its own judge, and the judging trained too (Trinity-RFT 0.6's
    ``math_trainable_ruler_workflow``).

    The answers are sampled and scored with the task's reward function (``gold_reward``, as
    ``math_ruler_workflow`` reports it). Then, per task, with probability
    ``workflow_args.ground_truth_probability`` (0.2) the reference is taken as known: the
    answers are rewarded with their gold reward, and the model judges the group
    ``repeat_times`` times -- those judge samples are returned too, as a group of their own
    (task id ``"<task>-ruler"``), each rewarded ``1 - mean |score - scaled gold|`` (the gold
    reward mapped from [-0.1, 1.1] to [0, 1]; 0 for a reply without a usable score list), so
    the model learns to judge. Otherwise the model judges once and its scores are the answers'
    rewards (0 for every answer when the reply is unusable). ``judge_success`` is the share of
    judge replies read. The choice is drawn from the task's batch, index and prompt, so a
    task decides the same way however its runs are scheduled.

    No auxiliary model is needed; a row needs the reference answer.
    """

    class Args(SingleTurnArgs):
        """``workflow_args`` of ``math_trainable_ruler_workflow``."""

        ground_truth_probability: Annotated[float, Field(ge=0.0, le=1.0)] = Field(
            0.2, description="Chance per task that the reference is used (and judging trained)."
        )
        judge_max_tokens: Optional[Annotated[int, Field(gt=0)]] = Field(
            None, description="Cap on the judge's reply (None: the task's max_tokens)."
        )

    requires_truth = True

    def reset(self, task: Task) -> None:
        MathWorkflow.reset(self, task)  # no auxiliary judge: the policy judges
        self.judge = self.model

    def _uses_truth(self) -> bool:
        import random

        key = f"{self.task.batch_id}/{self.task.task_id}/{self.run_id_base}/{self.task_desc}"
        return random.Random(key).random() < self.args.ground_truth_probability

    async def _judge_samples(self, responses: Sequence[Experience], n: int) -> list[Experience]:
        messages = build_ruler_messages(
            self.task_desc, [exp.response_text or "" for exp in responses], self.system_prompt
        )
        kwargs = generation_kwargs(self.rollout_args, n=n)
        if self.args.judge_max_tokens is not None:
            kwargs["max_tokens"] = self.args.judge_max_tokens
        return list(await call_model(self.model, "chat", messages, **kwargs))

    async def run_async(self) -> list[Experience]:
        responses = list(
            await call_model(
                self.model,
                "chat",
                self.format_messages(),
                **generation_kwargs(self.rollout_args, n=self.repeat_times),
            )
        )
        responses = await self.score_all(responses)
        gold = [float(exp.reward or 0.0) for exp in responses]
        for exp, reward in zip(responses, gold, strict=True):
            exp.metrics = {**(exp.metrics or {}), "gold_reward": reward}
        with_truth = self._uses_truth()
        judged = await self._judge_samples(responses, self.repeat_times if with_truth else 1)
        scores: list[Optional[list[float]]] = []
        for sample in judged:
            try:
                scores.append(parse_ruler_scores(sample.response_text, len(responses)))
            except ValueError as exc:
                self.logger.warning("%s: judge reply unusable: %s", self.workflow_name, exc)
                scores.append(None)
        read = [s for s in scores if s is not None]
        success = len(read) / len(judged) if judged else 0.0
        if with_truth:
            target = [(g + 0.1) / 1.2 for g in gold]  # gold reward [-0.1, 1.1] -> [0, 1]
            for i, (sample, got) in enumerate(zip(judged, scores, strict=True)):
                error = (
                    None
                    if got is None
                    else sum(abs(a - b) for a, b in zip(got, target, strict=True)) / len(got)
                )
                sample.reward = 0.0 if error is None else 1.0 - error
                sample.eid.task = f"{self.task.task_id}-ruler"
                sample.eid.run = self.run_id_base + i
                sample.metrics = {**(sample.metrics or {}), "judge_success": success}
                sample.metrics["reward_for_judge"] = sample.reward
            for exp, reward in zip(responses, gold, strict=True):
                exp.reward = reward
                exp.metrics["judge_success"] = success
            return responses + judged
        mean = [sum(col) / len(read) for col in zip(*read, strict=True)] if read else None
        for i, exp in enumerate(responses):
            exp.reward = 0.0 if mean is None else mean[i]
            exp.metrics["judge_success"] = success
        return responses
