"""The experiences a run has queued for its trainer and not trained yet, and how a train
step names the experiences it trained on.

A checkpoint of a run that explores and trains carries :meth:`ExperienceLedger.pending`
(:class:`trinity.launcher.checkpoint.RunCheckpointer`), so none is lost or trained twice
when it resumes; ``metrics.jsonl`` carries each train step's :func:`experience_ids`.
"""

from __future__ import annotations

from collections import OrderedDict

from trinity.common.experience import Experience

__all__ = ["EXPERIENCE_IDS_KEY", "ExperienceLedger", "experience_ids"]

#: ``metrics.jsonl`` key: the run ids (``explore step/task/run``) of a train step's experiences.
EXPERIENCE_IDS_KEY = "batch/experience_ids"


class ExperienceLedger:
    """Experiences the explorer has committed to the trainer's queue that the trainer has not
    read yet, in write order -- what a checkpoint must carry so none is lost or trained twice.

    The explorer adds each step's experiences when it commits the step (just before they are
    written, see :meth:`Explorer.explore_step`); the trainer's reads remove them. The queue is
    FIFO, so reading experience ``x`` means everything written before ``x`` was read too (one
    a sample strategy read and dropped, e.g. as stale, counts as read).
    """

    def __init__(self) -> None:
        self._items: OrderedDict[str, Experience] = OrderedDict()

    def add(self, exps: list[Experience]) -> None:
        for exp in exps:
            self._items[exp.eid.uid] = exp

    def on_commit(self, step: int, exps: list[Experience]) -> None:
        """The explorer's commit hook: step ``step`` is about to write ``exps``."""
        self.add(exps)

    def consume(self, exps: list[Experience]) -> None:
        left = {exp.eid.uid for exp in exps} & self._items.keys()
        while left:
            uid, _ = self._items.popitem(last=False)
            left.discard(uid)

    def pending(self) -> list[Experience]:
        return list(self._items.values())

    def __len__(self) -> int:
        return len(self._items)


def experience_ids(exps: list[Experience]) -> str:
    """The run ids (``explore step/task/run``) of ``exps``, sorted, space-separated."""
    return " ".join(sorted(exp.eid.rid for exp in exps))
