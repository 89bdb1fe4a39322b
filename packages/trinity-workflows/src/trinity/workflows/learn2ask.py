"""``learn2ask_workflow``: train a doctor model to ask the next useful question, or to stop.

The workflow of Trinity-RFT's Learn-to-Ask example (https://arxiv.org/abs/2510.25441), which
learns proactive questioning from offline doctor-patient dialogues. Each task is a dialogue cut
before one of the doctor's turns; the model writes that turn: one short question, or the
marker ``<stop />`` when enough is known to suggest a treatment. The row says what the real
doctor did (``decision_truth``: ``continue`` or ``stop``) and what the next questions were
after (``info_truth``: the facts still to collect). Three scores:

* ``action_score`` (R_s): 1 when the model continued / stopped as the doctor did, else 0 (and
  the other two scores are 0);
* ``content_score`` (R_a): for a question, the judge's grade of how directly it asks about the
  facts in ``info_truth`` (1, 0.5 or 0); a right stop earns 1;
* ``format_score``: for a question, the judge's grade of its form (one question 1, two 0.5,
  more 0); a right stop earns 1 when the reply is exactly ``<stop />``.

The judge is the first auxiliary model (``explorer.auxiliary_models``), reached through its
OpenAI API, and must answer with ``<format_score>x</format_score>`` and
``<content_score>y</content_score>`` tags; a missing tag grades 0. The reward fuses the scores
as ``workflow_args`` say: ``train_mode`` ``Ra+Rs`` (default) gives ``action * (1 + 2 *
content) + format`` (``fusion_mode: sum``: ``action + content + format``), ``Ra`` gives ``2 *
content + format`` and ``Rs`` gives ``3 * action + format``. The task's reward function is not
used, as in the example.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Optional

from trinity.common.config import Field
from trinity.common.experience import Experience
from trinity.common.workflows import WORKFLOWS, Task
from trinity.workflows.rewards.base import RewardResult, RewardSpec, compute_reward_async
from trinity.workflows.ruler import ask_judge
from trinity.workflows.single_turn import SimpleWorkflow, SingleTurnArgs

__all__ = ["Learn2AskWorkflow", "fuse_scores", "parse_judge_tags"]

STOP_MARKER = "<stop />"
DECISIONS = ("continue", "stop")

_ASKING_RULES = (
    "You assist a doctor in a consultation. Read the conversation so far and write the "
    "doctor's next message, in English.\n\n"
    "Rules:\n"
    "- Ask exactly one short, clear medical question, offering 2 or 3 possible answers.\n"
    "- Never ask again what was already asked.\n"
    "- Write a single sentence."
)
#: the system prompt of train_mode Ra+Rs and Rs: the model also decides when to stop
ROLLOUT_PROMPT = (
    _ASKING_RULES + f"\n- Once you know enough to suggest a medication, reply only {STOP_MARKER}"
)
#: the system prompt of train_mode Ra (content only: the model always asks)
ROLLOUT_PROMPT_ASK_ONLY = _ASKING_RULES

JUDGE_PROMPT = (
    "You grade the last message of the doctor in a doctor-patient conversation the user will "
    "show you.\n\n"
    "Format score:\n"
    "- 1.0 if the doctor's last message asks exactly one question;\n"
    "- 0.5 if it asks two questions;\n"
    "- 0.0 if it asks three or more.\n\n"
    "Content score:\n"
    "- 1.0 if the question asks directly about an item of the reference information;\n"
    "- 0.5 if it is closely related to an item but does not ask about it directly;\n"
    "- 0.0 if it is unrelated to every item.\n\n"
    "Reference information:\n{info_truth}\n\n"
    "Answer with these three tags and nothing else, judging only the doctor's last message:\n"
    "<think>your brief reasoning about both scores</think>\n"
    "<format_score>the format score, a number such as 1.0, 0.5 or 0.0</format_score>\n"
    "<content_score>the content score, a number such as 1.0, 0.5 or 0.0</content_score>"
)
_TAG = re.compile(r"<(\w+)>(.*?)</\1>", re.DOTALL)


async def _wait(seconds: float) -> None:
    """The pause before retrying the judge (a module function so tests can skip it)."""
    await asyncio.sleep(seconds)


def parse_judge_tags(reply: Optional[str]) -> dict[str, float]:
    """``format_score`` and ``content_score`` from the judge's tags, each clipped to [0, 1];
    a missing or non-numeric tag grades 0."""
    tags = {name: value.strip() for name, value in _TAG.findall(reply or "")}
    scores = {}
    for name in ("format_score", "content_score"):
        try:
            value = float(tags.get(name, "0"))
        except ValueError:
            value = 0.0
        scores[name] = min(max(value, 0.0), 1.0) if value == value else 0.0  # NaN -> 0
    return scores


def fuse_scores(scores: Mapping[str, float], train_mode: str, fusion_mode: str) -> float:
    """The reward from ``action_score``, ``content_score`` and ``format_score`` (module doc)."""
    action, content = scores["action_score"], scores["content_score"]
    fmt = scores["format_score"]
    if train_mode == "Ra":
        return 2 * content + fmt
    if train_mode == "Rs":
        return 3 * action + fmt
    if fusion_mode == "sum":
        return action + content + fmt
    return action * (1 + 2 * content) + fmt


@WORKFLOWS.register_module("learn2ask_workflow")
class Learn2AskWorkflow(SimpleWorkflow):
    """The Learn-to-Ask example's workflow (see the module docstring).

    Task row: the dialogue so far under ``format.prompt_key`` (a list of ``user`` = patient /
    ``assistant`` = doctor messages, or one patient message as a string), ``decision_truth``
    (``continue`` by default) and ``info_truth`` (``None`` by default).
    Experience: the fused ``reward``; metrics ``action_score``, ``content_score``,
    ``format_score``. A judge failure after ``judge_retries`` retries scores 0 with
    ``reward_error`` (``reward_timeout`` bounds the whole grading of one answer).
    """

    class Args(SingleTurnArgs):
        """``workflow_args`` of ``learn2ask_workflow``."""

        train_mode: Literal["Ra+Rs", "Ra", "Rs"] = Field(
            "Ra+Rs", description="Which scores the reward uses (Ra: content, Rs: decision)."
        )
        fusion_mode: Literal["default", "sum"] = Field(
            "default", description="How Ra+Rs combines the scores: multiplicative or a sum."
        )
        judge_retries: Annotated[int, Field(ge=0)] = Field(
            5, description="Retries of a failed judge call (waiting 1 s, 2 s, ... between)."
        )

    def reward_spec(self, task: Task) -> RewardSpec:
        return None  # graded by :meth:`grade`, not by a reward function

    def system_prompt_for(self, task: Task) -> Optional[str]:
        mode = (task.workflow_args or {}).get("train_mode", "Ra+Rs")
        return ROLLOUT_PROMPT_ASK_ONLY if mode == "Ra" else ROLLOUT_PROMPT

    def reset(self, task: Task) -> None:
        super().reset(task)
        judges = self.auxiliary_models or self.auxiliary_model_wrappers or []
        if not judges:
            raise ValueError(
                f"{self.workflow_name} needs a judge model: configure one under "
                "explorer.auxiliary_models (the first one grades the questions)"
            )
        self.judge = judges[0]
        decision = self.raw_task.get("decision_truth", "continue")
        if decision not in DECISIONS:
            raise ValueError(
                f"{self.workflow_name}: the row's 'decision_truth' is {decision!r}; allowed: "
                f"{', '.join(map(repr, DECISIONS))}"
            )
        self.decision_truth: str = decision
        self.info_truth = str(self.raw_task.get("info_truth", "None"))

    def build_prompt(self, task: Task) -> Any:
        prompt = task.task_desc
        if isinstance(prompt, (list, tuple)):
            for message in prompt:
                if not (
                    isinstance(message, Mapping) and message.get("role") in ("user", "assistant")
                ):
                    raise ValueError(
                        f"{self.workflow_name}: the dialogue at {task.format_args.prompt_key!r} "
                        "must be a list of {'role': 'user' | 'assistant', 'content'} messages; "
                        f"got {message!r}"
                    )
            return [dict(m) for m in prompt]
        return super().build_prompt(task)

    def format_messages(self) -> list[dict[str, Any]]:
        if not isinstance(self.task_desc, list):
            return super().format_messages()
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return system + [dict(m) for m in self.task_desc]

    def judge_messages(self, response: str) -> list[dict[str, str]]:
        """The judge's messages: the grading rules with ``info_truth``, then the dialogue with
        ``response`` as the doctor's last message."""
        dialogue = (
            self.task_desc
            if isinstance(self.task_desc, list)
            else [{"role": "user", "content": self.task_desc}]
        )
        speaker = {"user": "patient", "assistant": "doctor"}
        lines = [
            f"{speaker[m['role']]}: {m.get('content', '')}"
            for m in [*dialogue, {"role": "assistant", "content": response}]
            if m.get("role") in speaker
        ]
        return [
            {"role": "system", "content": JUDGE_PROMPT.format(info_truth=self.info_truth)},
            {"role": "user", "content": "\n".join(lines) + "\n"},
        ]

    async def _ask(self, response: str) -> str:
        for attempt in range(self.args.judge_retries + 1):
            try:
                return await ask_judge(self.judge, self.judge_messages(response), None)
            except Exception as exc:  # noqa: BLE001 - retried, then reported
                if attempt == self.args.judge_retries:
                    raise
                self.logger.warning("%s: judge call failed (%s), retrying", self.workflow_name, exc)
                await _wait(attempt + 1)
        raise AssertionError("unreachable")

    async def grade(self, response: str) -> dict[str, float]:
        """The three scores of one answer (module docstring)."""
        action = "stop" if STOP_MARKER in response else "continue"
        if action != self.decision_truth:
            return {"action_score": 0.0, "content_score": 0.0, "format_score": 0.0}
        if action == "stop":
            exact = 1.0 if response.strip() == STOP_MARKER else 0.0
            return {"action_score": 1.0, "content_score": 1.0, "format_score": exact}
        return {"action_score": 1.0, **parse_judge_tags(await self._ask(response))}

    async def score(self, exp: Experience) -> RewardResult:
        result = await compute_reward_async(
            self.grade, self.reward_timeout, response=exp.response_text or ""
        )
        if result.error is None:
            result.reward = fuse_scores(
                result.components, self.args.train_mode, self.args.fusion_mode
            )
        return result
