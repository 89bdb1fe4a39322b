"""Package names that resolve on first use (PEP 562), for packages whose imports are heavy.

A package lists where each public name lives and gets a module ``__getattr__`` that imports it
when first read (then keeps it in the package's namespace) and a ``__dir__`` that lists it
before that: ``import trinity.buffer`` in a Ray actor that needs one storage then imports
neither torch nor every other storage. The table is also the package's ``__all__``, so the
public names cannot drift from where they live.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any, Optional

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, str], provider: Optional[str] = None
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for module ``package``, whose name ``n`` lives in module
    ``exports[n]``; assign them at the package's module level.

    Also sets the package's ``__all__`` to the table's names, in the table's order (call it
    while the package is being imported, i.e. at its module level): a name is public exactly
    when the table says where it lives, and a hand-written list beside the table cannot drift.

    ``provider`` names the distribution that ships the modules of the table when that is not
    this one (core's re-exports of a sibling's names, which core must not import): reading a
    name without it installed raises an ``ImportError`` that says what to install.
    """
    module = sys.modules.get(package)
    if module is not None:
        module.__all__ = list(exports)  # type: ignore[attr-defined]

    def __getattr__(name: str) -> Any:
        where = exports.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(_import(where, f"{package}.{name}", provider), name)
        setattr(sys.modules[package], name, value)  # resolved once
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__


def _import(module: str, wanted: str, provider: Optional[str]) -> Any:
    """Import ``module``; when it belongs to the absent distribution ``provider``, say so."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if provider is None or not (module == missing or module.startswith(missing + ".")):
            raise
        raise ImportError(
            f"{wanted} is provided by the {provider} package, which is not installed "
            f"(pip install {provider})",
            name=module,
        ) from exc
