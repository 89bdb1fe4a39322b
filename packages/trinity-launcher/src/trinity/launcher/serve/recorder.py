"""What mode ``serve`` answered, waiting for its reward (``/feedback``) and its commit.

Each chat completion becomes one :class:`~trinity.common.experience.Experience` per choice,
keyed by the response id (``chatcmpl-…``, what the client sends back as ``msg_ids``). A
``/feedback`` call rewards the experiences of the ids it names and groups them as one session
(``eid.task`` = its ``task_id``, ``eid.run`` = its ``run_id``: a multi-turn episode is the
responses of its turns); rewarded experiences wait for ``/commit``.

Why in memory: what is committed goes to the run's buffer (its storage keeps it); what is not
committed when the service stops is reported (counts per state) rather than written half-way.
``max_pending`` bounds the memory: past it the oldest unrewarded responses are dropped, counted.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Optional

from trinity.common.experience import Experience


@dataclass
class FeedbackResult:
    """What one ``/feedback`` call did: ids rewarded now, ids unknown or already rewarded."""

    rewarded: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)


class SessionRecorder:
    """Responses awaiting feedback, and rewarded experiences awaiting commit."""

    def __init__(self, max_pending: int = 100_000) -> None:
        self.max_pending = max_pending
        self._waiting: OrderedDict[str, list[Experience]] = OrderedDict()
        self._ready: list[Experience] = []
        self.recorded = 0  # experiences recorded (responses x choices)
        self.dropped = 0  # unrewarded experiences dropped past max_pending

    def record(self, msg_id: str, experiences: list[Experience]) -> None:
        """Keep ``experiences`` (the choices of response ``msg_id``) until feedback names it."""
        self._waiting[msg_id] = experiences
        self.recorded += len(experiences)
        while len(self._waiting) > self.max_pending:
            _, dropped = self._waiting.popitem(last=False)
            self.dropped += len(dropped)

    def feedback(
        self, msg_ids: list[str], reward: float, task_id: Optional[str], run_id: int
    ) -> FeedbackResult:
        """Reward the responses ``msg_ids`` as one session; they are ready to commit."""
        result = FeedbackResult()
        for msg_id in msg_ids:
            exps = self._waiting.pop(msg_id, None)
            if exps is None:
                result.unknown.append(msg_id)
                continue
            for exp in exps:
                exp.reward = float(reward)
                if task_id is not None:
                    exp.eid.task = str(task_id)
                exp.eid.run = int(run_id)
            self._ready.extend(exps)
            result.rewarded.append(msg_id)
        return result

    def take_ready(self) -> list[Experience]:
        """The rewarded experiences, handed over once (to be committed)."""
        ready, self._ready = self._ready, []
        return ready

    def give_back(self, exps: list[Experience]) -> None:
        """Return experiences a failed commit took: the next commit writes them."""
        self._ready = exps + self._ready

    @property
    def waiting(self) -> int:
        """Experiences recorded and not rewarded yet."""
        return sum(len(v) for v in self._waiting.values())

    @property
    def ready(self) -> int:
        """Experiences rewarded and not committed yet."""
        return len(self._ready)
