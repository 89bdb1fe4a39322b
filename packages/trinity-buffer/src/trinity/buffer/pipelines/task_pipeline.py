"""The task pipeline: raw data files → Data-Juicer operators → the task set the explorer reads.

Runs once before exploring (``data_processor.task_pipeline``). Every input file is read into
rows, the listed Data-Juicer operators run over them (operators name the field they read
with ``text_key``, e.g. ``text_key: question``), rows are optionally ranked by
``priority_weights`` and cut to ``top_k``, only ``target_fields`` are kept, and the result is
written to the output task set's path.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, Optional, Union

from trinity.buffer.operators.data_juicer import (
    DJ_META_KEY,
    DJ_STATS_KEY,
    DataJuicerRunner,
    normalize_dj_process,
)
from trinity.common.config import Config, TaskPipelineConfig
from trinity.utils.log import get_logger

__all__ = ["TaskPipeline", "check_and_run_task_pipeline", "DEFAULT_OUTPUT_FILE"]

#: File written inside the output path when that path is a directory.
DEFAULT_OUTPUT_FILE = "tasks.jsonl"
_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")
_PREFIX = "task_pipeline"

logger = get_logger(__name__)


class TaskPipeline:
    """Process raw task data sets with Data-Juicer operators into the explorer's task set.

    Args:
        config: a whole :class:`Config` (its ``data_processor.task_pipeline`` is used) or the
            :class:`TaskPipelineConfig` itself.
        output_path: overrides ``task_pipeline.output.path``. A path ending in ``.jsonl``,
            ``.json`` or ``.parquet`` is written as that file; any other path is a directory
            that receives ``tasks.jsonl`` (a task set reader loads the directory).
    """

    def __init__(
        self, config: Union[Config, TaskPipelineConfig], output_path: Optional[str] = None
    ) -> None:
        if isinstance(config, Config):
            if config.data_processor is None or config.data_processor.task_pipeline is None:
                raise ValueError("config.data_processor.task_pipeline is not set")
            config = config.data_processor.task_pipeline
        if not isinstance(config, TaskPipelineConfig):
            raise TypeError(f"expected a Config or TaskPipelineConfig, got {type(config).__name__}")
        self.pipeline_config = config
        path = output_path or (config.output.path if config.output is not None else None)
        if not path:
            raise ValueError(
                "the task pipeline needs an output: set data_processor.task_pipeline.output.path "
                "(it defaults to the first train task set when one is configured)"
            )
        self.output_path = Path(path)
        self.output_file: Optional[Path] = None
        self._runner: Optional[DataJuicerRunner] = None

    # ------------------------------------------------------------------ paths
    def _output_file(self) -> Path:
        if self.output_path.suffix in (".jsonl", ".json", ".parquet"):
            return self.output_path
        return self.output_path / DEFAULT_OUTPUT_FILE

    def _input_files(self) -> list[Path]:
        files: list[Path] = []
        if not self.pipeline_config.inputs:
            raise ValueError("data_processor.task_pipeline.inputs lists no input file")
        for raw in self.pipeline_config.inputs:
            path = Path(raw)
            if path.is_dir():
                found = sorted(p for p in path.rglob("*") if p.suffix in _SUFFIXES and p.is_file())
                if not found:
                    raise FileNotFoundError(
                        f"task pipeline input {raw}: no {_SUFFIXES} file inside"
                    )
                files.extend(found)
            elif path.is_file():
                if path.suffix not in _SUFFIXES:
                    raise ValueError(f"task pipeline input {raw}: unsupported file type")
                files.append(path)
            else:
                raise FileNotFoundError(f"task pipeline input not found: {raw}")
        return files

    # ------------------------------------------------------------------ processing
    def _runner_for(self) -> DataJuicerRunner:
        if self._runner is None:
            cfg = self.pipeline_config
            process, file_np = normalize_dj_process(cfg.operators, cfg.config_path)
            self._runner = DataJuicerRunner(process, np=file_np or cfg.num_process)
        return self._runner

    def process(self) -> dict[str, Any]:
        """Run the pipeline; return metrics (``task_pipeline/input_count``, ``output_count``,
        ``filtered_count``). The written file is :attr:`output_file`."""
        cfg = self.pipeline_config
        inputs = self._input_files()
        output_file = self._output_file().resolve()
        into_dir = output_file != self.output_path.resolve()
        for f in inputs:
            f = f.resolve()
            if f == output_file or (into_dir and output_file.parent in f.parents):
                raise ValueError(
                    f"task pipeline output {output_file} would sit beside or replace the input "
                    f"{f}; the task set reader would read both: choose another output path"
                )
        rows: list[dict[str, Any]] = []
        for f in inputs:
            rows.extend(_read_rows(f))
        logger.info("Task pipeline: %d rows from %d file(s)", len(rows), len(inputs))

        out_rows = self._runner_for().run(rows)
        filtered = len(rows) - len(out_rows)
        if cfg.priority_weights:
            for row in out_rows:
                row["priority"] = _priority(row, cfg.priority_weights)
            out_rows.sort(key=lambda r: r["priority"], reverse=True)
        if cfg.top_k is not None and cfg.top_k > 0:
            out_rows = out_rows[: cfg.top_k]
        out_rows = [_select_fields(row, cfg.target_fields) for row in out_rows]

        _write_rows(output_file, out_rows)
        self.output_file = output_file
        logger.info("Task pipeline: wrote %d rows to %s", len(out_rows), output_file)
        return {
            f"{_PREFIX}/input_count": float(len(rows)),
            f"{_PREFIX}/output_count": float(len(out_rows)),
            f"{_PREFIX}/filtered_count": float(filtered),
        }

    def close(self) -> None:
        """Drop the built Data-Juicer operators (and any models they hold)."""
        self._runner = None


def check_and_run_task_pipeline(config: Config) -> dict[str, Any]:
    """Run the task pipeline the config has, before the run reads its output; return its
    metrics. A run that does not explore runs it only when it names an output (mode train with
    sft/dpo writes to ``buffer.trainer_input.experience_buffer``, as in Trinity-RFT).

    Raises:
        RuntimeError: the pipeline failed (the cause is chained).
    """
    if config.data_processor is None or config.data_processor.task_pipeline is None:
        return {}
    if not config.run_mode.explores and config.data_processor.task_pipeline.output is None:
        return {}  # the explorer's task sets are its only other reader
    pipeline = TaskPipeline(config)
    try:
        return pipeline.process()
    except Exception as exc:
        raise RuntimeError(f"Task pipeline failed: {type(exc).__name__}: {exc}") from exc
    finally:
        pipeline.close()


# ---------------------------------------------------------------------- helpers


def _priority(row: dict[str, Any], weights: dict[str, float]) -> float:
    stats = row.get(DJ_STATS_KEY) or {}
    total = 0.0
    for key, weight in weights.items():
        value = stats.get(key, row.get(key))
        if value is None:
            raise ValueError(
                f"priority_weights names {key!r}, but rows have no such field or Data-Juicer "
                f"statistic (stats: {sorted(stats)}; fields: {sorted(row)})"
            )
        total += float(weight) * float(value)
    return total


def _select_fields(row: dict[str, Any], target_fields: list[str]) -> dict[str, Any]:
    if not target_fields:
        return {k: v for k, v in row.items() if k not in (DJ_STATS_KEY, DJ_META_KEY)}
    missing = [f for f in target_fields if f not in row]
    if missing:
        raise KeyError(f"target_fields {missing} are not in the processed rows ({sorted(row)})")
    return {f: row[f] for f in target_fields}


def _read_rows(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    if path.suffix == ".csv":
        with path.open(newline="", encoding="utf-8") as fh:
            return [dict(r) for r in csv.DictReader(fh)]
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json" and text.lstrip().startswith("["):
        data = json.loads(text)
        return [dict(r) for r in data]
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(dict(json.loads(line)))
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{path}:{lineno}: not a JSON object per line: {exc}") from exc
    return rows


def _write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
        return
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        if path.suffix == ".json":
            json.dump(rows, fh, ensure_ascii=False, default=str)
        else:
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
    tmp.replace(path)  # never leave a half-written task set behind
