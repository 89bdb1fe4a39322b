"""Finding and loading the rows of a task set (local files or a saved HF ``datasets`` directory).

A task set ``path`` may be

* one file: ``.jsonl`` / ``.json`` / ``.parquet`` / ``.csv``;
* a directory written by ``datasets.Dataset.save_to_disk`` or ``DatasetDict.save_to_disk``
  (``split`` picks the split of a ``DatasetDict``);
* a directory of data files whose names carry the split, the way the Hugging Face Hub lays
  them out (``train.jsonl``, ``test.parquet``, ``data/train-00000-of-00001.parquet``,
  ``test/part-0.jsonl``); ``subset_name`` selects a sub-directory (``gsm8k/main/...``);
* a Hugging Face Hub name (``openai/gsm8k``) when nothing local has that name, through
  ``datasets.load_dataset`` (needs network access or a populated HF cache).

Why JSON lines and CSV are parsed here rather than by ``datasets.load_dataset``: its loaders
abort the whole file on one bad line and cannot say *where* the bad line is. A long RL run
should not die, hours in, on line 51 234 of a scraped data set, and a user fixing the data
needs the file and line. So rows are validated before anything starts:

* a column named in the config that no row has is one clear error (file, key, columns
  present), raised before the first task is read;
* a line that is not JSON, a row that is not an object, or a row whose value for a required
  key is missing or of another type than the rest of the column is skipped, counted and
  reported (:class:`MalformedRow` with file and line); the run goes on.

Parquet files and saved ``datasets`` directories are typed Arrow tables already, so only
missing (null) values can be malformed there; their "line" is the 1-based row number.
"""

from __future__ import annotations

import copy
import csv
import io
import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np

from trinity.utils.log import get_logger

__all__ = [
    "DATA_FILE_EXTENSIONS",
    "MalformedRow",
    "TasksetData",
    "TasksetLoadError",
    "TasksetNotFoundError",
    "TasksetKeyError",
    "resolve_data_files",
    "load_taskset_data",
]

logger = get_logger(__name__)

#: File suffix -> loader kind.
DATA_FILE_EXTENSIONS: dict[str, str] = {
    ".jsonl": "json",
    ".json": "json",
    ".parquet": "parquet",
    ".csv": "csv",
}

# Split names and the file-name keywords the HF Hub accepts for them.
_SPLIT_ALIASES: dict[str, tuple[str, ...]] = {
    "train": ("train", "training"),
    "validation": ("validation", "valid", "val", "dev"),
    "test": ("test", "testing", "eval", "evaluation"),
}
_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
_MAX_LOGGED_ROWS = 20


class TasksetLoadError(ValueError):
    """A task set cannot be loaded as configured (raised before any task is read)."""


class TasksetNotFoundError(TasksetLoadError, FileNotFoundError):
    """The task set path (or the requested split / subset) does not exist."""


class TasksetKeyError(TasksetLoadError, KeyError):
    """A column named in the config is absent from the data set."""

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class MalformedRow:
    """A row that was skipped: where it is and why.

    ``line`` is the 1-based line number for JSON lines and CSV files, and the 1-based row
    (item) number for JSON arrays, parquet files and saved ``datasets`` directories.
    """

    file: str
    line: int
    reason: str

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}"

    def __str__(self) -> str:
        return f"{self.location}: {self.reason}"


# --------------------------------------------------------------------------------------
# The loaded rows
# --------------------------------------------------------------------------------------


class TasksetData:
    """The valid rows of a task set, addressable by a stable index ``0 .. len - 1``.

    ``data[i]`` is row ``i`` as a dict, ``data["col"]`` the column as a list (what Trinity-RFT
    selectors read as ``data_source.dataset[key]``). ``origin(i)`` says which file and line
    row ``i`` came from; ``malformed`` lists the rows that were skipped.
    """

    def __init__(
        self,
        rows: Union[list[dict[str, Any]], Any],
        origins_file: np.ndarray,
        origins_line: np.ndarray,
        files: Sequence[str],
        malformed: Sequence[MalformedRow] = (),
        columns: Optional[Sequence[str]] = None,
    ) -> None:
        self._rows = rows  # a list of dicts or a datasets.Dataset
        self._origins_file = origins_file
        self._origins_line = origins_line
        self.files = list(files)
        self.malformed = list(malformed)
        if columns is None:
            columns = _columns_of(rows)
        self.columns = list(columns)

    @classmethod
    def from_rows(cls, rows: Sequence[dict[str, Any]], source: str = "<memory>") -> TasksetData:
        """In-memory rows (tests, programmatic task sets); row ``i`` is "line" ``i + 1``."""
        rows = [dict(r) for r in rows]
        n = len(rows)
        return cls(rows, np.zeros(n, dtype=np.int32), np.arange(1, n + 1), [source])

    # --- Trinity-RFT selector compatibility (``data_source.dataset[...]``, ``dataset_size``)
    @property
    def dataset(self) -> TasksetData:
        return self

    @property
    def dataset_size(self) -> int:
        return len(self)

    @property
    def num_skipped(self) -> int:
        return len(self.malformed)

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, key: Union[int, str]) -> Any:
        if isinstance(key, str):
            return self.column(key)
        return self.row(int(key))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for i in range(len(self)):
            yield self.row(i)

    def row(self, index: int) -> dict[str, Any]:
        """Row ``index`` as a fresh dict (callers may modify it)."""
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"task index {index} out of range for a task set of {n} rows")
        row = self._rows[index]
        # Arrow rows are fresh objects; stored Python rows are copied so a workflow editing
        # its raw_task (nested lists included) cannot change the task set for later epochs
        return copy.deepcopy(row) if isinstance(self._rows, list) else dict(row)

    def column(self, key: str) -> list[Any]:
        """Every value of column ``key`` (``None`` where a row lacks it)."""
        if isinstance(self._rows, list):
            return [r.get(key) for r in self._rows]
        if key not in self.columns:
            raise KeyError(key)
        return list(self._rows[key])

    def origin(self, index: int) -> tuple[str, int]:
        """``(file, line)`` of row ``index``."""
        return self.files[int(self._origins_file[index])], int(self._origins_line[index])


def _columns_of(rows: Any) -> list[str]:
    if isinstance(rows, list):
        seen: dict[str, None] = {}
        for r in rows:
            for k in r:
                seen.setdefault(k, None)
        return list(seen)
    return list(rows.column_names)


# --------------------------------------------------------------------------------------
# Finding the files
# --------------------------------------------------------------------------------------


@dataclass
class _Resolved:
    kind: str  # "files" | "disk" | "hub"
    files: list[Path]
    disk_path: Optional[Path] = None


def _kind_of(path: Path) -> Optional[str]:
    return DATA_FILE_EXTENSIONS.get(path.suffix.lower())


def _split_pattern(split: str) -> re.Pattern[str]:
    names = _SPLIT_ALIASES.get(split, (split,))
    alt = "|".join(re.escape(n) for n in names)
    # the split name delimited like the HF Hub does it: train.jsonl, data/train-0000.parquet,
    # test/part.jsonl, my_test.csv -- but not "training_notes" for "train" (needs a delimiter)
    return re.compile(rf"(^|[-._ /])({alt})([-._ 0-9/]|$)", re.IGNORECASE)


def _data_files_under(root: Path) -> list[Path]:
    out = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).parts
        if any(part.startswith(".") for part in rel):  # .cache, .git, hidden files
            continue
        if p.is_file() and _kind_of(p) is not None:
            out.append(p)
    return out


def resolve_data_files(
    path: Union[str, Path], split: str = "train", subset_name: Optional[str] = None
) -> _Resolved:
    """Decide what to load for ``path`` / ``split`` / ``subset_name``.

    Raises:
        TasksetNotFoundError: the path, split or subset does not exist (the message lists
            what does).
        TasksetLoadError: the file type is not supported.
    """
    raw = str(path)
    p = Path(raw).expanduser()
    if p.is_file():
        if _kind_of(p) is None:
            raise TasksetLoadError(
                f"Task set file {p} has an unsupported type {p.suffix!r}; supported: "
                f"{', '.join(DATA_FILE_EXTENSIONS)} files, or a directory saved with "
                "datasets' save_to_disk."
            )
        return _Resolved("files", [p])
    if p.is_dir():
        if subset_name and subset_name != "default":
            sub = p / subset_name
            if not sub.is_dir():
                subdirs = sorted(d.name for d in p.iterdir() if d.is_dir())
                raise TasksetNotFoundError(
                    f"Task set {p}: subset_name {subset_name!r} is not a sub-directory; "
                    f"sub-directories present: {subdirs or 'none'}."
                )
            p = sub
        if (p / "dataset_dict.json").is_file() or (
            (p / "dataset_info.json").is_file() and (p / "state.json").is_file()
        ):
            return _Resolved("disk", [], disk_path=p)
        files = _data_files_under(p)
        if not files:
            raise TasksetNotFoundError(
                f"Task set directory {p} holds no data files "
                f"({', '.join(DATA_FILE_EXTENSIONS)}) and is not a save_to_disk directory."
            )
        rel = {f: f.relative_to(p).with_suffix("").as_posix() for f in files}
        matched = [f for f in files if _split_pattern(split).search(rel[f])]
        if not matched:
            known = {
                s for s in _SPLIT_ALIASES if any(_split_pattern(s).search(r) for r in rel.values())
            }
            if split == "train" and not known:
                matched = files  # un-split files are the train split (the HF convention)
            else:
                raise TasksetNotFoundError(
                    f"Task set directory {p} has no files for split {split!r}; splits found: "
                    f"{sorted(known) or 'none'}; files: "
                    f"{[f.relative_to(p).as_posix() for f in files][:20]}."
                )
        kinds = {_kind_of(f) for f in matched}
        if len(kinds) > 1:
            raise TasksetLoadError(
                f"Task set directory {p}, split {split!r}: files of different types "
                f"{sorted(str(f.relative_to(p)) for f in matched)}; keep one type per split."
            )
        return _Resolved("files", matched)
    if _looks_like_hub_name(raw):
        return _Resolved("hub", [])
    raise TasksetNotFoundError(f"Task set path {raw!r} does not exist (resolved to {p}).")


def _looks_like_hub_name(raw: str) -> bool:
    if raw.startswith((".", "/", "~")) or Path(raw).suffix.lower() in DATA_FILE_EXTENSIONS:
        return False
    return bool(_HUB_NAME.match(raw))


# --------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------

_Row = tuple[dict[str, Any], int]  # (row, line)


def _json_rows(path: Path, bad: list[MalformedRow]) -> list[_Row]:
    """Rows of a JSON lines file, or of a .json file holding an array / one object."""
    data = path.read_bytes()
    if path.suffix.lower() == ".json":
        text = data.decode("utf-8-sig", errors="replace").lstrip()
        if text.startswith("["):
            try:
                items = json.loads(text)
            except json.JSONDecodeError as exc:
                raise TasksetLoadError(
                    f"{path}:{exc.lineno}: the file is a JSON array that does not parse "
                    f"({exc.msg}); no row can be recovered from it. Fix the file or store "
                    "it as JSON lines (one object per line), where a bad line is skipped."
                ) from exc
            rows: list[_Row] = []
            for i, item in enumerate(items, 1):
                if isinstance(item, dict):
                    rows.append((item, i))
                else:
                    bad.append(
                        MalformedRow(
                            str(path), i, f"item is a {type(item).__name__}, not a JSON object"
                        )
                    )
            return rows
        if text.startswith("{"):
            try:
                obj = json.loads(text)
            except json.JSONDecodeError:
                obj = None  # several objects: JSON lines stored as .json
            if isinstance(obj, dict):
                return _columnar_or_single(obj)
    rows = []
    for lineno, raw in enumerate(io.BytesIO(data), 1):
        if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        if not raw.strip():
            continue
        try:
            item = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            bad.append(MalformedRow(str(path), lineno, f"not UTF-8 ({exc.reason})"))
            continue
        except json.JSONDecodeError as exc:
            bad.append(MalformedRow(str(path), lineno, f"invalid JSON ({exc.msg})"))
            continue
        if not isinstance(item, dict):
            bad.append(
                MalformedRow(
                    str(path), lineno, f"line is a JSON {type(item).__name__}, not an object"
                )
            )
            continue
        rows.append((item, lineno))
    return rows


def _columnar_or_single(obj: dict[str, Any]) -> list[_Row]:
    values = list(obj.values())
    if values and all(isinstance(v, list) for v in values):
        lengths = {len(v) for v in values}
        if len(lengths) == 1:  # {"col": [...], ...}: one row per position
            n = lengths.pop()
            return [({k: obj[k][i] for k in obj}, i + 1) for i in range(n)]
    return [(obj, 1)]


def _csv_rows(path: Path, bad: list[MalformedRow]) -> list[_Row]:
    """Rows of a CSV file with a header line; numbers typed per column like pandas does."""
    text = path.read_bytes().decode("utf-8-sig", errors="strict")
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except StopIteration:
        return []
    width = len(header)
    raw_rows: list[tuple[list[str], int]] = []
    line = reader.line_num + 1
    for record in reader:
        start, line = line, reader.line_num + 1
        if not record or (len(record) == 1 and not record[0].strip()):
            continue
        if len(record) != width:
            bad.append(
                MalformedRow(str(path), start, f"{len(record)} fields where the header has {width}")
            )
            continue
        raw_rows.append((record, start))
    converters = [_csv_column_type([r[j] for r, _ in raw_rows]) for j in range(width)]
    return [
        ({header[j]: converters[j](r[j]) for j in range(width)}, start) for r, start in raw_rows
    ]


def _csv_column_type(values: list[str]) -> Any:
    present = [v for v in values if v != ""]

    def typed(conv: Any) -> Any:
        return lambda v: None if v == "" else conv(v)

    for conv in (int, float):
        try:
            for v in present:
                conv(v)
        except ValueError:
            continue
        if present:
            return typed(conv)
    return typed(str)


def _kind(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float, np.integer, np.floating)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple, np.ndarray)):
        return "list"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


# --------------------------------------------------------------------------------------
# Validation and loading
# --------------------------------------------------------------------------------------


def _missing_key_error(
    key: str, purpose: str, columns: Iterable[str], where: str
) -> TasksetKeyError:
    return TasksetKeyError(
        f"Task set {where}: no column {key!r} ({purpose}); columns present: "
        f"{sorted(columns)}. Set buffer.explorer_input.taskset.format.{purpose} to one of "
        "them (or fix the data)."
    )


def _validate_python_rows(
    rows: list[tuple[dict[str, Any], int, int]],
    files: list[str],
    required: dict[str, str],
    optional_str: dict[str, str],
    bad: list[MalformedRow],
    where: str,
) -> list[tuple[dict[str, Any], int, int]]:
    columns: set[str] = set()
    for r, _, _ in rows:
        columns.update(r)
    for key, purpose in required.items():
        if key not in columns:
            raise _missing_key_error(key, purpose, columns, where)
    expected: dict[str, str] = {}
    for key in required:
        kinds = Counter(_kind(r.get(key)) for r, _, _ in rows)
        kinds.pop("null", None)
        # the column's type is what most rows hold; ties go to strings (prompts are text)
        expected[key] = max(kinds, key=lambda k: (kinds[k], k == "string"))
    kept = []
    for r, fid, line in rows:
        reason = None
        for key in required:
            kind = _kind(r.get(key))
            if kind == "null":
                reason = f"missing value for {key!r}"
            elif kind != expected[key]:
                reason = f"{key!r} is a {kind} where the column holds {expected[key]} values"
            if reason:
                break
        if reason is None:
            for key in optional_str:
                kind = _kind(r.get(key))
                if kind not in ("null", "string"):
                    reason = f"{key!r} must be a registered name (string), got a {kind}"
                    break
        if reason is None:
            kept.append((r, fid, line))
        else:
            bad.append(MalformedRow(files[fid], line, reason))
    return kept


def _validate_arrow(
    ds: Any,
    files: list[str],
    fids: np.ndarray,
    lines: np.ndarray,
    required: dict[str, str],
    optional_str: dict[str, str],
    bad: list[MalformedRow],
    where: str,
) -> np.ndarray:
    """Indices of valid rows of a ``datasets.Dataset`` (typed; only nulls can be bad)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    # parquet tables and save_to_disk directories have no indices mapping (save_to_disk
    # flattens it), so the underlying Arrow table is row-aligned with the dataset
    table = ds.data.table
    columns = list(ds.column_names)
    for key, purpose in required.items():
        if key not in columns:
            raise _missing_key_error(key, purpose, columns, where)
    for key, purpose in optional_str.items():
        if key in columns:
            typ = table.schema.field(key).type
            if not (
                pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_null(typ)
            ):
                raise TasksetLoadError(
                    f"Task set {where}: column {key!r} ({purpose}) must hold registered names "
                    f"(strings), but its type is {typ}."
                )
    keep = np.ones(len(ds), dtype=bool)
    for key in required:
        col = table.column(key)
        if col.null_count:
            nulls = np.asarray(pc.is_null(col).to_numpy(zero_copy_only=False), dtype=bool)
            for i in np.nonzero(nulls & keep)[0]:
                bad.append(
                    MalformedRow(files[int(fids[i])], int(lines[i]), f"missing value for {key!r}")
                )
            keep &= ~nulls
    return np.nonzero(keep)[0]


def load_taskset_data(
    path: Union[str, Path],
    split: str = "train",
    subset_name: Optional[str] = None,
    required_keys: Optional[dict[str, str]] = None,
    optional_str_keys: Optional[dict[str, str]] = None,
    name: str = "",
) -> TasksetData:
    """Load and validate a task set.

    Args:
        path: file, directory or HF Hub name (see the module docstring).
        split: split to read from a directory / ``DatasetDict`` / hub data set.
        subset_name: sub-directory (or hub config) to read.
        required_keys: ``{column: purpose}``; a column absent from every row is an error, a
            row without a value (or with a value of another type than the column's) is
            skipped and reported. ``purpose`` names the config field in messages.
        optional_str_keys: ``{column: purpose}`` of columns that, where present, must hold
            strings (per-row workflow / reward function names).
        name: task set name, for messages.

    Raises:
        TasksetNotFoundError / TasksetKeyError / TasksetLoadError: before any row is used.
    """
    required = dict(required_keys or {})
    optional_str = dict(optional_str_keys or {})
    label = f"{name!r} ({path})" if name else str(path)
    resolved = resolve_data_files(path, split, subset_name)
    bad: list[MalformedRow] = []

    if resolved.kind == "files" and _kind_of(resolved.files[0]) in ("json", "csv"):
        files = [str(f) for f in resolved.files]
        rows: list[tuple[dict[str, Any], int, int]] = []
        for fid, f in enumerate(resolved.files):
            parse = _json_rows if _kind_of(f) == "json" else _csv_rows
            rows.extend((r, fid, line) for r, line in parse(f, bad))
        if not rows and not bad:
            raise TasksetLoadError(f"Task set {label} is empty.")
        if rows:
            rows = _validate_python_rows(rows, files, required, optional_str, bad, label)
        data = TasksetData(
            [r for r, _, _ in rows],
            np.asarray([fid for _, fid, _ in rows], dtype=np.int32),
            np.asarray([line for _, _, line in rows], dtype=np.int64),
            files,
            bad,
        )
    else:
        ds, files, fids, lines = _load_arrow(resolved, str(path), split, subset_name, label)
        keep = _validate_arrow(ds, files, fids, lines, required, optional_str, bad, label)
        if len(keep) != len(ds):
            ds = ds.select(keep.tolist())
            fids, lines = fids[keep], lines[keep]
        data = TasksetData(ds, fids, lines, files, bad)

    if bad:
        shown = "; ".join(str(b) for b in bad[:_MAX_LOGGED_ROWS])
        more = f" (and {len(bad) - _MAX_LOGGED_ROWS} more)" if len(bad) > _MAX_LOGGED_ROWS else ""
        logger.warning(
            "Task set %s: skipped %d malformed row(s), kept %d: %s%s",
            label,
            len(bad),
            len(data),
            shown,
            more,
        )
    if len(data) == 0:
        raise TasksetLoadError(
            f"Task set {label} has no valid rows ({len(bad)} malformed: "
            f"{'; '.join(str(b) for b in bad[:5])})."
        )
    return data


def _load_arrow(
    resolved: _Resolved, path: str, split: str, subset_name: Optional[str], label: str
) -> tuple[Any, list[str], np.ndarray, np.ndarray]:
    import datasets

    if resolved.kind == "files":  # parquet
        import pyarrow.parquet as pq

        parts, files, fids, lines = [], [], [], []
        for fid, f in enumerate(resolved.files):
            try:
                table = pq.read_table(f)
            except Exception as exc:  # corrupt file: nothing in it can be trusted
                raise TasksetLoadError(f"Task set {label}: cannot read {f}: {exc}") from exc
            parts.append(datasets.Dataset(table))
            files.append(str(f))
            fids.append(np.full(table.num_rows, fid, dtype=np.int32))
            lines.append(np.arange(1, table.num_rows + 1, dtype=np.int64))
        try:
            ds = parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
        except Exception as exc:
            raise TasksetLoadError(
                f"Task set {label}: the files of split {split!r} have different columns or "
                f"types and cannot be read as one table: {exc}"
            ) from exc
        return ds, files, np.concatenate(fids), np.concatenate(lines)

    if resolved.kind == "disk":
        loaded = datasets.load_from_disk(str(resolved.disk_path))
        source = str(resolved.disk_path)
        if isinstance(loaded, datasets.DatasetDict):
            if split not in loaded:
                raise TasksetNotFoundError(
                    f"Task set {label}: split {split!r} not in the saved DatasetDict; splits: "
                    f"{sorted(loaded)}."
                )
            loaded = loaded[split]
            source = f"{source}[{split}]"
        ds = loaded
    else:  # hub
        try:
            ds = datasets.load_dataset(path, name=subset_name, split=split)
        except Exception as exc:
            raise TasksetNotFoundError(
                f"Task set {label} is not a local file or directory (looked for "
                f"{Path(path).expanduser().resolve()}), and loading it as a Hugging Face Hub "
                f"data set failed: {type(exc).__name__}: {exc}"
            ) from exc
        source = label
    n = len(ds)
    return ds, [source], np.zeros(n, dtype=np.int32), np.arange(1, n + 1, dtype=np.int64)
