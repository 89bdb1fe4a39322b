"""Building queues from a storage config, and the process-wide registry of named queues.

A writer and a reader created separately in one process meet through :func:`get_queue` (by
``StorageConfig.name``); the Ray queue actor (:mod:`trinity.buffer.storage.ray_queue`) builds
its queue with :func:`build_queue` and compares settings with :func:`queue_settings` too.
"""

from __future__ import annotations

import threading
from typing import Any, Union

from trinity.buffer.storage.fifo_queue import ExperienceQueue
from trinity.buffer.storage.priority_queue import PriorityReplayQueue
from trinity.utils.log import get_logger

logger = get_logger(__name__)

__all__ = ["build_queue", "queue_settings", "get_queue", "remove_queue", "clear_queues"]


def _is_priority(config: Any) -> bool:
    replay = getattr(config, "replay_buffer", None)
    return str(config.storage_type).lower() == "priority_queue" or bool(
        replay is not None and getattr(replay, "enable", False)
    )


def build_queue(config: Any) -> Union[ExperienceQueue, PriorityReplayQueue]:
    """A fresh queue for ``config`` (FIFO, or priority replay when asked for)."""
    name = config.name or "<unnamed>"
    if _is_priority(config):
        replay = config.replay_buffer
        return PriorityReplayQueue(
            name,
            config.capacity,
            priority_fn=getattr(replay, "priority_fn", "linear_decay") or "linear_decay",
            priority_fn_args=dict(getattr(replay, "priority_fn_args", None) or {}),
            reuse_cooldown_time=getattr(replay, "reuse_cooldown_time", None),
        )
    return ExperienceQueue(name, config.capacity)


_QUEUES: dict[str, Union[ExperienceQueue, PriorityReplayQueue]] = {}
_QUEUE_SETTINGS: dict[str, tuple] = {}
_QUEUES_LOCK = threading.Lock()


def queue_settings(config: Any) -> tuple:
    """What :func:`build_queue` builds from ``config``: kind, capacity and replay settings
    (comparable: two configs with equal settings get the same queue)."""
    if not _is_priority(config):
        return ("fifo", int(config.capacity))
    replay = config.replay_buffer
    return (
        "priority",
        int(config.capacity),
        getattr(replay, "priority_fn", None),
        repr(sorted((getattr(replay, "priority_fn_args", None) or {}).items())),
        getattr(replay, "reuse_cooldown_time", None),
    )


def get_queue(config: Any) -> Union[ExperienceQueue, PriorityReplayQueue]:
    """The process-wide queue named ``config.name``, created on first use — how a writer and
    a reader built separately from the same config meet. A config of that name asking for
    another kind of queue (FIFO or priority, capacity, replay settings) gets a new one, built
    as it says; the old one is forgotten (with a warning)."""
    with _QUEUES_LOCK:
        queue = _QUEUES.get(config.name)
        settings = queue_settings(config)
        if queue is not None and _QUEUE_SETTINGS.get(config.name) != settings:
            logger.warning(
                "queue %r opened with other settings %s than the queue of that name %s: "
                "using a new queue",
                config.name,
                settings,
                _QUEUE_SETTINGS.get(config.name),
            )
            queue = None
        if queue is None:
            queue = _QUEUES[config.name] = build_queue(config)
            _QUEUE_SETTINGS[config.name] = settings
        return queue


def remove_queue(name: str) -> None:
    """Forget the named queue (the next :func:`get_queue` creates a fresh one)."""
    with _QUEUES_LOCK:
        _QUEUES.pop(name, None)
        _QUEUE_SETTINGS.pop(name, None)


def clear_queues() -> None:
    """Forget every named queue (test isolation)."""
    with _QUEUES_LOCK:
        _QUEUES.clear()
        _QUEUE_SETTINGS.clear()
