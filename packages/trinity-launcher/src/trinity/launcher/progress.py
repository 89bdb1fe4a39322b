"""Where a run reports what it is doing: a progress display for people, metrics for tools.

* :class:`ProgressReporter` shows steps, tasks/s and tokens/s: a ``rich`` progress bar on a
  terminal, one plain line per step otherwise (CI logs and ``nohup`` files stay readable and
  greppable instead of filling with carriage returns).
* :class:`JsonlMonitor` appends each step's metrics as one JSON object per line to
  ``<checkpoint_job_dir>/metrics.jsonl``. Anything with ``log(metrics, step)`` and ``close()``
  is a monitor (:class:`Monitor`), so tensorboard / wandb backends can sit beside it later.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import sys
from typing import IO, Any, Optional

from trinity.utils.monitor import Monitor  # the contract lives in core

__all__ = ["JsonlMonitor", "Monitor", "ProgressReporter", "format_step_line"]


def _json_value(value: Any) -> Any:
    """A JSON-able scalar, or ``...`` (skip) for anything else (dicts of selector feedback)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Real):
        number = float(value)
        if math.isfinite(number):
            return int(value) if isinstance(value, numbers.Integral) else number
        return None  # NaN / inf are not JSON
    if isinstance(value, str):
        return value
    return ...


class JsonlMonitor:
    """Appends ``{"step": step, **metrics}`` lines to ``path`` (created with its directory).

    Only scalars are written (numbers, booleans, strings; NaN and infinities as ``null``);
    structured values some pipeline operators report for selectors are left out. Lines are
    flushed at once, so a crashed run keeps every step it finished.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        self._file: Optional[IO[str]] = open(self.path, "a", encoding="utf-8")  # noqa: SIM115

    def log(self, metrics: dict[str, Any], step: int) -> None:
        if self._file is None:
            raise ValueError(f"JsonlMonitor({self.path!r}) is closed")
        record: dict[str, Any] = {"step": int(step)}
        for key, value in metrics.items():
            converted = _json_value(value)
            if converted is not ...:
                record[str(key)] = converted
        self._file.write(json.dumps(record, allow_nan=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _rate(count: float, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0


def format_step_line(step: int, total: Optional[int], metrics: dict[str, Any]) -> str:
    """One line per explore step: the numbers the progress bar shows, plus reward/failures."""
    tasks = float(metrics.get("rollout/tasks", 0.0))
    tokens = float(metrics.get("rollout/response_tokens", 0.0))
    seconds = float(metrics.get("time/explore_step", 0.0))
    of = f"/{total}" if total else ""
    line = (
        f"explore step {step}{of}: {tasks:.0f} tasks ({_rate(tasks, seconds):.2f} tasks/s), "
        f"{tokens:.0f} tokens ({_rate(tokens, seconds):.1f} tokens/s), {seconds:.2f} s"
    )
    if "rollout/reward/mean" in metrics:
        line += f", reward {float(metrics['rollout/reward/mean']):.4f}"
    failed = float(metrics.get("runner/failed_tasks", 0.0))
    if failed:
        line += f", {failed:.0f} failed"
    return line


class ProgressReporter:
    """Steps, tasks/s and tokens/s (generated tokens) of a run.

    Args:
        total_steps: the number of steps when known (the bar shows a fraction).
        stream: where to write (default ``sys.stdout``); a terminal gets a live ``rich``
            bar, anything else one plain line per step.
        use_bar: force the choice (default: ``stream.isatty()``).
        description: label of the bar.
    """

    def __init__(
        self,
        total_steps: Optional[int] = None,
        stream: Optional[IO[str]] = None,
        use_bar: Optional[bool] = None,
        description: str = "explore",
    ) -> None:
        self.stream = stream if stream is not None else sys.stdout
        if use_bar is None:
            isatty = getattr(self.stream, "isatty", None)
            use_bar = bool(callable(isatty) and isatty())
        self.use_bar = use_bar
        self.total_steps = total_steps
        self.description = description
        self._progress: Any = None
        self._bar: Any = None

    def start(self, completed: int = 0) -> None:
        """Show the bar (terminal only); ``completed`` steps are already done (resume)."""
        if not self.use_bar or self._progress is not None:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[tasks_per_s]:.2f} tasks/s"),
            TextColumn("{task.fields[tokens_per_s]:.1f} tokens/s"),
            TextColumn("{task.fields[extra]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=Console(file=self.stream),
        )
        self._progress.start()
        self._bar = self._progress.add_task(
            self.description,
            total=self.total_steps,
            completed=completed,
            tasks_per_s=0.0,
            tokens_per_s=0.0,
            extra="",
        )

    def step(self, step: int, metrics: dict[str, Any]) -> None:
        """Report a finished explore step."""
        if not self.use_bar:
            self.stream.write(format_step_line(step, self.total_steps, metrics) + "\n")
            self.stream.flush()
            return
        self.start()
        seconds = float(metrics.get("time/explore_step", 0.0))
        extra = ""
        if "rollout/reward/mean" in metrics:
            extra = f"reward {float(metrics['rollout/reward/mean']):.3f}"
        self._progress.update(
            self._bar,
            completed=step,
            tasks_per_s=_rate(float(metrics.get("rollout/tasks", 0.0)), seconds),
            tokens_per_s=_rate(float(metrics.get("rollout/response_tokens", 0.0)), seconds),
            extra=extra,
        )

    def message(self, text: str) -> None:
        """A line outside the bar (evaluation results, checkpoints being loaded)."""
        if self._progress is not None:
            self._progress.console.print(text, markup=False, highlight=False)
        else:
            self.stream.write(text + "\n")
            self.stream.flush()

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
