"""A reward function that raises, hangs or returns garbage costs one sample, not the runner."""

from __future__ import annotations

import asyncio
import math
import time

import pytest

from trinity.common.config import FormatConfig
from trinity.common.models.testing import FakeModelWrapper
from trinity.common.rewards import REWARD_FUNCTIONS, RewardFn
from trinity.common.workflows import Task, run_task
from trinity.workflows.rewards.base import (
    build_reward_fn,
    compute_reward,
    compute_reward_async,
)


class Raises(RewardFn):
    def __call__(self, response, **kwargs):
        raise RuntimeError(f"cannot score {response!r}")


class Hangs(RewardFn):
    def __call__(self, response, **kwargs):
        time.sleep(30)
        return {"x": 1.0}


class ReturnsNaN(RewardFn):
    def __call__(self, response, **kwargs):
        return {"x": math.nan}


class ReturnsText(RewardFn):
    def __call__(self, response, **kwargs):
        return "good"


class Scaled(RewardFn):
    def __init__(self, scale: float = 1.0):
        self.scale = scale

    def __call__(self, response, truth):  # no **kwargs: extra offered arguments are dropped
        return {"match": self.scale * float(response.strip() == truth)}


def test_exception_gives_zero_and_the_reason():
    result = compute_reward(Raises(), response="r")
    assert result.reward == 0.0
    assert "RuntimeError" in result.error and "cannot score 'r'" in result.error


def test_timeout_gives_zero_without_waiting_for_the_function():
    start = time.monotonic()
    result = compute_reward(Hangs(), timeout=0.2, response="r")
    assert time.monotonic() - start < 5
    assert result.reward == 0.0 and "timed out after 0.2s" in result.error


@pytest.mark.parametrize("fn", [ReturnsNaN(), ReturnsText()])
def test_bad_return_values_are_errors(fn):
    result = compute_reward(fn, response="r")
    assert result.reward == 0.0 and result.error


def test_plain_float_and_old_signatures_work():
    assert compute_reward(lambda response: 0.5, response="r").reward == 0.5
    result = compute_reward(Scaled(2.0), response=" 7 ", truth="7", prompt="ignored")
    assert result.reward == 2.0 and result.components == {"match": 2.0} and result.error is None


def test_async_reward_functions_are_awaited_with_a_timeout():
    class AsyncJudge:
        async def __call__(self, response, **kwargs):
            await asyncio.sleep(0 if response == "fast" else 10)
            return {"judge": 1.0}

    fast = asyncio.run(compute_reward_async(AsyncJudge(), timeout=1, response="fast"))
    slow = asyncio.run(compute_reward_async(AsyncJudge(), timeout=0.1, response="slow"))
    assert fast.reward == 1.0
    assert slow.reward == 0.0 and "timed out" in slow.error


def test_async_callers_of_blocking_rewards_wait_without_holding_threads():
    """Twenty stuck reward calls at once (more than the event loop's executor has threads)
    all time out together, and a good call beside them still scores."""

    async def main():
        calls = [compute_reward_async(Hangs(), timeout=0.5, response="r") for _ in range(20)]
        calls.append(compute_reward_async(Scaled(2.0), timeout=5, response="7", truth="7"))
        calls.append(compute_reward_async(Raises(), timeout=5, response="r"))
        return await asyncio.gather(*calls)

    start = time.monotonic()
    *stuck, good, raised = asyncio.run(main())
    assert time.monotonic() - start < 1.5  # one timeout, not one per executor thread
    assert all(r.reward == 0.0 and "timed out after 0.5s" in r.error for r in stuck)
    assert good.reward == 2.0 and good.error is None
    assert raised.reward == 0.0 and "cannot score 'r'" in raised.error


def test_build_reward_fn_names_unknown_arguments():
    with pytest.raises(TypeError, match=r"unknown argument\(s\) scal; allowed: scale"):
        build_reward_fn(Scaled, {"scal": 2})
    assert build_reward_fn(Scaled, {"scale": 3}).scale == 3
    assert build_reward_fn(None) is None


@pytest.mark.parametrize("bad", [Raises, Hangs, ReturnsNaN])
def test_workflow_batch_completes_when_the_reward_fails(bad, monkeypatch):
    name = f"test_bad_{bad.__name__.lower()}"
    REWARD_FUNCTIONS.register_module(name, bad)
    try:
        task = Task(
            workflow="simple_workflow",
            reward_fn=name,
            raw_task={"q": "1+1=", "a": "2"},
            format_args=FormatConfig(prompt_key="q", response_key="a"),
            workflow_args={"reward_timeout": 0.3},
            repeat_times=3,
        )
        exps = run_task(task, FakeModelWrapper(responses=["2"]))
    finally:
        REWARD_FUNCTIONS.unregister(name)
    assert len(exps) == 3
    assert all(e.reward == 0.0 for e in exps)
    assert all(e.metrics["reward_error"] == 1.0 for e in exps)
    assert all(bad.__name__ in e.info["reward_error"] for e in exps)


def test_reward_functions_get_the_keywords_their_signatures_take():
    """The accepted keywords come from each function's code object, read once (a cache), and
    agree with ``inspect.signature``: plain and keyword-only parameters, ``**kwargs``, bound
    methods, callable objects, decorated functions (what they wrap), partials, builtins."""
    import functools
    import inspect

    from trinity.workflows.rewards.base import _filter_kwargs

    given = {"response": "r", "truth": "t", "extra": 1}

    def plain(response, truth):
        return 1.0

    def open_ended(response, **rest):
        return 1.0

    def keyword_only(response, *, extra=0):
        return 1.0

    class Judge:
        def __call__(self, response, truth=None):
            return 1.0

        def score(self, truth):
            return 1.0

    def logged(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return fn(*args, **kwargs)

        return wrapper

    @logged
    def decorated(truth):
        return 1.0

    def expected(fn):
        target = fn if inspect.isfunction(fn) or inspect.ismethod(fn) else fn.__call__
        params = inspect.signature(target).parameters
        if any(p.kind is p.VAR_KEYWORD for p in params.values()):
            return set(given)
        return set(given) & set(params)

    cases = [plain, open_ended, keyword_only, Judge(), Judge().score, decorated]
    cases += [functools.partial(plain, truth="x"), len]
    for _ in range(2):  # the second round is served from the cache
        for fn in cases:
            assert set(_filter_kwargs(fn, given)) == expected(fn), fn
    assert set(_filter_kwargs(decorated, given)) == {"truth"}
    assert set(_filter_kwargs(keyword_only, given)) == {"response", "extra"}
