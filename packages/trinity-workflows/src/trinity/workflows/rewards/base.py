"""Calling reward functions safely, and building them from a task's settings.

A reward function is user code (or a verifier fed with model output), so one that raises, hangs
or returns garbage must cost one sample its reward, not the runner its batch:
:func:`compute_reward` turns every such failure into reward ``0.0`` with a ``reward_error``
metric and the reason in ``info``. Workflows call it for every response.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from trinity.common.experience import Experience
from trinity.common.rewards import REWARD_FUNCTIONS
from trinity.utils.log import get_logger
from trinity.workflows.rewards import threads as reward_threads

__all__ = [
    "DEFAULT_REWARD_TIMEOUT",
    "RewardResult",
    "apply_reward",
    "build_reward_fn",
    "compute_reward",
    "compute_reward_async",
]

logger = get_logger(__name__)

#: Seconds a single reward call may take before it scores 0 (``workflow_args.reward_timeout``).
DEFAULT_REWARD_TIMEOUT = 30.0

RewardSpec = Union[str, type, Callable[..., Any], None]


@dataclass
class RewardResult:
    """The outcome of one reward call.

    Attributes:
        reward: the sum of the components (``0.0`` when the call failed).
        components: named parts (``{"accuracy": 1.0, "format": 0.1}``), logged as metrics.
        error: why the call failed (exception with its type, or timeout), else ``None``.
    """

    reward: float
    components: dict[str, float] = field(default_factory=dict)
    error: Optional[str] = None


def build_reward_fn(
    spec: RewardSpec,
    args: Optional[Mapping[str, Any]] = None,
    auxiliary_models: Optional[Sequence[Any]] = None,
) -> Optional[Callable[..., Any]]:
    """Instantiate a task's reward function.

    Args:
        spec: a registered name (``"math_reward"``), a :class:`RewardFn` subclass, an instance
            or any callable; ``None`` gives ``None``.
        args: ``reward_fn_args`` of the task set, passed to the constructor.
        auxiliary_models: passed as ``auxiliary_models=`` when the constructor accepts it (an
            LLM judge needs a client); other reward functions never see it.
    """
    if spec is None:
        return None
    if isinstance(spec, str):
        spec = REWARD_FUNCTIONS[spec]
    args = dict(args or {})
    if isinstance(spec, type):
        try:
            params = inspect.signature(spec.__init__).parameters
        except (TypeError, ValueError):  # builtins without a signature
            params = {}
        takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
        if auxiliary_models is not None and ("auxiliary_models" in params):
            args["auxiliary_models"] = list(auxiliary_models)
        if not takes_any:
            unknown = sorted(set(args) - set(params) - {"auxiliary_models"})
            if unknown:
                allowed = sorted(k for k in params if k not in ("self", "auxiliary_models"))
                raise TypeError(
                    f"reward_fn_args for {spec.__name__}: unknown argument(s) "
                    f"{', '.join(unknown)}; allowed: {', '.join(allowed) or 'none'}"
                )
            args = {k: v for k, v in args.items() if k in params}
        return spec(**args)
    if callable(spec):
        return spec
    raise TypeError(f"a reward function must be a name, a class or a callable, got {spec!r}")


def _normalize(value: Any) -> RewardResult:
    """A reward function's return value as components, refusing non-numbers and NaN."""
    if isinstance(value, Mapping):
        components = {}
        for key, part in value.items():
            if isinstance(part, bool) or not isinstance(part, (int, float)):
                raise TypeError(f"reward component {key!r} is {part!r}, not a number")
            components[str(key)] = float(part)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        components = {"reward": float(value)}
    else:
        raise TypeError(
            f"a reward function must return a float or a dict of floats, got {type(value).__name__}"
        )
    for key, part in components.items():
        if not math.isfinite(part):
            raise ValueError(f"reward component {key!r} is {part}, not a finite number")
    return RewardResult(reward=float(sum(components.values())), components=components)


def _filter_kwargs(fn: Callable[..., Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Only the keyword arguments ``fn`` accepts (an older reward function takes fewer)."""
    target = fn.__call__ if not inspect.isfunction(fn) and not inspect.ismethod(fn) else fn
    code = getattr(target, "__code__", None)
    if hasattr(target, "__wrapped__") or hasattr(target, "__signature__"):
        code = None  # a decorated function: inspect.signature reads what it wraps
    try:
        # a reward function is called once per response: its signature is read once per code
        # object (inspect.signature per call was ~5 % of a runner's time on the quickstart)
        names = _accepted(code) if code is not None else _parameters(target)
    except (TypeError, ValueError):
        return kwargs
    if names is None:
        return kwargs
    return {k: v for k, v in kwargs.items() if k in names}


def _parameters(target: Callable[..., Any]) -> Optional[frozenset[str]]:
    """The keyword names ``target`` accepts; ``None`` when it takes ``**kwargs``."""
    params = inspect.signature(target).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return None
    return frozenset(params)


@functools.lru_cache(maxsize=256)
def _accepted(code: Any) -> Optional[frozenset[str]]:
    """:func:`_parameters` from a code object (what a function's or a bound method's
    signature comes from, whatever object it is bound to)."""
    if code.co_flags & inspect.CO_VARKEYWORDS:
        return None
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    return frozenset(names)


def _call_in_thread(fn: Callable[..., Any], kwargs: dict[str, Any], timeout: Optional[float]):
    """Run ``fn(**kwargs)`` on a daemon thread; return ``(done, value, exc)``.

    A reward function stuck in C code cannot be interrupted, so its thread is abandoned rather
    than allowed to block other calls or the interpreter's exit (:mod:`.threads`: free
    threads are reused, a call that finds none starts one).
    """
    box: dict[str, Any] = {}
    finished = threading.Event()

    def target() -> None:
        try:
            box["value"] = fn(**kwargs)
        except BaseException as exc:  # noqa: BLE001 - reported to the caller
            box["exc"] = exc
        finally:
            finished.set()

    reward_threads.submit(target)
    done = finished.wait(timeout)
    return done, box.get("value"), box.get("exc")


async def _await_in_thread(
    fn: Callable[..., Any], kwargs: dict[str, Any], timeout: Optional[float]
) -> tuple[bool, Any, Optional[BaseException]]:
    """:func:`_call_in_thread` for a coroutine: the daemon thread hands its outcome to the
    event loop, which waits without holding a thread of its own (``asyncio.to_thread`` around
    the blocking version held one of the loop's few executor threads per call, and a stuck
    reward function held it for its whole timeout)."""
    loop = asyncio.get_running_loop()
    outcome: asyncio.Future = loop.create_future()

    def deliver(value: Any, exc: Optional[BaseException]) -> None:
        if not outcome.done():  # not already given up on (timeout) or cancelled
            outcome.set_result((value, exc))

    def target() -> None:
        value, exc = None, None
        try:
            value = fn(**kwargs)
        except BaseException as err:  # noqa: BLE001 - reported to the caller
            exc = err
        try:
            loop.call_soon_threadsafe(deliver, value, exc)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass

    reward_threads.submit(target)
    try:
        value, exc = await asyncio.wait_for(outcome, timeout)
    except asyncio.TimeoutError:
        return False, None, None
    return True, value, exc


def _outcome(
    name: str, timeout: Optional[float], done: bool, value: Any, exc: Optional[BaseException]
) -> RewardResult:
    """A reward call's :class:`RewardResult` from what its thread reported."""
    if not done:
        logger.warning("reward function %s timed out after %ss", name, timeout)
        return RewardResult(0.0, error=f"{name} timed out after {timeout}s")
    if exc is not None:
        logger.warning("reward function %s raised %s: %s", name, type(exc).__name__, exc)
        return RewardResult(0.0, error=f"{name} raised {type(exc).__name__}: {exc}")
    try:
        return _normalize(value)
    except (TypeError, ValueError) as bad:
        return RewardResult(0.0, error=f"{name}: {bad}")


def compute_reward(
    reward_fn: Optional[Callable[..., Any]],
    timeout: Optional[float] = DEFAULT_REWARD_TIMEOUT,
    **kwargs: Any,
) -> RewardResult:
    """Call ``reward_fn(**kwargs)`` and never raise.

    Keyword arguments the function does not accept are dropped (``response=``, ``truth=``,
    ``prompt=`` ... are offered to every reward function). The call runs in a separate thread
    bounded by ``timeout`` seconds (``None``: no bound).

    Returns:
        :class:`RewardResult`; on an exception, a timeout or a bad return value its reward is
        ``0.0`` and ``error`` says why.
    """
    if reward_fn is None:
        return RewardResult(0.0, error="no reward function configured")
    name = getattr(reward_fn, "__name__", type(reward_fn).__name__)
    return _outcome(
        name, timeout, *_call_in_thread(reward_fn, _filter_kwargs(reward_fn, kwargs), timeout)
    )


async def compute_reward_async(
    reward_fn: Optional[Callable[..., Any]],
    timeout: Optional[float] = DEFAULT_REWARD_TIMEOUT,
    **kwargs: Any,
) -> RewardResult:
    """:func:`compute_reward` without blocking the event loop (other tasks keep running).

    A reward function that is itself a coroutine function (an async LLM judge) is awaited with
    ``asyncio.wait_for``.
    """
    if reward_fn is None:
        return RewardResult(0.0, error="no reward function configured")
    name = getattr(reward_fn, "__name__", type(reward_fn).__name__)
    if _is_async_callable(reward_fn):
        try:
            value = await asyncio.wait_for(
                reward_fn(**_filter_kwargs(reward_fn, kwargs)), timeout=timeout
            )
        except asyncio.TimeoutError:
            return RewardResult(0.0, error=f"{name} timed out after {timeout}s")
        except Exception as exc:  # noqa: BLE001 - any failure scores 0
            return RewardResult(0.0, error=f"{name} raised {type(exc).__name__}: {exc}")
        try:
            return _normalize(value)
        except (TypeError, ValueError) as bad:
            return RewardResult(0.0, error=f"{name}: {bad}")
    outcome = await _await_in_thread(reward_fn, _filter_kwargs(reward_fn, kwargs), timeout)
    return _outcome(name, timeout, *outcome)


def _is_async_callable(fn: Any) -> bool:
    if inspect.iscoroutinefunction(fn):
        return True
    return not inspect.isroutine(fn) and inspect.iscoroutinefunction(type(fn).__call__)


def apply_reward(exp: Experience, result: RewardResult) -> Experience:
    """Write a reward result into an Experience: reward, per-component metrics, error info."""
    exp.reward = result.reward
    metrics = dict(exp.metrics or {})
    metrics.update(result.components)
    metrics["reward_error"] = 0.0 if result.error is None else 1.0
    exp.metrics = metrics
    if result.error is not None:
        exp.info = {**(exp.info or {}), "reward_error": result.error}
    return exp
