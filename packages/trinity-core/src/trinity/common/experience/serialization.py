"""Helpers of the experience wire format (no pickle: JSON + safetensors).

This module owns the payload header constants and the conversions that make an experience
safe to encode: :func:`_jsonable` (plain JSON or a ``TypeError`` naming the field),
:func:`_detached_owned` (tensors safetensors accepts) and :func:`_dtype_from_name`.
:meth:`trinity.common.experience.core.Experience.serialize_many` is the one caller.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor

_SER_MAGIC = b"TRXJ"
_SER_VERSION = 1


def _detached_owned(t: Tensor, seen: set[int]) -> Tensor:
    """A contiguous CPU tensor that owns its whole storage (safetensors refuses views
    and tensors that share memory)."""
    t = t.detach().cpu().contiguous()
    storage = t.untyped_storage()
    ptr = storage.data_ptr()
    if (ptr in seen and t.numel() > 0) or storage.nbytes() != t.numel() * t.element_size():
        t = t.clone()
        ptr = t.untyped_storage().data_ptr()
    if t.numel() > 0:
        seen.add(ptr)
    return t


def _dtype_from_name(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown torch dtype {name!r} in payload")
    return dtype


def _jsonable(value: Any, path: str) -> Any:
    """Return ``value`` as plain JSON types, or raise ``TypeError`` naming ``path``.

    Numpy scalars become Python scalars and tuples become lists (the only lossy
    conversions); dict keys must be strings because JSON would silently stringify them.
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return value  # Python's json round-trips NaN/Infinity
        return float(value)
    if isinstance(value, np.generic) and isinstance(value.item(), (bool, int, float, str)):
        return value.item()
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(
                    f"{path} has a non-string key {k!r} ({type(k).__name__}); "
                    "only string keys can be serialized"
                )
            out[k] = _jsonable(v, f"{path}[{k!r}]")
        return out
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, f"{path}[{j}]") for j, v in enumerate(value)]
    raise TypeError(
        f"{path} holds a {type(value).__name__}, which cannot be serialized as JSON "
        "(experiences are serialized without pickle; store tensors in tensor fields and "
        "keep info/metrics/messages to str, int, float, bool, None, list and dict)"
    )
