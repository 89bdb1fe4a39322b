"""The priority replay queue (``storage_type: priority_queue`` or ``replay_buffer.enable``).

It follows Trinity-RFT 0.6's replay queue, whose unit is the *item*: the list of experiences
one write put in (its explorer, and ours, writes one list per explore step; a test or a custom
producer may write one per task). Keeping a write together is the point: the experiences of a
group (one task's rollouts, whose advantages are computed against each other) are ranked,
read, reused and evicted together.

* Ranking: a registered priority function (:mod:`trinity.buffer.storage.priority`) maps an
  item to ``(priority, keep)``, from its first experience's model version and use count. A
  read takes the highest priority first; among equal priorities the oldest item first.
* ``capacity`` counts items. At capacity a new item evicts the oldest of the lowest-priority
  items, unless it ranks lower still, in which case it is dropped: a replay buffer never
  blocks the explorer.
* Reads: a read of ``batch_size`` experiences takes whole items, best first, into a pool and
  hands out the pool's first ``batch_size``; what is left of the last item stays in the pool
  and starts the next read. A read waiting for more takes each item as it is written (not
  the best of those written by the time its thread wakes). An item taken into the pool
  counts as read: every experience of it gets ``info["use_count"] + 1``, and with
  ``reuse_cooldown_time`` set the item comes back after that many seconds, re-ranked with the
  new use count (or dropped, if its function says so). Items cooling down are neither
  readable nor counted against ``capacity``.
* This queue's own additions (the shared machinery of
  :class:`~trinity.buffer.storage.queue_base.BaseQueue`): read timeouts that lose nothing
  (the pool stays for the next read), explore-step ends and flushes that let a read return
  less than a batch, and an end of stream when every writer released (a closed queue stops
  recycling, and its readers drain what is left, a short last batch included).
"""

from __future__ import annotations

import bisect
import math
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Optional

from trinity.buffer.base import EndOfStream
from trinity.buffer.storage.priority import PriorityFunction, build_priority_fn
from trinity.buffer.storage.queue_base import BaseQueue

if TYPE_CHECKING:
    from trinity.common.experience import Experience

__all__ = ["PriorityReplayQueue"]


class PriorityReplayQueue(BaseQueue):
    """Priority replay queue of items (one write's experiences each); see the module docstring.

    Items are grouped by priority: a sorted list of the distinct priorities (``bisect``) and,
    for each, a FIFO of its items, so the best item and the item to evict are found at the two
    ends and ties resolve oldest first in both directions, as in Trinity-RFT.
    """

    def __init__(
        self,
        name: str,
        capacity: int,
        priority_fn: str = "linear_decay",
        priority_fn_args: Optional[dict[str, Any]] = None,
        reuse_cooldown_time: Optional[float] = None,
    ) -> None:
        super().__init__(name, capacity)
        self.priority_fn: PriorityFunction = build_priority_fn(priority_fn, priority_fn_args)
        self.reuse_cooldown_time = reuse_cooldown_time
        self._levels: list[float] = []  # distinct priorities held, ascending
        self._groups: dict[float, deque[list[Experience]]] = {}  # priority -> items, oldest first
        self._items = 0  # items held (what ``capacity`` counts)
        self._held = 0  # experiences in those items
        #: experiences of items already taken by a read and not yet handed out, in order
        self._pool: deque[Experience] = deque()
        self._cooling: deque[tuple[float, list[Experience]]] = deque()  # (ready_at, item)
        self.evicted = 0  # items dropped by capacity (observable for tests/metrics)
        self._readers = 0  # reads in progress
        #: pool size the waiting reads need (0: none waits); a write tops the pool up to it
        self._demand = 0

    # ---- the sorted index ---------------------------------------------------------------

    def _insert(self, item: list[Experience]) -> None:
        priority, keep = self.priority_fn(item)
        if not keep:
            return
        priority = float(priority)
        if math.isnan(priority):  # would corrupt the sorted index
            raise ValueError(
                f"queue {self.name!r}: priority function {type(self.priority_fn).__name__} "
                "returned NaN"
            )
        if self._items >= self.capacity:
            self.evicted += 1
            if self._levels[0] > priority:
                return  # ranks below everything held: drop the newcomer
            self._pop(0)
        group = self._groups.get(priority)
        if group is None:
            group = self._groups[priority] = deque()
            bisect.insort(self._levels, priority)
        group.append(item)
        self._items += 1
        self._held += len(item)

    def _pop(self, level: int) -> list[Experience]:
        """Remove and return the oldest item of the priority at index ``level`` of the sorted
        priorities (``0``: the lowest, ``-1``: the highest)."""
        priority = self._levels[level]
        group = self._groups[priority]
        item = group.popleft()
        if not group:
            del self._groups[priority]
            self._levels.pop(level)
        self._items -= 1
        self._held -= len(item)
        return item

    def _refill(self) -> None:
        """Put back the items whose cooldown has ended."""
        now = time.monotonic()
        while self._cooling and self._cooling[0][0] <= now:
            self._insert(self._cooling.popleft()[1])

    def _take_items(self, want: int) -> None:
        """Move the best items into the pool until it holds ``want`` experiences or the index
        is empty; each item taken counts as read (use count + 1, cooldown starts)."""
        now = time.monotonic()
        while len(self._pool) < want and self._levels:
            item = self._pop(-1)
            for exp in item:
                exp.info["use_count"] = int(exp.info.get("use_count", 0)) + 1
            if self.reuse_cooldown_time is not None and not self._closed:
                self._cooling.append((now + self.reuse_cooldown_time, item))
            self._pool.extend(item)

    # ---- BaseQueue hooks (called with the lock held) -------------------------------------

    def _try_put(self, exps: list[Experience]) -> int:
        if not exps:
            return 0
        self._refill()
        self._insert(list(exps))  # a copy: the caller's list is not ours to keep
        # a read waiting for more takes the item now, as Trinity-RFT's waiting read does, not
        # when its thread next runs: by then a better item may have come and jumped the line
        self._take_items(self._demand)
        return len(exps)

    def _try_get(self, batch_size: int, min_size: int) -> Optional[list[Experience]]:
        # a replay queue has no order to mark positions in: a step's end (or a flush) lets a
        # read take what is readable, at least ``min_size`` (any, after a flush)
        self._refill()
        self._take_items(batch_size)
        available = len(self._pool)
        if available < batch_size:
            marks = {kind for position, kind in self._marks if position > self._get_count}
            least = 1 if "flush" in marks else (min_size if "step" in marks else batch_size)
            if self._closed:
                if not available:
                    raise EndOfStream
            elif available < least:
                self._demand = max(self._demand, batch_size)
                return None
            batch_size = available
        self._get_count = self._put_count  # every mark so far is served by this read
        self._marks.clear()
        return [self._pool.popleft() for _ in range(batch_size)]

    # ---- reads: track the waiting ones (see ``_demand``) --------------------------------

    def _read_started(self) -> None:
        with self._cond:
            self._readers += 1

    def _read_ended(self) -> None:
        with self._cond:
            self._readers -= 1
            if not self._readers:
                self._demand = 0

    def get(
        self, batch_size: int, timeout: Optional[float] = None, min_size: Optional[int] = None
    ) -> list[Experience]:
        self._read_started()
        try:
            return super().get(batch_size, timeout, min_size)
        finally:
            self._read_ended()

    async def get_async(
        self, batch_size: int, timeout: Optional[float] = None, min_size: Optional[int] = None
    ) -> list[Experience]:
        self._read_started()
        try:
            return await super().get_async(batch_size, timeout, min_size)
        finally:
            self._read_ended()

    def _check_batch(self, batch_size: int) -> None:
        # ``capacity`` counts items, a batch experiences: no bound between the two
        if batch_size < 1:
            raise ValueError(f"queue {self.name!r}: batch_size must be >= 1, got {batch_size}")

    def _next_event(self) -> float:
        return self._cooling[0][0] if self._cooling else math.inf

    def _on_close(self) -> None:
        # no writer left: stop recycling so the stream can end once the queue is drained
        self._cooling.clear()

    # ---- inspection -----------------------------------------------------------------------

    def qsize(self) -> int:
        """Experiences readable now: the pool's and those of the items held."""
        with self._cond:
            self._refill()
            return len(self._pool) + self._held

    def length(self) -> int:
        """Items held (Trinity-RFT's ``length``; what ``capacity`` bounds), not counting the
        pool of a partly read item nor items cooling down."""
        with self._cond:
            self._refill()
            return self._items

    def priorities(self) -> list[float]:
        """The priority of each item held, in read order (highest first; for inspection and
        tests). Items whose cooldown has ended count as held, as they would for a read."""
        with self._cond:
            self._refill()
            return [p for p in reversed(self._levels) for _ in self._groups[p]]
