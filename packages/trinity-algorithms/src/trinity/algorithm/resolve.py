"""Turn the ``algorithm`` section of a config into one complete, validated recipe.

``AlgorithmConfig`` leaves component names unset (``None``) to mean "the algorithm type's
default", and its ``*_args`` hold only what the user wrote. :func:`resolve_algorithm` fills in
the rest, in this order (later wins):

1. :data:`~trinity.algorithm.algorithm.GLOBAL_DEFAULT_CONFIG` (what every type falls back to);
2. the type's :meth:`~trinity.algorithm.algorithm.AlgorithmType.default_config`;
3. what the user set (``model_fields_set``: a value equal to a default still counts as set).

Each component's arguments are merged the same way: the component class's ``default_args()``,
then the type's default ``<field>_args`` (only while the component is the type's default one:
DAPO's clip arguments are for its PPO loss, not for a loss the user swapped in), then the
user's ``<field>_args``. So the guide's Step 3 YAML (``repeat_times: 8``,
``advantage_fn_args: {opmd_baseline: logavgexp, tau: 0.99}``, ``policy_loss_fn_args:
{tau: 0.99}``) changes exactly those values of the OPMD recipe and nothing else.

``loss_agg_mode`` follows Trinity-RFT: a top-level ``algorithm.loss_agg_mode`` the user sets
overrides the policy loss's own; otherwise the policy loss arguments decide.

Every name is looked up in its registry while resolving, so a typo fails here — naming the
config field and listing the known names — rather than deep inside a training run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Union

from trinity.algorithm.algorithm import (
    ALGORITHM_TYPE,
    COMPONENT_FIELDS,
    GLOBAL_DEFAULT_CONFIG,
    AlgorithmType,
)
from trinity.algorithm.utils import build_component
from trinity.common.config import (
    AlgorithmConfig,
    Config,
    ConfigError,
    ConfigIssue,
    check_component_args,
)
from trinity.utils.log import get_logger
from trinity.utils.registry import Registry, UnknownModuleError

if TYPE_CHECKING:
    from trinity.algorithm.sample_strategy import SampleStrategy
    from trinity.common.protocols import ExperienceReader

__all__ = [
    "apply_algorithm_defaults",
    "check_algorithm_args",
    "ResolvedAlgorithm",
    "UnknownComponentError",
    "component_registry",
    "resolve_algorithm",
]

logger = get_logger(__name__)


class UnknownComponentError(UnknownModuleError):
    """An unknown name in the ``algorithm`` section; the message starts with the field.

    Still an :class:`~trinity.utils.registry.UnknownModuleError` (hence ``KeyError`` and
    ``ValueError``), with ``field`` (e.g. ``"algorithm.policy_loss_fn"``) added.
    """

    def __init__(self, field: str, error: UnknownModuleError) -> None:
        super().__init__(error.registry, error.name, error.known)
        self.field = field

    def __str__(self) -> str:
        return f"{self.field}: {super().__str__()}"


def component_registry(field_name: str) -> Registry:
    """The registry of an ``algorithm`` component field (``kl_penalty_fn`` and ``kl_loss_fn``
    share ``KL_FN``).

    Imported on demand: each import also registers that family's built-ins, and resolving
    a config is the first moment they are needed.
    """
    if field_name == "sample_strategy":
        from trinity.algorithm.sample_strategy import SAMPLE_STRATEGY

        return SAMPLE_STRATEGY
    if field_name == "advantage_fn":
        from trinity.algorithm.advantage_fn import ADVANTAGE_FN

        return ADVANTAGE_FN
    if field_name == "policy_loss_fn":
        from trinity.algorithm.policy_loss_fn import POLICY_LOSS_FN

        return POLICY_LOSS_FN
    if field_name in ("kl_penalty_fn", "kl_loss_fn"):
        from trinity.algorithm.kl_fn import KL_FN

        return KL_FN
    if field_name == "entropy_loss_fn":
        from trinity.algorithm.entropy_loss_fn import ENTROPY_LOSS_FN

        return ENTROPY_LOSS_FN
    raise ValueError(f"{field_name!r} is not an algorithm component field {COMPONENT_FIELDS}")


def _lookup(registry: Registry, name: str, config_field: str) -> Any:
    try:
        return registry[name]
    except UnknownModuleError as exc:
        raise UnknownComponentError(config_field, exc) from None


@dataclass
class ResolvedAlgorithm:
    """The complete recipe of one run: every component name, class and argument.

    Fields mirror ``AlgorithmConfig`` with nothing left ``None``; ``algorithm`` is the
    :class:`AlgorithmType` subclass and ``classes`` maps each component field to its class.
    ``warnings`` lists adjustments made while resolving (also logged).
    """

    algorithm_type: str
    algorithm: type[AlgorithmType]
    repeat_times: int
    sample_strategy: str
    advantage_fn: str
    policy_loss_fn: str
    kl_penalty_fn: str
    kl_loss_fn: str
    entropy_loss_fn: str
    loss_agg_mode: str
    sample_strategy_args: dict[str, Any] = field(default_factory=dict)
    advantage_fn_args: dict[str, Any] = field(default_factory=dict)
    policy_loss_fn_args: dict[str, Any] = field(default_factory=dict)
    kl_penalty_fn_args: dict[str, Any] = field(default_factory=dict)
    kl_loss_fn_args: dict[str, Any] = field(default_factory=dict)
    entropy_loss_fn_args: dict[str, Any] = field(default_factory=dict)
    classes: dict[str, type] = field(default_factory=dict)
    user_set: frozenset[str] = frozenset()
    warnings: tuple[str, ...] = ()

    # ---- the algorithm type's flags, for callers that hold only the resolved recipe
    @property
    def use_critic(self) -> bool:
        return bool(self.algorithm.use_critic)

    @property
    def use_reference(self) -> bool:
        return bool(self.algorithm.use_reference)

    @property
    def compute_advantage_in_trainer(self) -> bool:
        return bool(self.algorithm.compute_advantage_in_trainer)

    @property
    def can_balance_batch(self) -> bool:
        return bool(self.algorithm.can_balance_batch)

    @property
    def schema(self) -> str:
        return self.algorithm.schema_name()

    # ---- building
    def args(self, field_name: str) -> dict[str, Any]:
        """A copy of the resolved arguments of ``field_name``."""
        return dict(getattr(self, f"{field_name}_args"))

    def build(self, field_name: str) -> Any:
        """Instantiate the component of ``field_name`` (not ``sample_strategy``, which needs
        readers: see :meth:`build_sample_strategy`)."""
        if field_name == "sample_strategy":
            raise ValueError("use build_sample_strategy(readers, ...) for the sample strategy")
        return build_component(self.classes[field_name], self.args(field_name))

    def build_advantage_fn(self) -> Any:
        return self.build("advantage_fn")

    def build_policy_loss_fn(self) -> Any:
        return self.build("policy_loss_fn")

    def build_kl_penalty_fn(self) -> Any:
        return self.build("kl_penalty_fn")

    def build_kl_loss_fn(self) -> Any:
        return self.build("kl_loss_fn")

    def build_entropy_loss_fn(self) -> Any:
        return self.build("entropy_loss_fn")

    def build_components(self) -> dict[str, Any]:
        """Every component but the sample strategy, keyed by config field."""
        return {f: self.build(f) for f in COMPONENT_FIELDS if f != "sample_strategy"}

    def build_sample_strategy(
        self, readers: Mapping[str, ExperienceReader], **context: Any
    ) -> SampleStrategy:
        """The sample strategy over ``readers``; ``context`` adds run settings such as
        ``train_batch_size``."""
        from trinity.algorithm.sample_strategy import build_sample_strategy

        return build_sample_strategy(
            self.classes["sample_strategy"], readers, self.args("sample_strategy"), **context
        )

    # ---- export
    def to_dict(self) -> dict[str, Any]:
        """The resolved ``algorithm`` values, as ``AlgorithmConfig`` field names."""
        out: dict[str, Any] = {
            "algorithm_type": self.algorithm_type,
            "repeat_times": self.repeat_times,
            "loss_agg_mode": self.loss_agg_mode,
        }
        for f in COMPONENT_FIELDS:
            out[f] = getattr(self, f)
            out[f"{f}_args"] = self.args(f)
        return out

    def apply_to(self, config: AlgorithmConfig) -> AlgorithmConfig:
        """A copy of ``config`` with every resolved value filled in (nothing left ``None``)."""
        return config.model_copy(update=self.to_dict())


def _as_algorithm_config(
    source: Union[AlgorithmConfig, Config, Mapping[str, Any]],
) -> AlgorithmConfig:
    if isinstance(source, AlgorithmConfig):
        return source
    algorithm = getattr(source, "algorithm", None)
    if isinstance(algorithm, AlgorithmConfig):  # a whole Config
        return algorithm
    if isinstance(source, Mapping):
        if "algorithm" in source and "algorithm_type" not in source:  # a whole config dict
            return _as_algorithm_config(source["algorithm"])
        return AlgorithmConfig.model_validate(dict(source))
    raise TypeError(
        f"resolve_algorithm needs an AlgorithmConfig, a Config or a mapping, got "
        f"{type(source).__name__}"
    )


def resolve_algorithm(
    algorithm_config: Union[AlgorithmConfig, Config, Mapping[str, Any]],
) -> ResolvedAlgorithm:
    """Resolve ``algorithm_config`` (an ``AlgorithmConfig``, a whole ``Config``, or a plain
    mapping of the ``algorithm`` section or of a whole config) into a
    :class:`ResolvedAlgorithm`.

    Resolution needs only the ``algorithm`` section; the run-level checks a type makes on the
    whole config (``AlgorithmType.check_config``, e.g. SFT/DPO refuse ``mode: both``) are a
    separate call, made by the launcher on the full ``Config``.

    Raises:
        UnknownComponentError: an unknown algorithm type or component name; the message
            names the field (``algorithm.policy_loss_fn``) and lists the known names.
        ConfigError: component arguments that the component does not declare, of the wrong
            type or out of range (every such problem, each located at its key).
    """
    cfg = _as_algorithm_config(algorithm_config)
    user_set = {f for f in cfg.model_fields_set if getattr(cfg, f, None) is not None}
    algo_cls: type[AlgorithmType] = _lookup(
        ALGORITHM_TYPE, cfg.algorithm_type, "algorithm.algorithm_type"
    )
    defaults = dict(algo_cls.default_config() or {})
    known_keys = set(COMPONENT_FIELDS) | {f"{f}_args" for f in COMPONENT_FIELDS}
    known_keys |= set(AlgorithmType.EXTRA_CONFIG_KEYS)
    ignored = sorted(set(defaults) - known_keys)
    if ignored:  # e.g. Trinity-RFT's long-gone "add_strategy" in an old plugin
        logger.debug("%s.default_config(): ignoring keys %s", algo_cls.__name__, ignored)

    def default(key: str) -> Any:
        return defaults.get(key, GLOBAL_DEFAULT_CONFIG.get(key))

    # 1. names and repeat_times: user > type default > global default
    values: dict[str, Any] = {
        "repeat_times": cfg.repeat_times if "repeat_times" in user_set else default("repeat_times")
    }
    for f in COMPONENT_FIELDS:
        values[f] = getattr(cfg, f) if f in user_set else default(f)

    # 2. rules the type imposes on top (e.g. DPO keeps a KL loss)
    warnings = list(algo_cls.post_resolve(values, user_set) or [])

    # 3. classes and arguments: component default_args < type default args < user args
    classes: dict[str, type] = {}
    for f in COMPONENT_FIELDS:
        cls = _lookup(component_registry(f), values[f], f"algorithm.{f}")
        classes[f] = cls
        args: dict[str, Any] = {}
        default_args = getattr(cls, "default_args", None)
        if callable(default_args):
            args.update(default_args() or {})
        if values[f] == default(f):
            args.update(defaults.get(f"{f}_args") or {})
        if f"{f}_args" in user_set:
            args.update(getattr(cfg, f"{f}_args") or {})
        values[f"{f}_args"] = args

    # 4. loss_agg_mode: an explicit top-level setting wins, else the policy loss's own
    loss_agg_mode = _loss_agg_mode(cfg, user_set, values["policy_loss_fn_args"], warnings)
    if loss_agg_mode is None:
        loss_agg_mode = default("loss_agg_mode")

    # 5. a user-chosen advantage computed in another place than the type's
    placement = _advantage_placement_warning(cfg, user_set, algo_cls, classes["advantage_fn"])
    if placement:
        warnings.append(placement)

    # 6. every component's arguments against what it declares (its Args / typed __init__)
    issues, arg_warnings = check_algorithm_args(classes, values)
    issues += _fill_stale_policy(values["sample_strategy_args"], cfg.rollout_correction)
    if issues:
        raise ConfigError(issues)
    warnings += arg_warnings

    for message in warnings:
        logger.warning(message)

    return ResolvedAlgorithm(
        algorithm_type=cfg.algorithm_type,
        algorithm=algo_cls,
        repeat_times=int(values["repeat_times"]),
        loss_agg_mode=str(loss_agg_mode),
        classes=classes,
        user_set=frozenset(user_set),
        warnings=tuple(warnings),
        **{f: values[f] for f in COMPONENT_FIELDS},
        **{f"{f}_args": values[f"{f}_args"] for f in COMPONENT_FIELDS},
    )


def _loss_agg_mode(
    cfg: AlgorithmConfig, user_set: set[str], policy_args: dict[str, Any], warnings: list[str]
) -> Optional[str]:
    """The loss aggregation: ``algorithm.loss_agg_mode`` when set (written into the policy
    loss's arguments; a different one given there too adds a warning), else the policy
    loss's own, else ``None`` (the type's or the global default applies)."""
    if "loss_agg_mode" not in user_set:
        return policy_args.get("loss_agg_mode") or None
    loss_agg_mode = cfg.loss_agg_mode
    own = policy_args.get("loss_agg_mode")
    if (
        "policy_loss_fn_args" in user_set
        and "loss_agg_mode" in (cfg.policy_loss_fn_args or {})
        and own != loss_agg_mode
    ):
        warnings.append(
            f"algorithm.loss_agg_mode {loss_agg_mode!r} overrides "
            f"algorithm.policy_loss_fn_args.loss_agg_mode {own!r}"
        )
    policy_args["loss_agg_mode"] = loss_agg_mode
    return loss_agg_mode


def _advantage_placement_warning(
    cfg: AlgorithmConfig, user_set: set[str], algo_cls: type[AlgorithmType], adv_cls: type
) -> Optional[str]:
    """A warning when a user-chosen advantage's placement (pipeline / trainer) differs from
    the type's: it may be computed twice or never. A type's own default pairing is its
    author's call (e.g. rloo's advantage works in either place), so it is not checked."""
    in_trainer = getattr(adv_cls, "compute_in_trainer", None)
    if (
        "advantage_fn" not in user_set
        or not callable(in_trainer)
        or bool(in_trainer()) == algo_cls.compute_advantage_in_trainer
    ):
        return None
    return (
        f"advantage_fn {cfg.advantage_fn!r} computes advantages "
        f"{'in the trainer' if in_trainer() else 'in the experience pipeline'}, but "
        f"algorithm_type {cfg.algorithm_type!r} has compute_advantage_in_trainer="
        f"{algo_cls.compute_advantage_in_trainer}"
    )


def _corrects(rollout_correction: Any) -> bool:
    """Whether ``algorithm.rollout_correction`` acts on a stale sample: IS weights, rejection,
    or bypass mode (the PPO ratio taken against the rollout's own log-probs)."""
    if rollout_correction is None:
        return False
    get = (
        rollout_correction.get
        if isinstance(rollout_correction, Mapping)
        else lambda key: getattr(rollout_correction, key, None)
    )
    return bool(get("rollout_is") or get("rollout_rs") or get("bypass_mode"))


def _fill_stale_policy(args: dict[str, Any], rollout_correction: Any) -> list[ConfigIssue]:
    """``sample_strategy_args.stale`` of a strategy that declares it (``staleness_control``):
    ``correct`` when the run corrects the rollout/training mismatch (stale samples are kept
    and reweighted), else ``drop``; ``correct`` without a correction is refused (stale samples
    would be trained as if on-policy)."""
    if "stale" not in args:
        return []
    corrects = _corrects(rollout_correction)
    if args["stale"] is None:
        args["stale"] = "correct" if corrects else "drop"
    elif args["stale"] == "correct" and not corrects:
        return [
            ConfigIssue(
                "algorithm.sample_strategy_args.stale",
                "'correct' keeps samples beyond max_staleness for algorithm.rollout_correction "
                "to reweight, but rollout_correction sets no rollout_is, rollout_rs or "
                "bypass_mode; set one, or use stale: drop",
                value="correct",
            )
        ]
    return []


def check_algorithm_args(
    classes: Mapping[str, type], values: Mapping[str, Any]
) -> tuple[list[ConfigIssue], list[str]]:
    """Check each component's merged ``<field>_args`` against its declared arguments.

    ``classes`` maps component fields to classes, ``values`` holds the component names and
    merged ``<field>_args`` (as :func:`resolve_algorithm` builds them). Returns every issue
    (located at ``algorithm.<field>_args.<key>``: unknown keys with the closest valid name,
    strict types, ranges) and a warning per undeclared component given arguments.
    """
    issues: list[ConfigIssue] = []
    warnings: list[str] = []
    for f in COMPONENT_FIELDS:
        cls = classes.get(f)
        if cls is None:
            continue
        found, warned = check_component_args(
            cls,
            values.get(f"{f}_args") or {},
            ("algorithm", f"{f}_args"),
            label=f"{f} {values.get(f)!r}",
        )
        issues += found
        warnings += warned
    return issues, warnings


def apply_algorithm_defaults(config: Config) -> Config:
    """A new :class:`Config` whose ``algorithm`` section holds the resolved type defaults.

    The config is re-validated from what the user wrote (``exclude_unset``) plus the resolved
    algorithm, so values the schema derives from the algorithm — ``buffer.train_batch_size``
    (``batch_size × repeat_times``), the task sets' ``repeat_times`` — follow the algorithm type's
    defaults (GRPO's ``repeat_times: 2``) instead of the schema's generic ones.

    Raises:
        UnknownComponentError: a component name in the config is not registered.
        ConfigError: the completed config is invalid.
    """
    resolved = resolve_algorithm(config)
    data = config.model_dump(exclude_unset=True)
    data["algorithm"] = {**data.get("algorithm", {}), **resolved.to_dict()}
    return Config.from_dict(data)
