"""The experience pipeline: explorer output → operators → (advantages) → trainer input buffer.

The pipeline is deliberately ignorant of algorithms and storages: ``trinity-buffer`` must not
import ``trinity.algorithm`` (it depends on ``trinity-core`` only), and the storage that
feeds the trainer is chosen by whoever launches the run. Both are therefore injected:

* ``advantage_fn(exps) -> (exps, metrics)``: given when the algorithm computes advantages
  outside the trainer (``compute_advantage_in_trainer=False``, e.g. GRPO); ``None`` when the
  trainer computes them. It runs after the configured operators, as Trinity-RFT appends it
  to the operator list.
* ``writer``: any object with ``write(exps)`` and/or ``async write_async(exps)`` (and
  optionally ``acquire()`` / ``release()``), i.e. the trainer's input buffer writer.
"""

from __future__ import annotations

import asyncio
import inspect
import numbers
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Optional, Protocol, Union, runtime_checkable

from trinity.buffer.operators.experience_operator import (
    ExperienceOperator,
    ExperienceOperatorError,
    ExperienceOperatorV1,
    OperatorSpec,
    build_operators,
    operator_config,
    unwrap_operator,
)
from trinity.common.config import Config, DataProcessorConfig, ExperiencePipelineConfig
from trinity.common.experience import Experience
from trinity.utils.log import get_logger

__all__ = [
    "ADVANTAGE_STEP_NAME",
    "AdvantageCallable",
    "ExperiencePipeline",
    "ExperienceWriter",
    "PipelineConfigLike",
]

#: Label of the injected advantage function in metrics and error messages.
ADVANTAGE_STEP_NAME = "advantage_fn"
_PREFIX = "experience_pipeline"

#: ``advantage_fn(exps) -> (exps, metrics)``; trinity-algorithms' group advantage functions
#: (``GroupAdvantage`` instances) have this signature.
AdvantageCallable = Callable[[list[Experience]], tuple[list[Experience], dict]]

PipelineConfigLike = Union[
    Config, DataProcessorConfig, ExperiencePipelineConfig, Mapping[str, Any], Sequence[OperatorSpec]
]

logger = get_logger(__name__)


@runtime_checkable
class ExperienceWriter(Protocol):
    """What the pipeline writes to: at least one of ``write`` / ``write_async``."""

    def write(self, data: list[Experience]) -> Any: ...


class _Step:
    """One stage of the pipeline: a configured operator or the injected advantage function."""

    def __init__(self, index: int, name: str, label: str, fn: Callable[[list[Experience]], Any]):
        self.index = index
        self.name = name
        self.label = label  # metric namespace: the name, or name_index when names repeat
        self.fn = fn

    def describe(self) -> str:
        if self.name == ADVANTAGE_STEP_NAME:
            return "the advantage function (advantage_fn)"
        return f"experience_pipeline.operators[{self.index}] ({self.name!r})"


def _resolve_config(config: Optional[PipelineConfigLike]) -> ExperiencePipelineConfig:
    if config is None:
        return ExperiencePipelineConfig()
    if isinstance(config, ExperiencePipelineConfig):
        return config
    if isinstance(config, DataProcessorConfig):
        return config.experience_pipeline
    if isinstance(config, Config):
        return (config.data_processor or DataProcessorConfig()).experience_pipeline
    if isinstance(config, Mapping):
        if "experience_pipeline" in config:  # a data_processor section
            return DataProcessorConfig.model_validate(dict(config)).experience_pipeline
        return ExperiencePipelineConfig.model_validate(dict(config))
    if isinstance(config, Sequence) and not isinstance(config, (str, bytes)):
        return ExperiencePipelineConfig(operators=[operator_config(s) for s in config])
    raise TypeError(
        "config must be a Config, DataProcessorConfig, ExperiencePipelineConfig, a mapping or "
        f"a list of operators, got {type(config).__name__}"
    )


def _as_number(value: Any) -> Optional[float]:
    if isinstance(value, numbers.Real):  # bool, int, float, numpy scalars
        return float(value)
    numel = getattr(value, "numel", None)
    if callable(numel) and numel() == 1 and hasattr(value, "item"):  # a 1-element tensor
        item = value.item()
        return float(item) if isinstance(item, numbers.Real) else None
    return None


def _run_sync(awaitable: Awaitable[Any]) -> Any:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_await(awaitable))
    raise RuntimeError(
        "an async operator or writer was called from the synchronous API inside a running "
        "event loop; use `await pipeline.process(...)` / `apply_async(...)` instead"
    )


async def _await(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def _input_writer(pipeline: ExperiencePipelineConfig) -> Optional[Any]:
    """The writer of ``input_save_path`` (the raw explorer output) when ``save_input`` is on:
    a SQL storage for a database URL, a file storage (``.jsonl``, ``.parquet``) otherwise."""
    path = pipeline.input_save_path
    if not (pipeline.save_input and path):
        return None
    from trinity.buffer.buffer_writer import get_buffer_writer
    from trinity.common.config import ExperienceBufferConfig

    storage_type = "sql" if "://" in path else "file"
    return get_buffer_writer(
        ExperienceBufferConfig(
            name="explorer_output",
            storage_type=storage_type,
            path=path,
            wrap_in_ray=False,  # written by this process only (as Trinity-RFT 0.6 does)
        )
    )


class ExperiencePipeline:
    """Runs the configured operators over each explore step's experiences and writes the result.

    Args:
        config: the operators to run: a whole :class:`Config`, its ``data_processor``, its
            ``experience_pipeline`` section, the equivalent mapping, or a bare operator list.
        writer: the trainer's input buffer (``write`` / ``write_async``); required by
            :meth:`process`, not by :meth:`apply`. When ``config`` is a whole :class:`Config`
            and no writer is given, ``buffer.trainer_input.experience_buffer`` is opened.
        advantage_fn: ``advantage_fn(exps) -> (exps, metrics)``, run after the operators
            when the algorithm computes advantages outside the trainer; ``None`` otherwise.
        input_writer: where raw explorer output is saved before processing
            when ``experience_pipeline.save_input`` is true; ``None`` saves nothing, except
            that a whole :class:`Config` with ``input_save_path`` set opens that path (a SQL
            storage for a database URL, else a file storage).
        operators: already-built operators to use instead of building the config's list.

    Metrics (returned by :meth:`process` / :meth:`apply`): every operator's numeric metric
    ``k`` appears as ``experience_pipeline/<name>/k`` (``<name>_<index>`` when a name repeats)
    and as ``experience_pipeline/k`` — summed over operators for ``*count`` keys (so
    ``filtered_count`` is the pipeline's total), the last operator's value otherwise, as in
    Trinity-RFT. Non-numeric metrics (e.g. ``taskset_schedule``) pass through under their own
    key. Also ``experience_pipeline/input_count``, ``experience_pipeline/experience_count``
    (written) and ``time/experience_pipeline/...`` timings in seconds.
    """

    def __init__(
        self,
        config: Optional[PipelineConfigLike] = None,
        *,
        writer: Optional[Any] = None,
        advantage_fn: Optional[AdvantageCallable] = None,
        input_writer: Optional[Any] = None,
        operators: Optional[Sequence[ExperienceOperator]] = None,
    ) -> None:
        if writer is None and isinstance(config, Config):
            buffer = config.buffer.trainer_input.experience_buffer
            if buffer is not None:
                from trinity.buffer.buffer_writer import get_buffer_writer

                writer = get_buffer_writer(buffer)
        if input_writer is None and isinstance(config, Config):
            input_writer = _input_writer(config.data_processor.experience_pipeline)
        self.config = _resolve_config(config)
        if operators is None:
            self.operators: list[ExperienceOperator] = build_operators(self.config.operators)
            names = [op.name for op in self.config.operators]
        else:
            # a synchronous operator wrapped by create_operators runs as itself
            self.operators = [unwrap_operator(op) for op in operators]
            configured = [op.name for op in self.config.operators]
            # Built from this config's list beforehand (the explorer does): keep the configured
            # names, so metrics read experience_pipeline/<name>/... on either path.
            names = (
                configured
                if len(configured) == len(self.operators)
                else [type(op).__name__ for op in self.operators]
            )
        for name, op in zip(names, self.operators, strict=True):
            if not callable(getattr(op, "process", None)):
                raise TypeError(f"operator {name!r} has no process(exps) method")
        if advantage_fn is not None:
            compute_in_trainer = getattr(advantage_fn, "compute_in_trainer", None)
            if callable(compute_in_trainer) and compute_in_trainer():
                raise ValueError(
                    f"{type(advantage_fn).__name__} computes advantages in the trainer "
                    "(compute_in_trainer() is True); pass advantage_fn=None to the pipeline"
                )
            if not callable(advantage_fn):
                raise TypeError(
                    "advantage_fn must be callable: advantage_fn(exps) -> (exps, metrics)"
                )
        self.writer = writer
        self.input_writer = input_writer
        self.advantage_fn = advantage_fn

        all_names = names + ([ADVANTAGE_STEP_NAME] if advantage_fn is not None else [])
        repeated = {n for n in all_names if all_names.count(n) > 1}
        self._steps: list[_Step] = [
            _Step(i, n, f"{n}_{i}" if n in repeated else n, op.process)
            for i, (n, op) in enumerate(zip(names, self.operators, strict=True))
        ]
        if advantage_fn is not None:
            self._steps.append(
                _Step(len(self._steps), ADVANTAGE_STEP_NAME, ADVANTAGE_STEP_NAME, advantage_fn)
            )

    # ------------------------------------------------------------------ processing
    def _check(self, step: _Step, out: Any) -> tuple[list[Experience], dict]:
        if not (isinstance(out, tuple) and len(out) == 2):
            raise ExperienceOperatorError(
                f"{step.describe()} returned {type(out).__name__}; expected a tuple "
                "(experiences, metrics)",
                index=step.index,
                name=step.name,
            )
        exps, metrics = out
        if not isinstance(exps, list) or not isinstance(metrics, Mapping):
            raise ExperienceOperatorError(
                f"{step.describe()} returned ({type(exps).__name__}, {type(metrics).__name__}); "
                "expected (list of Experience, dict of metrics)",
                index=step.index,
                name=step.name,
            )
        return exps, dict(metrics)

    def _failure(self, step: _Step, exc: Exception) -> ExperienceOperatorError:
        return ExperienceOperatorError(
            f"{step.describe()} failed: {type(exc).__name__}: {exc}",
            index=step.index,
            name=step.name,
        )

    def _skip(self, step: _Step, exps: list[Experience]) -> bool:
        # Nothing to compute advantages on (e.g. dynamic sampling is still filling a batch).
        return step.name == ADVANTAGE_STEP_NAME and not exps

    def apply(self, exps: list[Experience]) -> tuple[list[Experience], dict[str, Any]]:
        """Run the operators (and advantage function) on ``exps``; write nothing.

        Raises:
            ExperienceOperatorError: an operator raised or returned something malformed; the
                message names it and its index in ``experience_pipeline.operators``.
        """
        agg = _Metrics(len(exps))
        for step in self._steps:
            if self._skip(step, exps):
                continue
            start = time.perf_counter()
            try:
                out = step.fn(exps)
                if inspect.isawaitable(out):
                    out = _run_sync(out)
            except ExperienceOperatorError:
                raise
            except Exception as exc:
                raise self._failure(step, exc) from exc
            exps, metrics = self._check(step, out)
            agg.add(step, metrics, time.perf_counter() - start)
        return exps, agg.result(len(exps))

    async def apply_async(self, exps: list[Experience]) -> tuple[list[Experience], dict[str, Any]]:
        """:meth:`apply` that awaits asynchronous operators instead of running a new loop."""
        agg = _Metrics(len(exps))
        for step in self._steps:
            if self._skip(step, exps):
                continue
            start = time.perf_counter()
            try:
                out = step.fn(exps)
                if inspect.isawaitable(out):
                    out = await out
            except ExperienceOperatorError:
                raise
            except Exception as exc:
                raise self._failure(step, exc) from exc
            exps, metrics = self._check(step, out)
            agg.add(step, metrics, time.perf_counter() - start)
        return exps, agg.result(len(exps))

    async def process(
        self,
        exps: Union[list[Experience], bytes],
        before_write: Optional[Callable[[list[Experience], dict[str, Any]], None]] = None,
    ) -> dict[str, Any]:
        """Save the raw input (if configured), run the operators, write the result; return metrics.

        Nothing is written when the operators leave no experience (e.g. everything filtered,
        or dynamic sampling holding groups back until a batch is full).

        ``before_write(exps, metrics)``, when given, is called with what is about to be
        written (possibly nothing) and the operators' metrics, after the operators and before
        the write, synchronously: a caller that checkpoints what it has produced (the mode
        ``both`` explorer) records there the exact experiences the buffer is about to get.

        Each call ends with the writer's ``end_step`` (where it has one): a call is one explore
        step, and a queue lets its reader stop at a step's end.

        ``exps`` may also be their :meth:`Experience.serialize_many` bytes (what Trinity-RFT
        0.6's explorer sends its pipeline actor).
        """
        start = time.perf_counter()
        writer = self._require_writer()
        if isinstance(exps, (bytes, bytearray, memoryview)):
            exps = Experience.deserialize_many(bytes(exps))
        if self.input_writer is not None and self.config.save_input:
            await _write_async(self.input_writer, exps)
        exps, metrics = await self.apply_async(exps)
        if before_write is not None:
            before_write(exps, metrics)
        write_start = time.perf_counter()
        if exps:
            await _write_async(writer, exps)
        # one process() call is one explore step: its end lets the trainer's read stop here
        # with what the step produced (failed tasks must not leave it waiting for a full batch)
        end_step = getattr(writer, "end_step_async", None)
        if callable(end_step):
            await end_step()
        metrics[f"time/{_PREFIX}/write"] = time.perf_counter() - write_start
        metrics[f"time/{_PREFIX}/total"] = time.perf_counter() - start
        return metrics

    def process_sync(self, exps: list[Experience]) -> dict[str, Any]:
        """Blocking :meth:`process` (for callers without an event loop)."""
        start = time.perf_counter()
        writer = self._require_writer()
        if self.input_writer is not None and self.config.save_input:
            _write_sync(self.input_writer, exps)
        exps, metrics = self.apply(exps)
        write_start = time.perf_counter()
        if exps:
            _write_sync(writer, exps)
        metrics[f"time/{_PREFIX}/write"] = time.perf_counter() - write_start
        metrics[f"time/{_PREFIX}/total"] = time.perf_counter() - start
        return metrics

    def _require_writer(self) -> Any:
        if self.writer is None:
            raise RuntimeError(
                "ExperiencePipeline has no writer: pass writer=<the trainer's input buffer "
                "writer>, or call apply() to process without writing"
            )
        return self.writer

    # ------------------------------------------------------------------ lifecycle
    async def prepare(self) -> None:
        """Acquire the output writer (a shared queue counts its writers), if it supports it;
        off the event loop (``acquire_async``) where the writer has that."""
        await _call_writer(self.writer, "acquire")
        for op in self.operators:
            if isinstance(op, ExperienceOperatorV1):
                await op.prepare()

    async def close(self) -> None:
        """Release the writer and close every operator; failures are logged, not raised."""
        try:
            await _call_writer(self.writer, "release")
        except Exception as exc:  # closing must not mask the run's own outcome
            logger.error("Failed to release the experience pipeline writer: %s", exc)
        for step, op in zip(self._steps[: len(self.operators)], self.operators, strict=True):
            close = getattr(op, "close", None)
            if not callable(close):
                continue
            try:
                result = close()
                if inspect.isawaitable(result):
                    await result
            except Exception as exc:
                logger.error("Failed to close %s: %s", step.describe(), exc)

    def __repr__(self) -> str:
        steps = ", ".join(s.label for s in self._steps)
        return f"ExperiencePipeline([{steps}])"


class _Metrics:
    """Collects per-operator metrics into the pipeline's flat, prefixed dict."""

    def __init__(self, input_count: int) -> None:
        self.out: dict[str, Any] = {}
        self.flat: dict[str, float] = {}
        self.passthrough: dict[str, Any] = {}
        self.input_count = input_count

    def add(self, step: _Step, metrics: dict[str, Any], seconds: float) -> None:
        self.out[f"time/{_PREFIX}/operator/{step.index}_{step.name}"] = seconds
        for key, value in metrics.items():
            key = str(key)
            number = _as_number(value)
            if number is None:
                self.passthrough[key] = value
                continue
            self.out[f"{_PREFIX}/{step.label}/{key}"] = number
            if key.endswith("count") and key in self.flat:
                self.flat[key] += number
            else:
                self.flat[key] = number

    def result(self, output_count: int) -> dict[str, Any]:
        result = dict(self.passthrough)
        result.update({f"{_PREFIX}/{k}": v for k, v in self.flat.items()})
        result.update(self.out)
        result[f"{_PREFIX}/input_count"] = float(self.input_count)
        result[f"{_PREFIX}/experience_count"] = float(output_count)
        return result


async def _write_async(writer: Any, exps: list[Experience]) -> None:
    write_async = getattr(writer, "write_async", None)
    if callable(write_async):
        await write_async(exps)
        return
    result = writer.write(exps)
    if inspect.isawaitable(result):
        await result


async def _call_writer(writer: Any, name: str) -> None:
    """``await writer.<name>_async()``, else ``writer.<name>()`` (awaited if awaitable), for
    writers of any shape (``acquire`` / ``release`` are optional)."""
    method = getattr(writer, f"{name}_async", None)
    if not callable(method):
        method = getattr(writer, name, None)
    if callable(method):
        result = method()
        if inspect.isawaitable(result):
            await result


def _write_sync(writer: Any, exps: list[Experience]) -> None:
    write = getattr(writer, "write", None)
    if callable(write):
        result = write(exps)
        if inspect.isawaitable(result):
            _run_sync(result)
        return
    _run_sync(writer.write_async(exps))
