"""The rollout-engine registry: the engine class behind ``engine_type``.

:data:`ENGINES` maps ``explorer.rollout_model.engine_type`` (and the auxiliary models') to an
engine class. The engines themselves (vLLM, HF ``transformers``, external OpenAI servers, and
the ``fake`` test double) ship with ``trinity-launcher`` and are advertised through the
``trinity.engines`` entry-point group, so nothing is imported until an engine is built (vLLM
only where a config names it) and this core module imports no sibling package. The launcher
builds engines with ``ENGINES[engine_type](settings)`` (``trinity.launcher.engines``).

A plugin adds an engine with ``@ENGINES.register_module("my_engine")`` on a subclass of
``trinity.launcher.engines.BaseRolloutEngine``. The config schema accepts
:data:`BUILTIN_ENGINE_TYPES` and every name registered here.
"""

from __future__ import annotations

from trinity.utils.registry import Registry

__all__ = ["BUILTIN_ENGINE_TYPES", "ENGINES"]

#: Engine class per ``engine_type`` (entry-point group ``trinity.engines``).
ENGINES: Registry[type] = Registry("engines")

#: The engine types Trinity-RFT configs name: they validate even where the launcher is not
#: installed. ``sglang`` and ``tinker`` pass the schema (so a Trinity-RFT config loads) but no
#: engine of this release serves them: the launcher refuses them before starting anything.
BUILTIN_ENGINE_TYPES: tuple[str, ...] = (
    "vllm",
    "vllm_async",
    "transformers",
    "sglang",
    "tinker",
    "external",
)
