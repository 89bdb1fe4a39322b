"""Structural contracts between Trinity packages that must not import each other.

``trinity-algorithms`` (sample strategies) consumes experience readers that ``trinity-buffer``
implements; neither package may depend on the other, so the contract lives here in core as a
:class:`typing.Protocol`. A class satisfies it by having the methods — no inheritance, no
registration — which keeps the buffer free to shape its readers however it likes.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol, runtime_checkable

from trinity.common.experience import Experience

__all__ = ["ExperienceReader", "StatefulReader"]


@runtime_checkable
class ExperienceReader(Protocol):
    """Reads batches of :class:`~trinity.common.experience.Experience` for the trainer.

    Contract (what sample strategies rely on):

    * ``batch_size=None`` means "the reader's own batch size" (for the trainer's main buffer,
      ``buffer.train_batch_size``); an explicit ``batch_size`` asks for that many.
    * A call returns at most ``batch_size`` experiences, and fewer only when the source is
      ending (the last partial batch of a file) or, for a live queue, at the end of an explore
      step that produced less than a batch (failed tasks; at least the storage's
      ``min_batch_size``); otherwise a live queue waits for data.
    * When the source is exhausted (a finished file, a closed queue) ``read`` raises
      ``StopIteration`` and ``read_async`` raises ``StopAsyncIteration``, mirroring Trinity-RFT.
    * Every returned experience is handed over: the reader does not return it again (a
      strategy that discards one, e.g. as too stale, has consumed it).

    Readers may accept more keyword arguments (e.g. ``min_model_version``, a hint a
    staleness-aware queue can use to skip stale data early); strategies pass such hints only
    to readers whose signature names them.
    """

    def read(self, batch_size: Optional[int] = None) -> list[Experience]:
        """Blocking read of one batch."""
        ...

    async def read_async(self, batch_size: Optional[int] = None) -> list[Experience]:
        """Asynchronous read of one batch (what the trainer's sample strategies call)."""
        ...


@runtime_checkable
class StatefulReader(Protocol):
    """A reader whose read position can be checkpointed (files, SQL tables).

    Optional on top of :class:`ExperienceReader`: strategies save and restore the state of
    readers that have these methods, and skip those that do not (a live queue has no
    position worth saving).
    """

    def state_dict(self) -> dict[str, Any]:
        """The reader's position, JSON-able."""
        ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a position saved by :meth:`state_dict`."""
        ...
