"""Build a registered component from its config arguments, the one way every package does it.

trinity-algorithms builds its components from ``algorithm.*_args`` with this function
(re-exported as ``trinity.algorithm.utils.build_component``), and the plugin contract kit
(``trinity.testing.build_like_the_framework``) builds the component under test with it too, so a
plugin is tested exactly as the framework will build it. It lives in core because the kit may
not import trinity-algorithms.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, Optional, TypeVar

__all__ = ["build_component"]

T = TypeVar("T")


def build_component(cls: type[T], args: Optional[Mapping[str, Any]] = None) -> T:
    """Instantiate a component from ``cls.default_args()`` overridden by ``args``.

    Arguments the class's ``__init__`` does not accept (and that no ``**kwargs`` takes) are set
    as attributes after construction, so common settings such as ``loss_agg_mode`` reach a
    class written like the guide's OPMD loss, whose ``__init__`` only takes ``tau``.

    Raises:
        TypeError: the constructor refused the arguments (the message names the class and
            the arguments it was given).
    """
    merged: dict[str, Any] = {}
    default_args = getattr(cls, "default_args", None)
    if callable(default_args):
        merged.update(default_args() or {})
    merged.update(args or {})
    params = inspect.signature(cls.__init__).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        accepted, extra = merged, {}
    else:
        accepted = {k: v for k, v in merged.items() if k in params}
        extra = {k: v for k, v in merged.items() if k not in params}
    try:
        obj = cls(**accepted)
    except TypeError as exc:
        raise TypeError(f"Cannot build {cls.__name__} with arguments {accepted}: {exc}") from exc
    for key, value in extra.items():
        setattr(obj, key, value)
    return obj
