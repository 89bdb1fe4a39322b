"""vLLM's log lines of every weight update, demoted to DEBUG in a run's engine processes.

Each weight update of a vLLM engine (every step of the quickstart) made vLLM log four to six
lines: the reload's start and duration, the prefix cache's reset, the scheduler's pause and
resume under requests in flight, and a warning that the rotary embedding "failed to load
weights" (it has no weights: its cos/sin cache is computed, never in a checkpoint or a
trainer's state). Over a long run they were most of the run's log, and the warning reads like
a fault that is not one. Trinity logs each update once itself (``weights updated to version
N``, :mod:`trinity.launcher.engines.base`).

:func:`demote_update_logs` adds a filter to the four vLLM loggers that write them: those
records, and only those, become DEBUG records, so they still show where vLLM logs at DEBUG
(``VLLM_LOGGING_LEVEL=DEBUG``, or ``log.level: DEBUG`` in the run's config). The rotary
warning is demoted only for rotary-embedding layers: the same warning for any other layer (a
weight the update did not carry) stays a warning.

Trinity's vLLM plugin (:mod:`.vllm_plugin`) calls it in every vLLM process of a run: the engine
actor and, where they are separate, the engine core and its workers, which do the reload.
"""

from __future__ import annotations

import logging
import os

from trinity.common.constants import LOG_LEVEL_ENV_VAR

__all__ = ["PER_UPDATE_MESSAGES", "demote_update_logs", "in_a_run"]

#: vLLM logger → the messages (format strings, as logged) it writes on each weight update
PER_UPDATE_MESSAGES: dict[str, frozenset[str]] = {
    "vllm.model_executor.model_loader.reload.inplace": frozenset(
        {"Reloading weights inplace...", "Reloading and processing weights took %.2f seconds"}
    ),
    "vllm.model_executor.model_loader.reload.layerwise": frozenset({"%s: Failed to load weights"}),
    "vllm.v1.core.block_pool": frozenset({"Successfully reset prefix cache"}),
    "vllm.v1.core.sched.scheduler": frozenset({"setting pause state to %s"}),
}

#: set by a run's Ray runtime env (:func:`trinity.launcher.logs.worker_runtime_env`) in every
#: process it starts; vLLM's own processes inherit it
_RUN_MARKER = LOG_LEVEL_ENV_VAR


def in_a_run() -> bool:
    """Whether this process belongs to a Trinity run (a bare vLLM in the same environment
    keeps its logs as they are)."""
    return _RUN_MARKER in os.environ


class _DemoteUpdateLogs(logging.Filter):
    """Turns the per-update records of one logger into DEBUG records; passes them on only
    where the logger logs DEBUG."""

    def __init__(self, messages: frozenset[str]) -> None:
        super().__init__()
        self.messages = messages

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg not in self.messages:
            return True
        if record.msg == "%s: Failed to load weights" and not _is_rotary(record.args):
            return True  # a layer with weights that the update did not carry: keep the warning
        record.levelno = logging.DEBUG
        record.levelname = logging.getLevelName(logging.DEBUG)
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def _is_rotary(args: object) -> bool:
    name = args[0] if isinstance(args, tuple) and args else None
    return isinstance(name, str) and name.endswith("RotaryEmbedding")


def demote_update_logs() -> None:
    """Add the filter to each logger of :data:`PER_UPDATE_MESSAGES` (once per process)."""
    for name, messages in PER_UPDATE_MESSAGES.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DemoteUpdateLogs) for f in logger.filters):
            logger.addFilter(_DemoteUpdateLogs(messages))
