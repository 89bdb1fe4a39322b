"""Package names that resolve on first use (PEP 562), for packages whose imports are heavy.

A package lists where each public name lives and gets a module ``__getattr__`` that imports it
when first read (then keeps it in the package's namespace) and a ``__dir__`` that lists it
before that: ``import trinity.buffer`` in a Ray actor that needs one storage then imports
neither torch nor every other storage.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for module ``package``, whose name ``n`` lives in module
    ``exports[n]``; assign them at the package's module level."""

    def __getattr__(name: str) -> Any:
        where = exports.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where), name)
        setattr(sys.modules[package], name, value)  # resolved once
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
