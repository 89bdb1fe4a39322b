"""Experiences to and from Hugging Face ``datasets`` (Trinity-RFT's ``to_hf_datasets`` /
``from_hf_datasets``, re-exported by :mod:`trinity.common.experience` and by
:mod:`trinity.common.experience_hf`).

Each row holds the whole experience as :meth:`Experience.serialize` bytes (column
``experience``, lossless: tensors, dtypes, eid, info and metrics come back equal) next to
readable columns for browsing and filtering (``uid``, ``reward``, ``prompt_length``,
``response_length``, ``experience_type``, ``model_version``). ``datasets`` is imported only
when these functions run; it is not a dependency of trinity-core.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trinity.common.experience.core import Experience

__all__ = ["from_hf_datasets", "to_hf_datasets"]

_PAYLOAD = "experience"


def _datasets() -> Any:
    try:
        import datasets
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "to_hf_datasets / from_hf_datasets need the `datasets` package "
            "(pip install datasets; trinity-buffer installs it)"
        ) from exc
    return datasets


def to_hf_datasets(experiences: Sequence[Experience]) -> Any:
    """A ``datasets.Dataset`` with one row per experience (see the module docstring)."""
    datasets = _datasets()
    rows: dict[str, list[Any]] = {
        _PAYLOAD: [],
        "uid": [],
        "reward": [],
        "prompt_length": [],
        "response_length": [],
        "experience_type": [],
        "model_version": [],
    }
    for i, exp in enumerate(experiences):
        if not isinstance(exp, Experience):
            raise TypeError(f"experiences[{i}] is {type(exp).__name__}, not Experience")
        rows[_PAYLOAD].append(exp.serialize())
        rows["uid"].append(exp.eid.uid)
        rows["reward"].append(exp.reward)
        rows["prompt_length"].append(exp.prompt_length)
        rows["response_length"].append(exp.response_length)
        rows["experience_type"].append(exp.experience_type)
        rows["model_version"].append(exp.model_version)
    return datasets.Dataset.from_dict(rows)


def from_hf_datasets(dataset: Any) -> list[Experience]:
    """The experiences of a dataset written by :func:`to_hf_datasets`.

    Raises:
        ValueError: the dataset has no ``experience`` column (it was not written by
            :func:`to_hf_datasets`; raw SFT / DPO data sets go through the buffer's formatters).
    """
    columns = list(getattr(dataset, "column_names", []) or [])
    if _PAYLOAD not in columns:
        raise ValueError(
            f"dataset has no {_PAYLOAD!r} column (columns: {columns}); from_hf_datasets reads "
            "what to_hf_datasets writes"
        )
    return [Experience.deserialize(bytes(data)) for data in dataset[_PAYLOAD]]
