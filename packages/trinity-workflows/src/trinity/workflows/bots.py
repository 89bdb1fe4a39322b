"""``bots_math_boxed_workflow``: the math workflow of Trinity-RFT's BOTS example.

BOTS (online task selection, https://arxiv.org/abs/2510.26374) trains on math sets whose
prompts are stored as chat messages, often nested in the row (``prompt_key: "extra.prompt"``),
and scores the boxed answer with DAPO-style grading. This is ``math_boxed_workflow`` with those
three differences:

* ``format.prompt_key`` / ``format.response_key`` may be dotted paths into nested dicts;
* the prompt may be a list of chat messages, sent as they are (no system prompt added); a
  string is asked as ``math_boxed_workflow`` asks it;
* the reward is the example's: ``accuracy`` 1.0 when the last ``\\boxed{}`` after any
  ``</think>`` grades equal to the reference (normalised strings, then numbers, then
  math-verify), and ``format_score`` ``-format_score_coef`` when ``with_think`` is set and the
  response lacks one well-formed ``<think>`` block. The task's ``reward_fn`` and
  ``reward_fn_args`` are not used, as in the example.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from trinity.common.workflows import WORKFLOWS, Task
from trinity.workflows.common import MissingTaskFieldError
from trinity.workflows.rewards.base import RewardSpec
from trinity.workflows.single_turn import MathBoxedWorkflow

__all__ = ["BOTSMathBoxedWorkflow", "bots_math_boxed_reward", "nested_get"]

_MISSING = object()


def nested_get(row: Optional[Mapping[str, Any]], path: str) -> Any:
    """``row["a"]["b"]`` for ``path="a.b"`` (a key that itself contains dots is found first);
    ``_MISSING`` where the path does not resolve."""
    if not isinstance(row, Mapping):
        return _MISSING
    if path in row:
        return row[path]
    head, dot, rest = path.partition(".")
    if not dot or head not in row:
        return _MISSING
    return nested_get(row[head], rest)


def bots_math_boxed_reward(
    response: str,
    truth: Any = None,
    with_think: bool = False,
    format_score_coef: float = 0.1,
) -> dict[str, float]:
    """The BOTS example's reward: ``accuracy`` and ``format_score`` (module docstring).

    Raises:
        ValueError: no reference answer (reported as ``reward_error``).
    """
    from trinity.workflows.rewards.eval_utils import grade_answer, match_answer
    from trinity.workflows.rewards.math import validate_think_pattern

    if truth is None:
        raise ValueError(
            "bots_math_boxed_workflow needs the reference answer (format.response_key)"
        )
    _, answer = match_answer(str(response or ""))
    correct, _ = grade_answer(answer, str(truth))
    format_score = 0.0
    if with_think and not validate_think_pattern(response or ""):
        format_score = -float(format_score_coef)
    return {"accuracy": 1.0 if correct else 0.0, "format_score": format_score}


@WORKFLOWS.register_module("bots_math_boxed_workflow")
class BOTSMathBoxedWorkflow(MathBoxedWorkflow):
    """``math_boxed_workflow`` for the BOTS example's data (see the module docstring).

    Workflow arguments: those of ``math_boxed_workflow`` (``with_think``,
    ``format_score_coef``, ``use_base``; ``use_base`` needs a string prompt).
    """

    def reward_spec(self, task: Task) -> RewardSpec:
        return bots_math_boxed_reward

    def _lookup(self, task: Task, field: str) -> Any:
        path = getattr(task.format_args, field)
        value = nested_get(task.raw_task, path) if path else _MISSING
        if value is _MISSING:
            row = task.raw_task or {}
            raise MissingTaskFieldError(
                f"{self.workflow_name}: the task row has nothing at {path!r} (set by "
                f"format.{field}; dots step into nested dicts); the row has keys "
                f"{sorted(row) or 'none'}"
            )
        return value

    def check_task(self, task: Task) -> None:
        self._lookup(task, "prompt_key")
        self._lookup(task, "response_key")

    def build_prompt(self, task: Task) -> Any:
        prompt = self._lookup(task, "prompt_key")
        if isinstance(prompt, str):
            return prompt
        if isinstance(prompt, (list, tuple)) and all(
            isinstance(m, Mapping) and "role" in m and "content" in m for m in prompt
        ):
            return [dict(m) for m in prompt]
        raise ValueError(
            f"{self.workflow_name}: the prompt at {task.format_args.prompt_key!r} must be a "
            f"string or a list of {{'role', 'content'}} messages, got {str(prompt)[:200]!r}"
        )

    def reset(self, task: Task) -> None:
        super().reset(task)
        self.truth = self._lookup(task, "response_key")
        if self.use_base and not isinstance(self.task_desc, str):
            raise ValueError(
                f"{self.workflow_name}: workflow_args.use_base needs a string prompt; the "
                f"prompt at {task.format_args.prompt_key!r} is a list of chat messages"
            )

    def format_messages(self) -> list[dict[str, Any]]:
        if isinstance(self.task_desc, list):
            return [dict(m) for m in self.task_desc]
        return super().format_messages()
