"""Rules for keys of Trinity-RFT configs that this release reads differently or cannot run.

Configs written for Trinity-RFT 0.6 (and the older examples still in its repository) must
either keep working -- a renamed key read under its new name, with a warning that names the new
key -- or be refused with a message that says the feature is "not supported yet" and names the
field. A key nothing in a run would read is never accepted silently.

* :func:`rule_trinity_rft_keys` runs on every validated config (schema level).
* :func:`rule_unsupported_engines` runs with the run-level checks: the schema accepts every
  built-in ``engine_type`` (so a Trinity-RFT config loads anywhere), a run needs an engine that
  serves it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trinity.common.engines import ENGINES

from ._trainer import DEPRECATED_MAX_TOKEN_KEY
from ._utils import _Checker

if TYPE_CHECKING:
    from ._core import Config

__all__ = ["rule_trinity_rft_keys", "rule_unsupported_engines"]

#: the training backends a run can use (``trainer.trainer_type``)
SUPPORTED_TRAINER_TYPES = ("verl",)
#: built-in engine types of Trinity-RFT that no engine of this release serves
UNSERVED_ENGINE_TYPES = ("tinker", "sglang")


def rule_trinity_rft_keys(c: _Checker, cfg: Config) -> None:
    """Deprecated trainer keys read under their new names; unsupported backends refused."""
    _rule_max_token_key(c, cfg)
    trainer = cfg.trainer
    if trainer.trainer_type not in SUPPORTED_TRAINER_TYPES:
        c.error(
            ("trainer", "trainer_type"),
            trainer.trainer_type,
            f"trainer type {trainer.trainer_type!r} is not supported yet; allowed: "
            + ", ".join(repr(t) for t in SUPPORTED_TRAINER_TYPES),
        )
    if trainer.trainer_strategy == "megatron":
        c.error(
            ("trainer", "trainer_strategy"),
            trainer.trainer_strategy,
            "Megatron training is not supported yet; allowed: 'fsdp' or 'fsdp2'",
        )
    for part in ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic"):
        strategy = _nested(trainer.trainer_config, part, "strategy")
        if isinstance(strategy, str) and strategy.strip().lower() == "megatron":
            c.error(
                ("trainer", "trainer_config", *part.split("."), "strategy"),
                strategy,
                "verl's Megatron strategy is not supported yet; allowed: 'fsdp' or 'fsdp2' "
                "(or leave it out)",
            )


def _rule_max_token_key(c: _Checker, cfg: Config) -> None:
    """``trainer.ppo_max_token_len_per_gpu`` is Trinity-RFT's older name of
    ``trainer.max_token_len_per_gpu``; the schema already copied a lone one across."""
    trainer = cfg.trainer
    old = trainer.ppo_max_token_len_per_gpu
    if old is None:
        return
    new = trainer.max_token_len_per_gpu
    if new != old:
        c.error(
            ("trainer", DEPRECATED_MAX_TOKEN_KEY),
            old,
            f"trainer.{DEPRECATED_MAX_TOKEN_KEY} ({old}) is the deprecated name of "
            f"trainer.max_token_len_per_gpu, which is set to {new}; allowed: only "
            "trainer.max_token_len_per_gpu, or both with the same value",
        )
        return
    c.warn(
        f"trainer.{DEPRECATED_MAX_TOKEN_KEY} is deprecated; it is read as "
        f"trainer.max_token_len_per_gpu ({new}): write that key instead."
    )


def _nested(data: Any, dotted: str, key: str) -> Any:
    """``data[a][b][key]`` for ``dotted == "a.b"``; ``None`` where any level is missing."""
    for part in (*dotted.split("."), key):
        if not isinstance(data, dict):
            return None
        data = data.get(part)
    return data


def rule_unsupported_engines(c: _Checker, cfg: Config) -> None:
    """Trinity-RFT's ``tinker`` / ``sglang`` engine types pass the schema (so its configs load
    anywhere), but no engine of this release serves them: a run naming one is refused before
    anything starts, naming the field -- unless a plugin registered an engine of that name."""
    if not cfg.run_mode.uses_rollout_engines:
        return
    explorer = cfg.explorer
    models = [(("explorer", "rollout_model"), explorer.rollout_model)]
    models += [
        (("explorer", "auxiliary_models", i), aux)
        for i, aux in enumerate(explorer.auxiliary_models)
    ]
    for loc, engine in models:
        if engine.engine_type not in UNSERVED_ENGINE_TYPES or engine.engine_type in ENGINES:
            continue
        served = [name for name in ENGINES.list() if name not in UNSERVED_ENGINE_TYPES]
        c.error(
            (*loc, "engine_type"),
            engine.engine_type,
            f"engine type {engine.engine_type!r} is not supported yet; allowed: "
            + (", ".join(repr(n) for n in served if n != "fake") or "none installed"),
        )
