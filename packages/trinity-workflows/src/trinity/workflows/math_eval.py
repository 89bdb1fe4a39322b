"""Evaluation of math answers the way Qwen2.5-Math's evaluation scores them.

``math_eval_workflow`` (and its Trinity-RFT twin ``async_math_eval_workflow``) is meant for
``eval_tasksets``: it asks the question with the chain-of-thought instruction Qwen2.5-Math's
evaluation uses (the final answer in ``\\boxed{}``), samples with that evaluation's settings
(temperature 0.6, top-p 0.8) and scores each answer with
:func:`~trinity.workflows.rewards.eval_utils.verify_math_answer`: the final answer (last
``\\boxed{}``, else the text after "the answer is", else the last number) is compared with the
reference by string normalisation, numerically, then with math-verify. The score is the
``accuracy`` metric, 1.0 or 0.0; the Experience's reward stays 0.0 as in Trinity-RFT 0.6 (an
evaluation reports ``accuracy``), unless ``workflow_args.reward_is_accuracy`` sets it to the
accuracy too (so ``reward`` and ``accuracy`` agree, e.g. to train on this workflow).

The task's reward function is not used (Trinity-RFT's workflow ignores it too): an evaluation
reports one fixed measure whatever the training reward is, so the numbers stay comparable
between runs and with published Qwen2.5-Math results.
"""

from __future__ import annotations

from typing import Annotated, Any

from trinity.common.config import Field
from trinity.common.experience import Experience
from trinity.common.models.calls import call_model
from trinity.common.workflows import WORKFLOWS, Task
from trinity.workflows.common import MissingTaskFieldError, generation_kwargs, require_keys
from trinity.workflows.rewards.base import RewardSpec
from trinity.workflows.single_turn import BOXED_SYSTEM_PROMPT, SimpleWorkflow, SingleTurnArgs

__all__ = ["AsyncMathEvalWorkflow", "MathEvalWorkflow", "math_eval_accuracy", "reference_answer"]

#: The row column Trinity-RFT's workflow reads the question from, whatever format.prompt_key is.
QUESTION_COLUMN = "question"
#: Qwen2.5-Math's system message (its chat template's default); the evaluation's numbers
#: depend on it, so it is kept as the models were evaluated with it.
EVAL_SYSTEM_PROMPT = "You are a helpful assistant."


def reference_answer(truth: Any) -> str:
    """The final answer of a reference: its last ``\\boxed{}``, else what follows its last
    ``####`` (GSM8K), else the whole text.

    Trinity-RFT took the reference's *last number* when it has no ``\\boxed{}``, which turns a
    bare reference such as ``\\frac{1}{2}`` into ``2``; a bare reference is taken whole here.
    """
    from trinity.workflows.rewards.eval_utils import find_boxed_answer

    text = str(truth).strip()
    if "boxed" in text:
        boxed = find_boxed_answer(text)
        if boxed:
            return boxed
    if "####" in text:
        return text.rsplit("####", 1)[1].strip()
    return text


def math_eval_accuracy(response: str, truth: Any = None) -> dict[str, float]:
    """``{"accuracy": 1.0 or 0.0}``: whether the response's final answer equals the reference.

    Raises:
        ValueError: no reference answer (a data error, reported as ``reward_error``).
    """
    from trinity.workflows.rewards.eval_utils import extract_answer, math_equal

    if truth is None or str(truth).strip() == "":
        raise ValueError("math_eval_workflow needs a reference answer (format.response_key)")
    predicted = extract_answer(response or "")
    return {"accuracy": 1.0 if math_equal(predicted, reference_answer(truth)) else 0.0}


@WORKFLOWS.register_module("math_eval_workflow")
class MathEvalWorkflow(SimpleWorkflow):
    """Score math answers as Qwen2.5-Math's evaluation does (see the module docstring).

    Task row: the question under ``format.prompt_key`` (or under ``question``, the column
    Trinity-RFT reads), the reference answer under ``format.response_key`` (bare, in a
    ``\\boxed{}``, or a GSM8K solution ending in ``#### <answer>``).

    Messages: the system prompt ``You are a helpful assistant.`` (``format.system_prompt`` or
    ``workflow_args.system_prompt`` replace it), then the question followed by the instruction
    to reason step by step and box the final answer.

    Sampling: the task's ``rollout_args`` (``max_tokens`` ...), with ``temperature`` and
    ``top_p`` from ``workflow_args`` (Qwen2.5-Math's 0.6 and 0.8 by default; Trinity-RFT
    fixes them); ``repeat_times`` answers in one call.

    Experience: ``accuracy`` metric = 1.0 for a correct final answer, else 0.0; ``reward`` 0.0
    (Trinity-RFT 0.6's), or the accuracy with ``workflow_args.reward_is_accuracy``.
    """

    class Args(SingleTurnArgs):
        """``workflow_args`` of ``math_eval_workflow``."""

        temperature: Annotated[float, Field(ge=0.0)] = Field(
            0.6, description="Sampling temperature (Qwen2.5-Math's evaluation uses 0.6)."
        )
        top_p: Annotated[float, Field(gt=0.0, le=1.0)] = Field(
            0.8, description="Nucleus sampling mass (Qwen2.5-Math's evaluation uses 0.8)."
        )
        reward_is_accuracy: bool = Field(
            False,
            description="Set each Experience's reward to its accuracy (Trinity-RFT 0.6 leaves "
            "it 0.0 and reports accuracy in metrics only).",
        )

    requires_truth = True
    default_system_prompt = EVAL_SYSTEM_PROMPT

    def reward_spec(self, task: Task) -> RewardSpec:
        return math_eval_accuracy

    def _question_column(self, task: Task) -> str:
        row = task.raw_task or {}
        key = task.format_args.prompt_key
        if key and key in row:
            return key
        if QUESTION_COLUMN in row:
            return QUESTION_COLUMN
        raise MissingTaskFieldError(
            f"{self.workflow_name}: the task row lacks the question: neither {key!r} (set by "
            f"format.prompt_key) nor {QUESTION_COLUMN!r}; the row has keys {sorted(row) or 'none'}"
        )

    def check_task(self, task: Task) -> None:
        self._question_column(task)
        key = task.format_args.response_key
        require_keys(task.raw_task, {key: "format.response_key"}, self.workflow_name)

    def build_prompt(self, task: Task) -> str:
        question = (task.raw_task or {})[self._question_column(task)]
        return f"{question}\n{BOXED_SYSTEM_PROMPT}"

    async def run_async(self) -> list[Experience]:
        kwargs = generation_kwargs(self.rollout_args, n=self.repeat_times)
        kwargs.update(temperature=self.args.temperature, top_p=self.args.top_p)
        responses = await call_model(self.model, "chat", self.format_messages(), **kwargs)
        experiences = await self.score_all(responses)
        if not self.args.reward_is_accuracy:
            for exp in experiences:
                exp.reward = 0.0
        return experiences


@WORKFLOWS.register_module("async_math_eval_workflow")
class AsyncMathEvalWorkflow(MathEvalWorkflow):
    """Trinity-RFT's ``async_math_eval_workflow``: :class:`MathEvalWorkflow` (async here
    already)."""
