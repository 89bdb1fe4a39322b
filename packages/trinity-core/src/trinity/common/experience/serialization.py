"""The experience wire format (no pickle: JSON + safetensors).

This module owns the byte layout: :func:`pack` and :func:`unpack` turn a list of items
(each a JSON-able metadata dict and a dict of named tensors) into one payload and back, and
:func:`_jsonable` makes metadata plain JSON (or raises a ``TypeError`` naming the field).
:meth:`trinity.common.experience.core.Experience.serialize_many` and ``deserialize_many``
are the callers; they decide which fields are metadata and which are tensors.

Layout: ``b"TRXJ"`` | version u8 | JSON length u64 LE | safetensors length u64 LE | UTF-8
JSON | safetensors blob.

* Version 2 (written): the tensors of all items are packed per ``(name, dtype)`` into one
  flat safetensors entry ``"{name}|{dtype}"``, in item order; each item's JSON carries
  ``"tensors": {name: [dtype, shape]}``, which is all it takes to cut its slices back out.
  A batch of 128 experiences is a handful of entries instead of ~800 tiny ones: safetensors'
  per-entry cost (and its shared-storage checks) was most of the encoding time, paid several
  times per step on the way from a runner to the trainer.
* Version 1 (still read, so stored SQLite/file buffers stay readable): one entry per tensor,
  keyed ``"{index}:{name}"``.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from safetensors.numpy import save as _st_save_numpy
from safetensors.torch import load as _st_load
from safetensors.torch import save as _st_save_torch
from torch import Tensor

__all__ = ["pack", "unpack"]

_SER_MAGIC = b"TRXJ"
_SER_VERSION = 2
_READABLE_VERSIONS = (1, 2)
_HEADER = struct.Struct("<BQQ")

#: One item of a payload: its JSON metadata and its tensors by name.
Item = tuple[dict[str, Any], dict[str, Tensor]]


def _dtype_from_name(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown torch dtype {name!r} in payload")
    return dtype


class _NotJsonable(TypeError):
    """Raised inside :func:`_to_json`; carries the path segments, outermost last, so the
    path string is built only when a value is refused (building it for every value was
    most of the metadata's encoding time)."""

    def __init__(self, message: str, segments: list[str]) -> None:
        super().__init__(message)
        self.message = message
        self.segments = segments


def _to_json(value: Any) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)  # Python's json round-trips NaN/Infinity
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise _NotJsonable(
                    f"has a non-string key {k!r} ({type(k).__name__}); "
                    "only string keys can be serialized",
                    [],
                )
            try:
                out[k] = _to_json(v)
            except _NotJsonable as exc:
                exc.segments.append(f"[{k!r}]")
                raise
        return out
    if isinstance(value, (list, tuple)):
        items = []
        for j, v in enumerate(value):
            try:
                items.append(_to_json(v))
            except _NotJsonable as exc:
                exc.segments.append(f"[{j}]")
                raise
        return items
    if isinstance(value, np.generic) and isinstance(value.item(), (bool, int, float, str)):
        return value.item()
    raise _NotJsonable(
        f"holds a {type(value).__name__}, which cannot be serialized as JSON "
        "(experiences are serialized without pickle; store tensors in tensor fields and "
        "keep info/metrics/messages to str, int, float, bool, None, list and dict)",
        [],
    )


def _jsonable(value: Any, path: str) -> Any:
    """Return ``value`` as plain JSON types, or raise ``TypeError`` naming ``path``.

    Numpy scalars become Python scalars and tuples become lists (the only lossy
    conversions); dict keys must be strings because JSON would silently stringify them.
    """
    try:
        return _to_json(value)
    except _NotJsonable as exc:
        where = path + "".join(reversed(exc.segments))
        raise TypeError(f"{where} {exc.message}") from None


def _dense(t: Tensor) -> Tensor:
    """``t`` flattened, on the CPU, detached and contiguous (what ``torch.cat`` needs)."""
    return t.detach().cpu().reshape(-1)


#: dtypes numpy holds as they are (bfloat16 and the float8s it does not).
_NUMPY_DTYPES = frozenset(
    {
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.float32,
        torch.float64,
    }
)


def _st_save(flat: dict[str, Tensor]) -> bytes:
    """safetensors bytes of contiguous CPU tensors. Through safetensors' numpy writer where
    every dtype allows: the same bytes as its torch writer (tested), whose per-tensor checks
    (shared storage, pointer flattening) cost ~50 us a call -- most of serializing one
    experience, as the SQL buffers do row by row."""
    if all(t.dtype in _NUMPY_DTYPES for t in flat.values()):
        return _st_save_numpy({k: t.numpy() for k, t in flat.items()})
    return _st_save_torch(flat)


def pack(items: Sequence[Item]) -> bytes:
    """Encode ``items`` (metadata dicts must already be plain JSON) as a version-2 payload.

    Each metadata dict gets a ``"tensors"`` entry (``{name: [dtype, shape]}``); the
    caller's dicts are not modified.
    """
    groups: dict[str, list[Tensor]] = {}
    metas: list[dict[str, Any]] = []
    for meta, tensors in items:
        layout: dict[str, list[Any]] = {}
        for name, t in tensors.items():
            dtype = str(t.dtype).removeprefix("torch.")
            layout[name] = [dtype, list(t.shape)]
            groups.setdefault(f"{name}|{dtype}", []).append(_dense(t))
        metas.append({**meta, "tensors": layout})
    flat = {
        key: torch.cat(parts) if len(parts) > 1 else parts[0].clone()
        for key, parts in groups.items()
    }
    meta_bytes = json.dumps(
        {"version": _SER_VERSION, "items": metas}, ensure_ascii=False, allow_nan=True
    ).encode("utf-8")
    tensor_bytes = _st_save(flat)
    return (
        _SER_MAGIC
        + _HEADER.pack(_SER_VERSION, len(meta_bytes), len(tensor_bytes))
        + meta_bytes
        + tensor_bytes
    )


def unpack(data: bytes) -> list[Item]:
    """Decode a payload of :func:`pack` (or of version 1) into ``(metadata, tensors)`` items.

    The tensors of one ``(name, dtype)`` group are views of one writable copy of that group
    (the payload's own bytes are read-only).
    """
    data = bytes(data)
    head = len(_SER_MAGIC) + _HEADER.size
    if len(data) < head or not data.startswith(_SER_MAGIC):
        raise ValueError("not a Trinity experience payload (bad magic)")
    version, meta_len, tensor_len = _HEADER.unpack(data[len(_SER_MAGIC) : head])
    if version not in _READABLE_VERSIONS:
        raise ValueError(
            f"unsupported experience payload version {version}, expected one of "
            f"{list(_READABLE_VERSIONS)}"
        )
    if head + meta_len + tensor_len != len(data):
        raise ValueError(
            f"corrupt experience payload: header announces {head + meta_len + tensor_len} "
            f"bytes, got {len(data)}"
        )
    meta = json.loads(data[head : head + meta_len].decode("utf-8"))
    flat = _st_load(data[head + meta_len :])
    if version == 1:
        by_item: dict[str, dict[str, Tensor]] = {}
        for key, t in flat.items():
            index, _, name = key.partition(":")
            by_item.setdefault(index, {})[name] = t
        return [(item, by_item.get(str(i), {})) for i, item in enumerate(meta["items"])]
    try:
        return _cut(meta["items"], flat)
    except (KeyError, TypeError, ValueError, RuntimeError, StopIteration) as exc:
        raise ValueError(
            f"corrupt experience payload: its tensor layout does not match ({exc})"
        ) from exc


def _cut(metas: list[dict[str, Any]], flat: dict[str, Tensor]) -> list[Item]:
    """Cut each item's tensors out of the packed groups: one split per ``(name, dtype)``
    group; every tensor is a view of its group's copy."""
    layouts = [item.pop("tensors") for item in metas]
    sizes: dict[str, list[int]] = {key: [] for key in flat}
    for layout in layouts:
        for name, (dtype, shape) in layout.items():
            sizes[f"{name}|{dtype}"].append(math.prod(shape))
    pieces = {key: iter(flat[key].clone().split(sizes[key])) for key in flat}
    out: list[Item] = []
    for item, layout in zip(metas, layouts, strict=True):
        tensors = {
            name: next(pieces[f"{name}|{dtype}"]).view(shape)
            for name, (dtype, shape) in layout.items()
        }
        out.append((item, tensors))
    return out
