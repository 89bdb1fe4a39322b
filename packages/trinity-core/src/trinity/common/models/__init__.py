"""Rollout models: the :class:`ModelWrapper` contract workflows call, and helpers.

Engines (vLLM, HF transformers, external OpenAI servers) live in other packages and
subclass :class:`ModelWrapper`; :mod:`trinity.common.models.testing` provides the
deterministic in-process :class:`~trinity.common.models.testing.FakeModelWrapper` for tests.
"""

from trinity.common.models.calls import call_model, prefer_sync_model_calls, resolve_awaitable
from trinity.common.models.model import (
    GENERATION_KWARGS,
    ModelWrapper,
    experiences_from_chat_completion,
    run_sync,
)
from trinity.common.models.utils import ChatTemplateError, tokenize_and_mask_messages

__all__ = [
    "GENERATION_KWARGS",
    "ChatTemplateError",
    "ModelWrapper",
    "call_model",
    "experiences_from_chat_completion",
    "prefer_sync_model_calls",
    "resolve_awaitable",
    "run_sync",
    "tokenize_and_mask_messages",
]
