"""Workflow arguments the environment workflows read under Trinity-RFT 0.6's names too.

0.6's environment workflows take their turn limit as ``workflow_args.max_env_steps``; ours
call it ``max_steps`` (see :mod:`trinity.workflows.envs.base`). A 0.6 config must keep its
limit rather than silently fall back to a default, so every adapter that 0.6 also ships reads
both through :func:`read_max_steps`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trinity.workflows.envs.base import _positive_int

__all__ = ["read_max_steps"]


def read_max_steps(workflow_args: Mapping[str, Any], current: int, who: str) -> int:
    """The turn limit: ``max_steps`` when given, else 0.6's ``max_env_steps``, else ``current``.

    ``current`` is what :class:`~trinity.workflows.envs.base.TextEnvWorkflow` already read
    (``max_steps`` or the adapter's default), so only the 0.6 spelling is looked at here.
    """
    if workflow_args.get("max_steps") is not None:
        return current
    value = workflow_args.get("max_env_steps")
    if value is None:
        return current
    return _positive_int(value, "max_env_steps", who)
