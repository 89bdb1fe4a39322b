"""The contract of an algorithm type, and the declarative base the built-in types share.

An :class:`AlgorithmType` bundles what the trainer and explorer need to know about an algorithm
besides its components: whether it trains a critic, needs a reference model, computes advantages
in the trainer, may have its batches re-ordered, and which data schema it trains on. Its
:meth:`~AlgorithmType.default_config` names the components and their default arguments.

The built-in types (:mod:`trinity.algorithm.algorithm`) are nearly the same recipe over and over
(GRPO-style advantages, the PPO loss, a ``k2`` KL loss ...), so they derive from
:class:`DeclarativeAlgorithmType`: a shared base recipe (:data:`RL_BASE_CONFIG` or
:data:`SUPERVISED_BASE_CONFIG`) plus a small dict of what differs (``config_overrides``),
merged by one ``default_config``. User types written the guide's way (override
``default_config``) need none of this and work exactly as before.

Everything here is re-exported by :mod:`trinity.algorithm.algorithm`, the documented path.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Final

from trinity.utils.registry import Registry

if TYPE_CHECKING:  # only for annotations: core's config is never needed to define a type
    from trinity.common.config import Config

__all__ = [
    "ALGORITHM_TYPE",
    "COMPONENT_FIELDS",
    "GLOBAL_DEFAULT_CONFIG",
    "RL_BASE_CONFIG",
    "SUPERVISED_BASE_CONFIG",
    "USE_GLOBAL_DEFAULT",
    "AlgorithmType",
    "DeclarativeAlgorithmType",
]

#: Registry of algorithm types (``algorithm.algorithm_type``); installed packages may add
#: more through the ``trinity.algorithm_type`` entry-point group.
ALGORITHM_TYPE: Registry[type[AlgorithmType]] = Registry("algorithm_type")

#: The component fields of ``algorithm``, each with an ``<field>_args`` dict.
COMPONENT_FIELDS: tuple[str, ...] = (
    "sample_strategy",
    "advantage_fn",
    "policy_loss_fn",
    "kl_penalty_fn",
    "kl_loss_fn",
    "entropy_loss_fn",
)

#: What every algorithm type falls back to for a field its ``default_config`` does not name
#: (Trinity-RFT's ``Config._check_algorithm`` defaults, with ``default`` sampling).
GLOBAL_DEFAULT_CONFIG: dict[str, Any] = {
    "repeat_times": 1,
    "sample_strategy": "default",
    "advantage_fn": "ppo",
    "policy_loss_fn": "ppo",
    "kl_penalty_fn": "none",
    "kl_loss_fn": "k2",
    "entropy_loss_fn": "default",
    "loss_agg_mode": "token-mean",
}

# Legacy ``schema`` values were buffer SQL model classes; map them to the schema names.
_LEGACY_SCHEMA_NAMES = {
    "ExperienceModel": "experience",
    "SFTDataModel": "sft",
    "DPODataModel": "dpo",
}


class AlgorithmType(ABC):
    """Describes one RL algorithm; subclass, set the flags, implement :meth:`default_config`.

    Class attributes (read by the trainer / explorer, never instantiated):

    * ``use_critic``: train a critic model (and compute values for the batch).
    * ``use_reference``: run a reference model (for KL penalties / losses).
    * ``compute_advantage_in_trainer``: the trainer calls the advantage function on the
      collated batch; when False the experience pipeline computes advantages before the
      buffer and the trainer skips the call (group-based methods need whole groups, which
      only the pipeline sees).
    * ``use_advantage``: the older guide's name for ``compute_advantage_in_trainer``; a
      subclass may set either and both read the same.
    * ``can_balance_batch``: the trainer may permute samples when balancing micro batches
      (False for DPO, whose chosen/rejected rows must stay adjacent).
    * ``schema``: the data format trained on: ``"experience"``, ``"sft"`` or ``"dpo"`` (a
      legacy schema class such as ``ExperienceModel`` is accepted, see :meth:`schema_name`).
    """

    use_critic: bool = False
    use_reference: bool = False
    compute_advantage_in_trainer: bool = False
    use_advantage: bool = False
    can_balance_batch: bool = True
    schema: Any = "experience"
    use_rollout: bool = True

    #: Keys ``default_config`` may return besides the component fields and their ``_args``.
    EXTRA_CONFIG_KEYS: ClassVar[tuple[str, ...]] = ("repeat_times", "loss_agg_mode")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Keep the older guide's ``use_advantage`` and the newer ``compute_advantage_in_trainer``
        # in step, whichever one the subclass sets (both set: each keeps its own value).
        super().__init_subclass__(**kwargs)
        own = cls.__dict__
        if "use_advantage" in own and "compute_advantage_in_trainer" not in own:
            cls.compute_advantage_in_trainer = bool(own["use_advantage"])
        elif "compute_advantage_in_trainer" in own and "use_advantage" not in own:
            cls.use_advantage = bool(own["compute_advantage_in_trainer"])

    @classmethod
    @abstractmethod
    def default_config(cls) -> dict[str, Any]:
        """Default ``algorithm`` settings of this type.

        Keys: component names (``sample_strategy``, ``advantage_fn``, ``policy_loss_fn``,
        ``kl_penalty_fn``, ``kl_loss_fn``, ``entropy_loss_fn``), optionally their
        ``<name>_args`` dicts, ``repeat_times`` and ``loss_agg_mode``. Fields left out take
        :data:`GLOBAL_DEFAULT_CONFIG`; fields the user sets override both.
        """

    @classmethod
    def name(cls) -> str:
        """The name this type is registered under (the class name if it is not registered)."""
        for registered_name, module in ALGORITHM_TYPE.modules.items():
            if module is cls:
                return registered_name
        return cls.__name__

    @classmethod
    def schema_name(cls) -> str:
        """``schema`` as a name (``experience`` / ``sft`` / ``dpo``), legacy classes included."""
        schema = cls.schema
        if isinstance(schema, str):
            return schema
        class_name = getattr(schema, "__name__", str(schema))
        return _LEGACY_SCHEMA_NAMES.get(class_name, class_name.lower())

    @classmethod
    def check_config(cls, config: Config) -> list[str]:
        """Run-level checks of a whole :class:`~trinity.common.config.Config` for this type.

        Called by the launcher before a run. Raises ``ValueError`` for a config this algorithm
        cannot run; may adjust settings the algorithm dictates (as Trinity-RFT does) and
        returns a warning per adjustment (also logged). The default accepts everything.
        """
        return []

    @classmethod
    def post_resolve(cls, values: dict[str, Any], user_set: set[str]) -> list[str]:
        """Adjust the resolved ``algorithm`` values in place; return a warning per change.

        ``values`` holds every resolved field (names, ``*_args``, ``repeat_times``,
        ``loss_agg_mode``); ``user_set`` the fields the user wrote. The hook exists for rules
        a default cannot express (DPO must keep a KL loss, whatever the user wrote).
        """
        return []

    @classmethod
    def flags(cls) -> dict[str, Any]:
        """The class attributes as a dict (for logs and the config generator)."""
        return {
            "use_critic": cls.use_critic,
            "use_reference": cls.use_reference,
            "compute_advantage_in_trainer": cls.compute_advantage_in_trainer,
            "can_balance_batch": cls.can_balance_batch,
            "schema": cls.schema_name(),
        }


class _UseGlobalDefault:
    """Type of :data:`USE_GLOBAL_DEFAULT` (one instance, readable in reprs)."""

    def __repr__(self) -> str:
        return "USE_GLOBAL_DEFAULT"


#: A ``config_overrides`` value meaning "do not name this field": the key is left out of
#: ``default_config()``, so the field falls back to :data:`GLOBAL_DEFAULT_CONFIG` (what a
#: hand-written ``default_config`` that omits the key does).
USE_GLOBAL_DEFAULT: Final = _UseGlobalDefault()

#: The recipe of the online RL types: GRPO advantages over 2 runs per task, the PPO clip loss,
#: a ``k2`` KL loss against the reference model, no KL reward penalty, the default entropy term.
RL_BASE_CONFIG: Mapping[str, Any] = {
    "repeat_times": 2,
    "advantage_fn": "grpo",
    "sample_strategy": "default",
    "policy_loss_fn": "ppo",
    "kl_penalty_fn": "none",
    "kl_loss_fn": "k2",
    "entropy_loss_fn": "default",
}

#: The recipe of the types that fit a supervised loss and use no advantages (SFT, RAFT; DPO
#: swaps the loss): no repeat count, advantage or KL penalty is named, no KL loss, no entropy.
SUPERVISED_BASE_CONFIG: Mapping[str, Any] = {
    "sample_strategy": "default",
    "policy_loss_fn": "sft",
    "kl_loss_fn": "none",
    "entropy_loss_fn": "none",
}


class DeclarativeAlgorithmType(AlgorithmType):
    """An :class:`AlgorithmType` whose ``default_config`` is declared as data.

    ``default_config()`` is ``config_base`` updated with the ``config_overrides`` of every class
    along the MRO (base classes first), without the keys whose value is
    :data:`USE_GLOBAL_DEFAULT`, returned as a fresh deep copy (callers may edit it). So a type
    states only how it differs from the recipe it builds on::

        class CISPOAlgorithm(DeclarativeAlgorithmType):
            use_reference = True
            config_overrides = {"policy_loss_fn": "cispo"}

    A subclass may still override :meth:`default_config` by hand, as any ``AlgorithmType``.
    Keys are checked when the class is defined, so a typo fails at import, not silently later.
    """

    #: The recipe the overrides apply to.
    config_base: ClassVar[Mapping[str, Any]] = RL_BASE_CONFIG
    #: What this class changes (values may be :data:`USE_GLOBAL_DEFAULT`).
    config_overrides: ClassVar[Mapping[str, Any]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        allowed = set(COMPONENT_FIELDS) | {f"{f}_args" for f in COMPONENT_FIELDS}
        allowed |= set(cls.EXTRA_CONFIG_KEYS)
        for attr in ("config_base", "config_overrides"):
            unknown = sorted(set(cls.__dict__.get(attr, {})) - allowed)
            if unknown:
                raise TypeError(
                    f"{cls.__name__}.{attr} has unknown keys {unknown}; allowed: {sorted(allowed)}"
                )

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        merged = dict(cls.config_base)
        for klass in reversed(cls.__mro__):
            merged.update(klass.__dict__.get("config_overrides", {}))
        return copy.deepcopy({k: v for k, v in merged.items() if v is not USE_GLOBAL_DEFAULT})
