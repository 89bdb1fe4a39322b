"""How a run's metrics become records: one object per step in ``metrics.jsonl`` (and the
configured monitors).

A run that explores and trains gets each step's metrics from two places at two times -- the
explorer's rollout and eval metrics as it goes, the trainer's losses later -- so a
:class:`StepMerger` gathers them and the coordinator flushes a step once its train step is
done. A run with one side writes each record as it comes (:class:`DirectRecords`).
"""

from __future__ import annotations

from typing import Any, Optional

__all__ = ["DirectRecords", "LazySink", "StepMerger"]


class StepMerger:
    """A monitor that gathers every sink's metrics of a step into one record.

    The explorer logs rollout and eval metrics as it goes; the trainer logs its step later.
    :meth:`flush` writes everything gathered for steps up to ``step`` as one object per step.
    """

    def __init__(self, sink: Any) -> None:
        self.sink = sink
        self.pending: dict[int, dict[str, Any]] = {}
        #: the step of an evaluation in progress: its record (and later ones) wait for it, so
        #: a step's eval metrics land in that step's one record even when the trainer finishes
        #: the step first
        self.hold: Optional[int] = None

    def log(self, metrics: dict[str, Any], step: int) -> None:
        self.pending.setdefault(int(step), {}).update(metrics)

    def restore(self, pending: dict[int, dict[str, Any]]) -> None:
        """A resumed run's records of steps after its checkpoint that were not yet written
        (the explorer's metrics of steps it ran ahead)."""
        for step, metrics in pending.items():
            self.pending.setdefault(int(step), {}).update(metrics)

    def flush(self, up_to: Optional[int] = None) -> None:
        """Write the records of steps up to ``up_to`` (all with ``None``, e.g. at the end of
        the run); with ``up_to``, none from the held step on."""
        if up_to is not None and self.hold is not None:
            up_to = min(up_to, self.hold - 1)
        for step in sorted(self.pending):
            if up_to is not None and step > up_to:
                break
            self.sink.log(self.pending.pop(step), step)

    def close(self) -> None:
        """The explorer closes its monitor at shutdown: the sink stays open (the run closes
        it after the last flush)."""


class DirectRecords:
    """Every ``log`` is a record of its own, written at once (runs with one side)."""

    def __init__(self, sink: Any) -> None:
        self.sink = sink
        self.pending: dict[int, dict[str, Any]] = {}  # nothing is ever held back
        self.hold: Optional[int] = None

    def log(self, metrics: dict[str, Any], step: int) -> None:
        self.sink.log(metrics, step)

    def restore(self, pending: dict[int, dict[str, Any]]) -> None:
        """Records a resumed run carried over: written at once."""
        for step in sorted(pending):
            self.sink.log(pending[step], step)

    def flush(self, up_to: Optional[int] = None) -> None:
        """Nothing is held back."""

    def close(self) -> None:
        """The run closes the sink."""


class LazySink:
    """The run's metrics sink, created at its first record: a resumed run cuts
    ``metrics.jsonl`` back before anything opens it.

    Args:
        factory: builds the sink (``create_monitor(config)``).
    """

    def __init__(self, factory: Any) -> None:
        self._factory = factory
        self._sink: Any = None

    def log(self, metrics: dict[str, Any], step: int) -> None:
        if self._sink is None:
            self._sink = self._factory()
        self._sink.log(metrics, step)

    def close(self) -> None:
        if self._sink is not None:
            self._sink.close()
            self._sink = None
