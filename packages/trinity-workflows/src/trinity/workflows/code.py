"""``code_workflow``: ask for a program, run it against the task's tests, reward the pass rate.

The guide's "CodeWorkflow": one prompt (``format.prompt_key``), ``repeat_times`` sampled
answers, each one's program executed in a sandbox against the row's tests by
``code_test_reward`` (see :mod:`trinity.workflows.rewards.code` for the test formats and
:mod:`trinity.workflows.sandbox` for the isolation). The reward is the fraction of tests passed.

Why a sample lost credit is kept with it: ``Experience.info["code_reason"]`` (``"test 2:
timeout after 2s (wall-time limit)"``, ``"no code block"``, ``"test 1: assertion failed"``) and
``info["code_results"]`` (every test's status and reason), with ``tests_passed`` /
``tests_total`` / ``pass_rate`` as metrics. A training run whose reward is flat at 0 is then
diagnosable from the logged experiences.

Workflow arguments (``taskset.workflow_args``), besides those of ``simple_workflow``:

* ``sandbox_concurrency`` (default 2): sandboxes running at once for all samples of a task,
  so 8 samples with N tests each never start 8 × N process trees together;
* ``reward_timeout`` (seconds): an overall bound on scoring one sample. Unset by default,
  because every test run is already bounded by the sandbox's wall-time limit.

Sandbox settings come from ``reward_fn_args`` (``timeout``, ``memory_mb``, ``sandbox: {...}``).
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional

from trinity.common.experience import Experience
from trinity.common.models.calls import call_model
from trinity.common.workflows import WORKFLOWS, Task
from trinity.workflows.common import generation_kwargs
from trinity.workflows.rewards.base import RewardResult, apply_reward
from trinity.workflows.rewards.code import CodeEvaluation, CodeTest, CodeTestRewardFn
from trinity.workflows.single_turn import SimpleWorkflow

__all__ = ["CODE_SYSTEM_PROMPT", "CodeWorkflow"]

CODE_SYSTEM_PROMPT = (
    "You are an expert Python programmer. Solve the problem with a complete, self-contained "
    "Python 3 program that uses only the standard library. Think about the problem first if you "
    "need to, then give your final solution as a single ```python code block. If the task asks "
    "for a function, define it with the exact name requested; if it describes input and output, "
    "read from standard input and print to standard output."
)

#: Default number of sandboxes a task's samples may run at once.
DEFAULT_SANDBOX_CONCURRENCY = 2


@WORKFLOWS.register_module("code_workflow")
class CodeWorkflow(SimpleWorkflow):
    """Generate programs and score them by the tests they pass in a sandbox.

    The default reward function is ``code_test_reward``. Another reward function named by the
    task set works too (it is called like in ``simple_workflow``), but only
    ``code_test_reward`` fills ``code_reason`` / ``code_results``.
    """

    default_reward_fn = "code_test_reward"
    default_system_prompt = CODE_SYSTEM_PROMPT

    def reset(self, task: Task) -> None:
        super().reset(task)
        concurrency = self.workflow_args.get("sandbox_concurrency", DEFAULT_SANDBOX_CONCURRENCY)
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(
                f"{self.workflow_name}: workflow_args.sandbox_concurrency must be an integer "
                f">= 1, got {concurrency!r}"
            )
        self.sandbox_concurrency = concurrency
        # No overall bound unless asked for: every test run is bounded by the sandbox already.
        timeout = self.workflow_args.get("reward_timeout")
        self.code_reward_timeout: Optional[float] = float(timeout) if timeout is not None else None
        # Parse the tests once per task (not per sample) and refuse a row without any now,
        # naming the keys tried, rather than scoring every sample 0.
        self.tests: Optional[list[CodeTest]] = None
        if isinstance(self.reward_fn, CodeTestRewardFn):
            self.tests = self.reward_fn.parse_tests(self.raw_task)

    async def run_async(self) -> list[Experience]:
        responses = await call_model(
            self.model,
            "chat",
            self.format_messages(),
            **generation_kwargs(self.rollout_args, n=self.repeat_times),
        )
        # One limiter per run, shared by all samples: their tests run concurrently but bounded.
        limiter = asyncio.Semaphore(self.sandbox_concurrency)
        results = await asyncio.gather(*(self.score(exp, limiter) for exp in responses))
        for i, (exp, result) in enumerate(zip(responses, results, strict=True)):
            apply_reward(exp, result)
            exp.eid.run = self.run_id_base + i
        return list(responses)

    async def score(
        self, exp: Experience, limiter: Optional[asyncio.Semaphore] = None
    ) -> RewardResult:
        """Score one response and record why it lost credit in ``exp.info`` / ``exp.metrics``.

        ``limiter`` bounds the sandboxes running at once (shared by the samples of a run; a
        fresh one with ``sandbox_concurrency`` slots when omitted). Never raises: a failure of
        the evaluation itself scores 0 with a ``reward_error``.
        """
        if not isinstance(self.reward_fn, CodeTestRewardFn):
            return await super().score(exp)
        limiter = limiter or asyncio.Semaphore(self.sandbox_concurrency)
        try:
            evaluation = await self._evaluate(exp.response_text or "", limiter)
        except asyncio.TimeoutError:
            reason = f"code_test_reward timed out after {self.code_reward_timeout}s"
            exp.info = {**(exp.info or {}), "code_reason": reason}
            return RewardResult(0.0, error=reason)
        except Exception as exc:  # noqa: BLE001 - one bad sample must not sink the batch
            reason = f"code_test_reward raised {type(exc).__name__}: {exc}"
            self.logger.warning(reason)
            exp.info = {**(exp.info or {}), "code_reason": reason}
            return RewardResult(0.0, error=reason)
        info = evaluation.to_info()
        exp.info = {**(exp.info or {}), **info}
        exp.metrics = {
            **(exp.metrics or {}),
            "tests_passed": float(evaluation.passed),
            "tests_total": float(evaluation.total),
        }
        return RewardResult(evaluation.pass_rate, {"pass_rate": evaluation.pass_rate})

    async def _evaluate(self, response: str, limiter: asyncio.Semaphore) -> CodeEvaluation:
        assert isinstance(self.reward_fn, CodeTestRewardFn)
        coro = self.reward_fn.evaluate_async(
            response, raw_task=self.raw_task, tests=self.tests, limiter=limiter
        )
        if self.code_reward_timeout is None:
            return await coro
        return await asyncio.wait_for(coro, timeout=self.code_reward_timeout)

    def reward_kwargs(self, exp: Experience) -> dict[str, Any]:
        """What a non-default reward function is offered: the usual keywords plus the tests."""
        return {**super().reward_kwargs(exp), "tests": self.tests}
