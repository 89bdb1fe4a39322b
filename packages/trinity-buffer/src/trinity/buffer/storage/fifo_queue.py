"""The bounded FIFO experience queue (``storage_type: queue``).

A write blocks while the queue is at capacity (back-pressure on the explorer instead of
unbounded memory); a read returns exactly ``batch_size`` experiences, waiting up to
``max_read_timeout``; when every acquired writer has released, readers drain what is left and
then see the end of the stream (the machinery is
:class:`~trinity.buffer.storage.queue_base.BaseQueue`'s).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Optional

from trinity.buffer.base import EndOfStream
from trinity.buffer.storage.queue_base import BaseQueue

if TYPE_CHECKING:  # the queue actor's FIFO holds payloads and needs no torch
    from trinity.common.experience import Experience

__all__ = ["ExperienceQueue"]


class ExperienceQueue(BaseQueue):
    """Bounded FIFO queue of experiences (``storage_type: queue``).

    A write of at most ``capacity`` experiences is inserted whole (a reader never sees half
    of it); a larger write is streamed in as room frees up.
    """

    def __init__(self, name: str, capacity: int) -> None:
        super().__init__(name, capacity)
        self._items: deque[Experience] = deque()

    def _try_put(self, exps: list[Experience]) -> int:
        free = self.capacity - len(self._items)
        n = len(exps) if len(exps) <= self.capacity else min(free, len(exps))
        if n > free or n == 0:
            return 0
        self._items.extend(exps[:n])
        return n

    def _try_get(self, batch_size: int, min_size: int) -> Optional[list[Experience]]:
        size = self._release_size(len(self._items), batch_size, min_size)
        if not size and self._closed:
            if not self._items:
                raise EndOfStream
            size = len(self._items)
        if not size:
            return None
        self._taken(size)
        return [self._items.popleft() for _ in range(size)]

    def qsize(self) -> int:
        return len(self._items)
