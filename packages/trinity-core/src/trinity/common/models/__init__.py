"""Rollout models: the :class:`ModelWrapper` contract workflows call, and helpers.

Engines (vLLM, HF transformers, external OpenAI servers) live in other packages and
subclass :class:`ModelWrapper`; :mod:`trinity.common.models.testing` provides the
deterministic in-process :class:`~trinity.common.models.testing.FakeModelWrapper` for tests.
"""

import importlib
from typing import Any

from trinity.common.models.calls import call_model, prefer_sync_model_calls, resolve_awaitable
from trinity.common.models.model import (
    GENERATION_KWARGS,
    ModelWrapper,
    experiences_from_chat_completion,
    run_sync,
)
from trinity.common.models.utils import ChatTemplateError, tokenize_and_mask_messages


def create_explorer_models(config: Any) -> tuple[list[Any], list[list[Any]]]:
    """Trinity-RFT 0.6's factory of the explorer's engines: ``(rollout engine actors, one list of
    engine actors per auxiliary model)`` for ``config`` (checked), built by trinity-launcher
    (:mod:`trinity.launcher.engines`; core imports no sibling, so it is looked up at call
    time). The actors have this implementation's engine API (``start``, ``ready``, ``chat``,
    ...), not vLLM's actor methods of Trinity-RFT's (``prepare``, ...).

    Raises:
        ImportError: trinity-launcher is not installed.
    """
    try:
        engines = importlib.import_module("trinity.launcher.engines")
    except ModuleNotFoundError as exc:
        raise ImportError(
            "create_explorer_models builds engines with trinity-launcher: pip install "
            "trinity-launcher"
        ) from exc
    return engines.create_rollout_engines(config), engines.create_auxiliary_engines(config)


def get_debug_explorer_model(config: Any) -> tuple[Any, list[Any]]:
    """Trinity-RFT 0.5's handles to the engines ``trinity debug --module inference_model``
    started in another process (named Ray actors of its debug namespace).

    Not available here: that command runs the engines in its own process, without Ray, and
    serves each model's OpenAI-compatible API on loopback, printing the addresses; a workflow
    under test reaches them with an OpenAI client (or ``trinity debug --module workflow`` runs
    the task with its own engines).

    Raises:
        NotImplementedError: always; the message says what to use instead.
    """
    raise NotImplementedError(
        "get_debug_explorer_model: `trinity debug --module inference_model` serves the models' "
        "OpenAI-compatible API on loopback (the addresses are printed) instead of leaving Ray "
        f"actors for {config.explorer.name!r}; connect an OpenAI client to them, or run "
        "`trinity debug --module workflow`"
    )


__all__ = [
    "GENERATION_KWARGS",
    "ChatTemplateError",
    "ModelWrapper",
    "call_model",
    "create_explorer_models",
    "experiences_from_chat_completion",
    "get_debug_explorer_model",
    "prefer_sync_model_calls",
    "resolve_awaitable",
    "run_sync",
    "tokenize_and_mask_messages",
]
