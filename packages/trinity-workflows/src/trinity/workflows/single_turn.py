"""Single-turn workflows: one prompt, ``repeat_times`` sampled answers, one reward each.

:class:`SimpleWorkflow` is the base of every one-shot task: it builds the chat messages from the
task row (``format.prompt_key``, system prompt, reply prefix), samples all runs in one call with
``n=repeat_times``, scores each answer through :func:`~trinity.workflows.rewards.base.compute_reward`
(a failing reward function costs one sample its reward, never the batch) and is reused across
tasks through :meth:`reset`. Subclasses mostly choose a default reward function and prompt.

Workflow arguments understood by every single-turn workflow (``taskset.workflow_args``):

* ``reward_timeout`` (seconds, default 30): bound on one reward call;
* ``system_prompt``: a system prompt when ``format.system_prompt`` is unset.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Annotated, Any, Optional

from trinity.common.config import ComponentArgs, Field, GenerationConfig
from trinity.common.experience import Experience
from trinity.common.models.calls import call_model
from trinity.common.workflows import WORKFLOWS, Task, Workflow
from trinity.workflows.common import (
    MissingTaskFieldError,
    ResettableWorkflowMixin,
    generation_kwargs,
    read_workflow_args,
    require_keys,
)
from trinity.workflows.rewards.base import (
    DEFAULT_REWARD_TIMEOUT,
    RewardResult,
    RewardSpec,
    apply_reward,
    build_reward_fn,
    compute_reward_async,
)

__all__ = [
    "SingleTurnArgs",
    "SimpleWorkflow",
    "AsyncSimpleWorkflow",
    "MathWorkflow",
    "AsyncMathWorkflow",
    "MathBoxedWorkflow",
    "AsyncMathBoxedWorkflow",
    "MathRMWorkflow",
    "AsyncMathRMWorkflow",
    "CountdownWorkflow",
    "ArithmeticWorkflow",
]

R1_SYSTEM_PROMPT = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant "
    "solves it. The assistant first thinks about the reasoning process in the mind and then "
    "provides the user with the answer. The reasoning process and answer are enclosed within "
    "<think> </think> and <answer> </answer> tags, respectively, i.e.,\n"
    "<think> reasoning process here </think>\n<answer> answer here </answer>."
)
BOXED_SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."
BOXED_THINK_SYSTEM_PROMPT = (
    "You are a helpful assistant that solves math problems. First think about the reasoning "
    "process in your mind, inside <think> </think>, then give the final answer as a closed "
    "form within \\boxed{}."
)


class SingleTurnArgs(ComponentArgs):
    """``workflow_args`` that :class:`SimpleWorkflow` reads: the base of the ``Args`` model of a
    single-turn workflow that declares one (its keys are then checked, unknown ones refused)."""

    reward_timeout: Annotated[float, Field(gt=0)] = Field(
        DEFAULT_REWARD_TIMEOUT, description="Seconds one reward call may take before it scores 0."
    )
    system_prompt: Optional[str] = Field(
        None, description="System prompt when format.system_prompt is unset."
    )


@WORKFLOWS.register_module("simple_workflow")
class SimpleWorkflow(ResettableWorkflowMixin, Workflow):
    """Ask the task's prompt, score every sampled answer with the task's reward function.

    The reward function is ``taskset.default_reward_fn_type`` (or the row's own, see
    ``format.reward_fn_key``), else the workflow's :attr:`default_reward_fn`; it is called as
    ``reward_fn(response=..., truth=..., prompt=..., raw_task=...)`` with the arguments its
    signature accepts, and its components become metrics of the Experience.
    """

    can_reset = True
    can_repeat = True
    is_async = True

    #: reward function used when the task names none (a registered name or a class)
    default_reward_fn: RewardSpec = None
    #: system prompt used when neither the task set nor the row gives one
    default_system_prompt: Optional[str] = None
    #: whether a row must have ``format.response_key`` (a reference answer)
    requires_truth: bool = False

    # ------------------------------------------------------------------ setup
    @property
    def rollout_args(self) -> Any:
        """The task's sampling arguments (a ``GenerationConfig``; ``**self.rollout_args``
        gives them as keyword arguments, as Trinity-RFT's dict does). Read from the task when
        a subclass's ``reset`` did not set them."""
        found = self.__dict__.get("_rollout_args")
        return found if found is not None else self.task.rollout_args

    @rollout_args.setter
    def rollout_args(self, value: Any) -> None:
        self.__dict__["_rollout_args"] = value

    def set_repeat_times(self, repeat_times: int, run_id_base: int) -> None:
        """Also sets ``rollout_args.n`` (as Trinity-RFT does), so a subclass that samples
        with ``**self.rollout_args`` gets ``repeat_times`` answers."""
        super().set_repeat_times(repeat_times, run_id_base)
        args = self.rollout_args
        if isinstance(args, GenerationConfig):
            args.n = repeat_times
        elif isinstance(args, dict):
            args["n"] = repeat_times

    def reset(self, task: Task) -> None:
        """Re-target this workflow at ``task`` (the model and auxiliary models stay)."""
        self.task = task
        self.format_args = task.format_args
        self.raw_task: dict = dict(task.raw_task or {})
        self.workflow_args: dict = dict(task.workflow_args or {})
        declared = read_workflow_args(type(self), self.workflow_args, self.workflow_name)
        if declared is not None:  # only set for a workflow that declares ``Args``
            #: ``workflow_args`` as the workflow's ``Args`` model (checked: bad keys raise)
            self.args: Any = declared
        self.reward_fn_args: dict = dict(task.reward_fn_args or {})
        self.rollout_args = task.rollout_args
        self.is_eval = task.is_eval
        self.repeat_times = task.repeat_times or task.rollout_args.n or 1
        self.check_task(task)
        self.task_desc = self.build_prompt(task)
        self.truth = task.truth
        self.system_prompt = self._system_prompt(task)
        self.reply_prefix = task.format_args.reply_prefix
        self.reward_timeout = float(
            self.workflow_args.get("reward_timeout", DEFAULT_REWARD_TIMEOUT)
        )
        self.reward_fn = build_reward_fn(
            self.reward_spec(task),
            self.reward_fn_args,
            self.auxiliary_model_wrappers or self.auxiliary_models,
        )

    def reward_spec(self, task: Task) -> RewardSpec:
        """The reward function to build: the task's, else :attr:`default_reward_fn` (a workflow
        whose score is fixed, such as an evaluation, returns its own whatever the task says)."""
        return task.reward_fn if task.reward_fn is not None else self.default_reward_fn

    def check_task(self, task: Task) -> None:
        """Refuse a row without the fields this workflow reads (named in the error)."""
        fmt = task.format_args
        keys = {}
        if fmt.prompt_key:
            keys[fmt.prompt_key] = "format.prompt_key"
        if self.requires_truth and fmt.response_key:
            keys[fmt.response_key] = "format.response_key"
        require_keys(task.raw_task, keys, self.workflow_name)

    def build_prompt(self, task: Task) -> str:
        """The user message of the task (the row's ``format.prompt_key`` by default)."""
        prompt = task.task_desc
        if prompt is None:
            raise MissingTaskFieldError(f"{self.workflow_name}: the task has no prompt")
        return str(prompt)

    def _system_prompt(self, task: Task) -> Optional[str]:
        fmt = task.format_args
        if fmt.system_prompt_key and self.raw_task.get(fmt.system_prompt_key):
            return str(self.raw_task[fmt.system_prompt_key])
        return (
            fmt.system_prompt
            or self.workflow_args.get("system_prompt")
            or self.system_prompt_for(task)
        )

    def system_prompt_for(self, task: Task) -> Optional[str]:
        """The default system prompt (subclasses choose one that fits their reward)."""
        return self.default_system_prompt

    def format_messages(self) -> list[dict[str, Any]]:
        """The chat messages sent to the model."""
        messages: list[dict[str, Any]] = []
        if self.system_prompt:
            messages.append({"role": "system", "content": self.system_prompt})
        messages.append({"role": "user", "content": self.task_desc})
        if self.reply_prefix:
            messages.append({"role": "assistant", "content": self.reply_prefix})
        return messages

    # ------------------------------------------------------------------ running
    async def run_async(self) -> list[Experience]:
        messages = self.format_messages()
        responses = await call_model(
            self.model,
            "chat",
            messages,
            **generation_kwargs(self.rollout_args, n=self.repeat_times),
        )
        return await self.score_all(responses)

    def reward_kwargs(self, exp: Experience) -> dict[str, Any]:
        """Keyword arguments offered to the reward function for one response
        (``response_token``: the response's token ids, as Trinity-RFT passes them)."""
        tokens = exp.tokens
        return {
            "response": exp.response_text or "",
            "truth": self.truth,
            "prompt": self.task_desc,
            "raw_task": self.raw_task,
            "response_token": None if tokens is None else tokens[exp.prompt_length :],
        }

    async def score_all(self, responses: Sequence[Experience]) -> list[Experience]:
        """Score the responses at once (each reward call has its own thread: scored one after
        another, a task waited for ``repeat_times`` thread start-ups in a row) and number
        their runs from ``run_id_base``."""
        results = await asyncio.gather(*(self.score(exp) for exp in responses))
        for i, (exp, result) in enumerate(zip(responses, results, strict=True)):
            apply_reward(exp, result)
            exp.eid.run = self.run_id_base + i
        return list(responses)

    async def score(self, exp: Experience) -> RewardResult:
        """Score one response (never raises: failures give 0 and a ``reward_error``)."""
        return await compute_reward_async(
            self.reward_fn, self.reward_timeout, **self.reward_kwargs(exp)
        )


@WORKFLOWS.register_module("math_workflow")
class MathWorkflow(SimpleWorkflow):
    """Math word problems in the DeepSeek-R1 format: ``<think>…</think><answer>…</answer>``.

    Default reward ``math_reward``: math-verify equivalence of the ``<answer>`` with the
    reference, plus a small format bonus/penalty. The R1 system prompt is used only with that
    default reward, whose format it teaches.
    """

    default_reward_fn = "math_reward"
    requires_truth = True

    def system_prompt_for(self, task: Task) -> Optional[str]:
        reward = task.reward_fn
        if (
            reward is None
            or reward == "math_reward"
            or getattr(reward, "__name__", "") == "MathRewardFn"
        ):
            return R1_SYSTEM_PROMPT
        return None


@WORKFLOWS.register_module("async_simple_workflow")
class AsyncSimpleWorkflow(SimpleWorkflow):
    """Trinity-RFT's ``async_simple_workflow``: :class:`SimpleWorkflow`, which is async here
    already; the name and class exist so configs and subclasses written for it run."""


@WORKFLOWS.register_module("async_math_workflow")
class AsyncMathWorkflow(MathWorkflow):
    """Trinity-RFT's ``async_math_workflow``: :class:`MathWorkflow` (async here already)."""


@WORKFLOWS.register_module("math_boxed_workflow")
class MathBoxedWorkflow(SimpleWorkflow):
    """Math with the answer in ``\\boxed{}`` (Qwen-Math style), scored by ``math_boxed_reward``.

    Workflow arguments: ``with_think`` (ask for and check a ``<think>`` block; a response
    without one loses ``format_score_coef``), ``format_score_coef`` (default 0.1),
    ``use_base`` (send a plain-text prompt through ``generate`` for base models).
    """

    default_reward_fn = "math_boxed_reward"
    requires_truth = True

    def reset(self, task: Task) -> None:
        super().reset(task)
        self.with_think = bool(self.workflow_args.get("with_think", False))
        self.format_score_coef = float(self.workflow_args.get("format_score_coef", 0.1))
        self.use_base = bool(self.workflow_args.get("use_base", False))

    def system_prompt_for(self, task: Task) -> Optional[str]:
        with_think = bool((task.workflow_args or {}).get("with_think", False))
        return BOXED_THINK_SYSTEM_PROMPT if with_think else BOXED_SYSTEM_PROMPT

    def format_prompt(self) -> str:
        """The plain-text prompt used with ``use_base`` (no chat template)."""
        text = f"System: {self.system_prompt}\n" if self.system_prompt else ""
        return text + f"User:\n{self.task_desc}\nAssistant:\n"

    async def run_async(self) -> list[Experience]:
        if not self.use_base:
            return await super().run_async()
        responses = await call_model(
            self.model,
            "generate",
            [self.format_prompt()],
            **generation_kwargs(self.rollout_args, n=self.repeat_times),
        )
        return await self.score_all(responses)

    def reward_kwargs(self, exp: Experience) -> dict[str, Any]:
        return {
            **super().reward_kwargs(exp),
            "with_think": self.with_think,
            "format_score_coef": self.format_score_coef,
        }


@WORKFLOWS.register_module("async_math_boxed_workflow")
class AsyncMathBoxedWorkflow(MathBoxedWorkflow):
    """Trinity-RFT's ``async_math_boxed_workflow``: :class:`MathBoxedWorkflow` (async here
    already); the name and class exist so configs and subclasses written for it run."""


MATH_RM_RUBRIC = (
    "You grade a solution to a math problem. Judge whether the final answer is correct and "
    "the reasoning sound; a correct final answer with sloppy reasoning still earns most of the "
    "credit, a wrong final answer earns little."
)


@WORKFLOWS.register_module("math_rm_workflow")
class MathRMWorkflow(SimpleWorkflow):
    """Math scored by an auxiliary reward model (not trained) over its OpenAI API.

    The first auxiliary model (``explorer.auxiliary_models``) grades each answer with the
    ``llm_judge_reward`` rubric (override with ``reward_fn_args.rubric``); the reference answer,
    when the row has one, is shown to the grader. No auxiliary model configured is an error at
    construction, not a silent zero reward.
    """

    default_reward_fn = "llm_judge_reward"

    def reset(self, task: Task) -> None:
        if not (self.auxiliary_model_wrappers or self.auxiliary_models):
            raise ValueError(
                f"{self.workflow_name} needs a reward model: configure one under "
                "explorer.auxiliary_models (it is passed to the workflow as an OpenAI client)"
            )
        task.reward_fn_args = {"rubric": MATH_RM_RUBRIC, **dict(task.reward_fn_args or {})}
        super().reset(task)


@WORKFLOWS.register_module("async_math_rm_workflow")
class AsyncMathRMWorkflow(MathRMWorkflow):
    """Trinity-RFT's ``async_math_rm_workflow``: :class:`MathRMWorkflow` (async here already)."""


COUNTDOWN_PROMPT = (
    "Using the numbers {numbers}, create an equation that equals {target}. You can use basic "
    "arithmetic operations (+, -, *, /) and each number can only be used once. Show your work "
    "in <think> </think> tags. And return the final answer in <answer> </answer> tags, for "
    "example <answer> (1 + 2) / 3 </answer>."
)


@WORKFLOWS.register_module("countdown_workflow")
class CountdownWorkflow(SimpleWorkflow):
    """The Countdown number game (TinyZero): reach ``target`` using each number once.

    Rows carry ``nums`` (or ``numbers``) and ``target``; the prompt is built from them unless
    the row has the ``format.prompt_key`` column. Default reward ``countdown_reward``: 1 for a
    correct equation in ``<answer>``, ``format_score`` (0.1) for a well-formed wrong one.
    """

    default_reward_fn = "countdown_reward"

    def check_task(self, task: Task) -> None:
        row = task.raw_task or {}
        if "nums" not in row and "numbers" not in row:
            require_keys(row, {"nums": "the countdown row format"}, self.workflow_name)
        require_keys(row, {"target": "the countdown row format"}, self.workflow_name)

    def build_prompt(self, task: Task) -> str:
        row = task.raw_task or {}
        if task.format_args.prompt_key and row.get(task.format_args.prompt_key):
            return str(row[task.format_args.prompt_key])
        numbers = list(row.get("nums", row.get("numbers")))
        return COUNTDOWN_PROMPT.format(numbers=numbers, target=row["target"])

    def reset(self, task: Task) -> None:
        super().reset(task)
        row = self.raw_task
        self.truth = json.dumps(
            {"numbers": list(row.get("nums", row.get("numbers"))), "target": row["target"]}
        )


@WORKFLOWS.register_module("arithmetic_workflow")
class ArithmeticWorkflow(SimpleWorkflow):
    """The quickstart's task: answer a small arithmetic question (``"3+4="`` → ``"7"``).

    Small enough that a tiny randomly initialised model learns it with GRPO on a CPU in
    minutes: the prompt is the bare question (no system prompt) and the reward,
    ``arithmetic_reward``, checks the first number of the answer. Rows without an answer
    column get it computed from the question, so a generated data set needs only questions.
    """

    default_reward_fn = "arithmetic_reward"

    def reset(self, task: Task) -> None:
        super().reset(task)
        if self.truth is None:
            from trinity.workflows.rewards.arithmetic import evaluate_question

            self.truth = str(evaluate_question(self.task_desc))
