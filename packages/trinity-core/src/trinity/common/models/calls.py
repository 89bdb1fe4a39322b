"""Call a workflow's model through whichever API it offers: ``chat_async`` or ``chat``.

Built-in workflows are async, but the model object a workflow receives is not always a
:class:`~trinity.common.models.model.ModelWrapper`. Code written for Trinity-RFT hands
workflows objects that offer only the synchronous ``chat`` / ``generate`` (its tests configure
``MagicMock().chat.return_value``), or only ``chat_async``; a user's own wrapper may offer
both. Awaiting ``model.chat_async(...)`` in every workflow would fail on the first kind, and
calling ``model.chat(...)`` on the event loop would block it on the others. :func:`call_model`
is the one place that picks the method, so every workflow handles all three kinds alike.

Which method is called:

* a :class:`ModelWrapper` — always ``<op>_async`` (both twins do the same; the async one does
  not tie up a thread);
* otherwise, the twin that matches how the workflow is being run, as Trinity-RFT does: a
  workflow driven through its synchronous ``run()`` (inside :func:`prefer_sync_model_calls`)
  calls ``<op>`` first, one driven through ``run_async()`` calls ``<op>_async`` first;
* the other twin when the preferred one is missing.

A synchronous method runs in a worker thread (it may block on the network); a result that
is awaitable (a sync method returning a coroutine, or an ``<op>_async`` that is a plain
function returning one) is awaited.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any, Callable, Optional

__all__ = ["call_model", "prefer_sync_model_calls", "resolve_awaitable"]

#: True while a workflow runs through its synchronous ``run()``: duck-typed models then get
#: their synchronous methods called first, as Trinity-RFT's synchronous workflows do.
_PREFER_SYNC: ContextVar[bool] = ContextVar("trinity_prefer_sync_model_calls", default=False)


@asynccontextmanager
async def prefer_sync_model_calls() -> AsyncIterator[None]:
    """Within this block, :func:`call_model` tries a duck-typed model's sync method first.

    Entered by ``Workflow.run()`` around the ``run_async()`` it drives: the caller asked for
    the synchronous API, so a model object that configured only ``chat`` (a mock) is served.
    """
    token = _PREFER_SYNC.set(True)
    try:
        yield
    finally:
        _PREFER_SYNC.reset(token)


async def resolve_awaitable(value: Any) -> Any:
    """``await value`` if it is awaitable, else ``value`` (a method that may be either)."""
    if inspect.isawaitable(value):
        return await value
    return value


def _is_model_wrapper(model: Any) -> bool:
    # imported here: model.py imports torch, and this module is imported by model-free code
    from trinity.common.models.model import ModelWrapper

    # the type, not isinstance: a ``MagicMock(spec=ModelWrapper)`` passes isinstance checks
    # but is a duck-typed stand-in whose configured method may be the sync one
    return issubclass(type(model), ModelWrapper)


def _method(model: Any, name: str) -> Optional[Callable[..., Any]]:
    found = getattr(model, name, None)
    return found if callable(found) else None


async def call_model(model: Any, operation: str, *args: Any, **kwargs: Any) -> Any:
    """``model.<operation>_async(*args, **kwargs)`` or ``model.<operation>(...)``, awaited.

    Args:
        model: the workflow's model (a :class:`ModelWrapper` or any object with the methods).
        operation: the sync name, e.g. ``"chat"``, ``"generate"``,
            ``"convert_messages_to_experience"``.

    Raises:
        TypeError: the model has neither method (named in the message).
    """
    async_fn = _method(model, f"{operation}_async")
    sync_fn = _method(model, operation)
    if async_fn is not None and (_is_model_wrapper(model) or sync_fn is None):
        return await resolve_awaitable(async_fn(*args, **kwargs))
    if sync_fn is not None and (_PREFER_SYNC.get() or async_fn is None):
        return await _call_sync(sync_fn, *args, **kwargs)
    if async_fn is not None and inspect.iscoroutinefunction(async_fn):
        return await async_fn(*args, **kwargs)
    if sync_fn is not None:
        # an ``<op>_async`` that is no coroutine function (an unconfigured mock attribute) is
        # less likely to be what the object offers than its plain ``<op>``
        return await _call_sync(sync_fn, *args, **kwargs)
    raise TypeError(
        f"the model ({type(model).__name__}) has neither {operation}_async() nor "
        f"{operation}(); a workflow's model must offer one of them"
    )


async def _call_sync(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run a synchronous model method off the event loop; await what it returns if needed."""
    return await resolve_awaitable(await asyncio.to_thread(fn, *args, **kwargs))
