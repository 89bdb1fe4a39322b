"""``Timer``: time a block into a metrics dict (Trinity-RFT's ``trinity.utils.timer``).

    metrics = {}
    with Timer(metrics, "time/read_experience"):
        batch = reader.read()
    # metrics == {"time/read_experience": <seconds>}

Code written for Trinity-RFT (its sample strategies and trainer) times its steps this way; the
key is used as given. The time is also written when the block raises, so a failed step's
metrics still say how long it ran before failing.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any, MutableMapping, Optional

__all__ = ["Timer"]


class Timer:
    """Context manager writing the block's wall-clock seconds to ``metrics[key]``.

    Args:
        metrics: the dict (any mutable mapping) to write into.
        key: the metric's name, e.g. ``"time/train_step"``.
    """

    def __init__(self, metrics: MutableMapping[str, Any], key: str) -> None:
        self.metrics = metrics
        self.key = key
        self.start: Optional[float] = None
        self.elapsed: Optional[float] = None

    def __enter__(self) -> Timer:
        self.start = time.perf_counter()
        return self

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        assert self.start is not None, "Timer exited without entering"
        self.elapsed = time.perf_counter() - self.start
        self.metrics[self.key] = self.elapsed
