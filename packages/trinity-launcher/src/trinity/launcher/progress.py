"""Where a run reports what it is doing: a progress display for people, metrics for tools.

* :class:`ProgressReporter` shows steps, tasks/s, tokens/s, reward and the time left: a live
  ``rich`` progress bar on a terminal, plain summary lines otherwise (CI logs and ``nohup``
  files stay readable and greppable instead of filling with carriage returns). The summary-line
  rule (:class:`SummaryCadence`): a line for the first step, then one as soon as
  ``TRINITY_PROGRESS_INTERVAL`` steps (default 10; ``--progress-interval``) *or* 10 seconds
  have passed since the last line, whichever comes first, and one for the last step. Each line
  ends with the time since the run started and, when the number of steps is known, the time
  left (``..., elapsed 1m12s, ETA 1m01s``; see :func:`format_duration`).
* :class:`JsonlMonitor` appends each step's metrics as one JSON object per line to
  ``<checkpoint_job_dir>/metrics.jsonl``. Anything with ``log(metrics, step)`` and ``close()``
  is a monitor (:class:`Monitor`), so tensorboard / wandb backends can sit beside it later.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import time
from typing import IO, Any, Callable, Optional

from trinity.launcher import logs
from trinity.utils.monitor import Monitor  # the contract lives in core

__all__ = [
    "PROGRESS_INTERVAL_ENV",
    "JsonlMonitor",
    "Monitor",
    "ProgressReporter",
    "SummaryCadence",
    "TrainStepPrinter",
    "format_duration",
    "format_step_line",
    "progress_interval",
]

#: steps between two summary lines when the output is not a terminal
PROGRESS_INTERVAL_ENV = "TRINITY_PROGRESS_INTERVAL"
DEFAULT_INTERVAL_STEPS = 10
DEFAULT_INTERVAL_SECONDS = 10.0


def progress_interval() -> int:
    """Steps between summary lines: ``TRINITY_PROGRESS_INTERVAL`` (default 10).

    Raises:
        ValueError: the variable is not an integer >= 1.
    """
    raw = os.environ.get(PROGRESS_INTERVAL_ENV, "").strip()
    if not raw:
        return DEFAULT_INTERVAL_STEPS
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{PROGRESS_INTERVAL_ENV}={raw!r} is invalid; allowed: an integer >= 1")
    return value


class SummaryCadence:
    """When a non-terminal progress display writes a line.

    A line for the first step reported, then as soon as ``every_steps`` steps or
    ``every_seconds`` seconds have passed since the last line (whichever comes first), and for
    the last step (``step == total``). A run of 150 one-second steps prints 16 lines instead
    of 150; a run of slow steps still shows a sign of life every step.

    Args:
        every_steps: steps between lines (default :func:`progress_interval`).
        every_seconds: seconds after which the next step gets a line anyway.
        clock: the time source (seconds; ``time.monotonic``).
    """

    def __init__(
        self,
        every_steps: Optional[int] = None,
        every_seconds: float = DEFAULT_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.every_steps = progress_interval() if every_steps is None else int(every_steps)
        if self.every_steps < 1:
            raise ValueError(f"every_steps={every_steps} is invalid; allowed: an integer >= 1")
        self.every_seconds = float(every_seconds)
        self.clock = clock
        self._last_step: Optional[int] = None
        self._last_time = 0.0

    def due(self, step: int, total: Optional[int] = None) -> bool:
        """Whether ``step`` gets a line (and, if so, count it as the last line)."""
        now = self.clock()
        if (
            self._last_step is None
            or (total is not None and step >= total)
            or step - self._last_step >= self.every_steps
            or now - self._last_time >= self.every_seconds
        ):
            self._last_step = step
            self._last_time = now
            return True
        return False

    def printed(self, step: int) -> bool:
        """Whether the last line was for ``step``."""
        return self._last_step == step


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


def format_duration(seconds: float) -> str:
    """A short duration: ``42s``, ``1m12s``, ``1h02m`` (rounded down to what is shown)."""
    total = max(0, int(seconds))
    if total < 60:
        return f"{total}s"
    if total < 3600:
        return f"{total // 60}m{total % 60:02d}s"
    return f"{total // 3600}h{total % 3600 // 60:02d}m"


def _timing(elapsed: Optional[float], eta: Optional[float]) -> str:
    text = f", elapsed {format_duration(elapsed)}" if elapsed is not None else ""
    return text + (f", ETA {format_duration(eta)}" if eta is not None else "")


class _RunClock:
    """Elapsed time since a run's start and the time left, from the mean time per step.

    The clock starts when it is made and again at :meth:`start` (when the run's first step is
    about to begin, after engines started) unless a step was already reported. The time
    left is ``(steps still to go) x (time so far / steps done since the start)``; none when
    the number of steps is unknown or the last step is done.
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.started = clock()
        self.first_step = 0
        self.stepped = False

    def start(self, completed: int = 0) -> None:
        if not self.stepped:
            self.started = self.clock()
            self.first_step = int(completed)

    def times(self, step: int, total: Optional[int]) -> tuple[float, Optional[float]]:
        self.stepped = True
        elapsed = self.clock() - self.started
        done = step - self.first_step
        if not total or step >= total or done <= 0:
            return elapsed, None
        return elapsed, elapsed / done * (total - step)


def format_step_line(
    step: int,
    total: Optional[int],
    metrics: dict[str, Any],
    elapsed: Optional[float] = None,
    eta: Optional[float] = None,
) -> str:
    """One line per explore step: the numbers the progress bar shows, plus reward/failures,
    and at the end the run's ``elapsed`` time and the ``eta`` (time left) when given."""
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
    return line + _timing(elapsed, eta)


class ProgressReporter:
    """Steps, tasks/s and tokens/s (generated tokens) of a run.

    Args:
        total_steps: the number of steps when known (the bar shows a fraction).
        stream: where to write (default: the console, :func:`trinity.launcher.logs.console_out`,
            which is ``sys.stdout`` unless a run redirects it); a terminal gets a live ``rich``
            bar, anything else summary lines at the :class:`SummaryCadence`.
        use_bar: force the choice (default: ``stream.isatty()``).
        description: label of the bar.
        cadence: when summary lines are written (default :class:`SummaryCadence`).
        clock: the time source of the lines' elapsed time and ETA (seconds;
            ``time.monotonic``).
    """

    def __init__(
        self,
        total_steps: Optional[int] = None,
        stream: Optional[IO[str]] = None,
        use_bar: Optional[bool] = None,
        description: str = "explore",
        cadence: Optional[SummaryCadence] = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream if stream is not None else logs.console_out()
        self.cadence = cadence if cadence is not None else SummaryCadence()
        self.run_clock = _RunClock(clock)
        self._pending: Optional[str] = None
        if use_bar is None:
            isatty = getattr(self.stream, "isatty", None)
            use_bar = bool(callable(isatty) and isatty())
        self.use_bar = use_bar
        self.total_steps = total_steps
        self.description = description
        self._progress: Any = None
        self._bar: Any = None

    def start(self, completed: int = 0, total: Optional[int] = None) -> None:
        """Show the bar (terminal only); ``completed`` steps are already done (resume);
        ``total``: the steps the run will take, when known only now."""
        if total is not None:
            self.total_steps = total
        self.run_clock.start(completed)
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
            # while a run sends other output to its log file, prints of libraries must stay there
            redirect_stdout=not self._redirected(),
            redirect_stderr=not self._redirected(),
        )
        self._progress.start()
        session = logs.active_session()
        if session is not None:  # Trinity's warnings print above the bar
            session.live_console = self._progress.console
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
            elapsed, eta = self.run_clock.times(step, self.total_steps)
            line = format_step_line(step, self.total_steps, metrics, elapsed, eta)
            if self.cadence.due(step, self.total_steps):
                self._pending = None
                self.stream.write(line + "\n")
                self.stream.flush()
            else:
                self._pending = line
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

    @staticmethod
    def _redirected() -> bool:
        session = logs.active_session()
        return session is not None and session.redirected

    def close(self) -> None:
        """Stop the bar; without one, write the line of the last step if it had none."""
        if self._pending is not None:
            line, self._pending = self._pending, None
            self.stream.write(line + "\n")
            self.stream.flush()
        if self._progress is not None:
            session = logs.active_session()
            if session is not None and session.live_console is self._progress.console:
                session.live_console = None
            self._progress.stop()
            self._progress = None


class TrainStepPrinter:
    """Train steps on the console in a run without an explorer (mode ``train``): the numbers
    one watches, at the progress display's :class:`SummaryCadence` (the first step, then every
    N steps or 10 s, and the last one), then the time since the printer was made and, when
    ``total_steps`` is given, the time left:
    ``train step 12/100: loss=0.41 ..., elapsed 36s, ETA 4m24s``.

    Args:
        stream: where to print (default: the console).
        total_steps: the steps the run will take, when known (adds ``/total`` and the ETA).
        clock: the time source (seconds; ``time.monotonic``).
    """

    KEYS = ("actor/loss", "actor/grad_norm", "actor/lr", "batch/reward/mean", "time/step")

    def __init__(
        self,
        stream: Optional[IO[str]] = None,
        total_steps: Optional[int] = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cadence = SummaryCadence()
        self.stream = stream
        self.total_steps = total_steps
        self.run_clock = _RunClock(clock)
        self._pending: Optional[str] = None

    def _out(self) -> IO[str]:
        return self.stream if self.stream is not None else logs.console_out()

    def step(self, step: int, metrics: dict[str, Any]) -> None:
        parts = [f"{k.split('/', 1)[1]}={metrics[k]:.4g}" for k in self.KEYS if k in metrics]
        of = f"/{self.total_steps}" if self.total_steps else ""
        elapsed, eta = self.run_clock.times(step, self.total_steps)
        text = ", ".join(t for t in (" ".join(parts), _timing(elapsed, eta)[2:]) if t)
        line = f"train step {step}{of}: {text}"
        if self.cadence.due(step, self.total_steps):
            self._pending = None
            print(line, file=self._out(), flush=True)
        else:
            self._pending = line

    def close(self) -> None:
        """The last step's line, if it had none."""
        if self._pending is not None:
            print(self._pending, file=self._out(), flush=True)
            self._pending = None
