"""Waiting on, cancelling and killing Ray tasks and actors, best effort (the runner pool's
helpers: a task past its timeout, a runner to retire)."""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["CANCEL_SETTLE_S", "await_ref", "cancel", "cancel_and_settle", "crash_errors", "kill"]

#: seconds a cancelled task may take to end before its runner is killed anyway
CANCEL_SETTLE_S = 5.0


def crash_errors() -> tuple[type[BaseException], ...]:
    """The errors of a task whose actor died under it."""
    from ray.exceptions import RayActorError, WorkerCrashedError

    return (RayActorError, WorkerCrashedError)


async def await_ref(ref: Any) -> Any:
    """``ref``'s result (a coroutine, so ``asyncio.wait_for`` can bound it)."""
    return await ref


def cancel(ref: Any) -> None:
    """Best-effort ``ray.cancel`` (recursive: the calls the task made are cancelled too)."""
    try:
        import ray

        ray.cancel(ref, recursive=True)
    except Exception:  # finished meanwhile, its actor is dead, or Ray is shutting down
        pass


async def cancel_and_settle(ref: Any) -> None:
    """Cancel ``ref`` (recursively) and wait, up to :data:`CANCEL_SETTLE_S`, until it ends.

    The runner executing ``ref`` forwards the cancel to the engine calls it owns; if the
    runner were killed first (it is replaced right after a timeout), those calls would keep
    running on the engine with nobody to cancel them."""
    cancel(ref)
    try:
        await asyncio.wait_for(await_ref(ref), CANCEL_SETTLE_S)
    except Exception:  # TaskCancelledError (the usual end), a timeout, or the runner died
        pass


def kill(handle: Any) -> None:
    """Best-effort ``ray.kill`` without restart (already dead, or Ray shutting down: nothing)."""
    try:
        import ray

        ray.kill(handle, no_restart=True)
    except Exception:
        pass
