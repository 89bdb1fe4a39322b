"""``algorithm.rollout_correction``: correcting the rollout/training policy mismatch.

The rollout engine (vLLM, often bf16, other kernels) and the trainer (FSDP) give the same token
slightly different probabilities, and an off-policy batch was sampled by older weights. The
section takes verl 0.9's keys, values and meaning (``verl.trainer.config.algorithm.
RolloutCorrectionConfig``; Trinity-RFT 0.6 passes the same mapping under the same name), so a
config written for either works here:

* ``rollout_is``: importance-sampling weights ``pi_train / pi_rollout`` per ``token`` or per
  ``sequence`` (the product over its tokens), or ``null`` (none; metrics only);
* ``rollout_is_threshold``: a number (or a number as a string) truncates the weights at it
  (TIS); a ``"lower_upper"`` string zeroes weights outside ``[lower, upper]`` (IcePop);
* ``rollout_is_batch_normalize``: rescale the weights to mean 1 over the batch;
* ``rollout_rs`` / ``rollout_rs_threshold``: rejection sampling, a comma-separated list of
  divergence filters (:data:`ROLLOUT_RS_OPTIONS`) with one threshold each (or one for all);
* ``bypass_mode``: ``false`` (decoupled: the trainer recomputes the old log-probs, three
  policies) or ``true`` (the rollout's log-probs are the old ones, two policies);
* ``loss_type`` (bypass mode): ``ppo_clip`` (the ratio to the rollout policy already is the IS
  correction) or ``reinforce`` (REINFORCE with explicit IS weights).

Defaults are those of verl's ``rollout_correction.yaml`` (what a verl run gets): no IS weights,
no rejection, decoupled mode. The factory class methods are verl's presets, by the same names.

This module lives in core because the config schema validates the section; the tensor math is
``trinity.algorithm.rollout_correction`` (trinity-algorithms), which reads the parsed bounds
from :attr:`RolloutCorrectionConfig.is_bounds` / :attr:`RolloutCorrectionConfig.rs_bounds`.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import Field, field_validator, model_validator

from ._base import _normalized, _Section
from ._errors import ConfigIssue, _CrossFieldErrors

__all__ = [
    "LOSS_TYPES",
    "PRESETS",
    "ROLLOUT_IS_LEVELS",
    "ROLLOUT_RS_OPTIONS",
    "RolloutCorrectionConfig",
    "parse_is_threshold",
    "parse_rs_options",
    "parse_rs_thresholds",
]

#: ``rollout_is`` values (``null`` disables the weights).
ROLLOUT_IS_LEVELS = ("token", "sequence")
#: ``rollout_rs`` options: ``token_*`` judge each token, ``seq_sum_*`` / ``seq_mean_*`` /
#: ``seq_max_*`` a sequence's sum / mean / max of the token statistic; ``k1 = -log r``
#: (bounded on both sides, as a ratio), ``k2 = (log r)^2 / 2``, ``k3 = r - 1 - log r`` (upper
#: bound only), with ``r = pi_train / pi_rollout``.
ROLLOUT_RS_OPTIONS = (
    "token_k1",
    "token_k2",
    "token_k3",
    "seq_sum_k1",
    "seq_sum_k2",
    "seq_sum_k3",
    "seq_mean_k1",
    "seq_mean_k2",
    "seq_mean_k3",
    "seq_max_k2",
    "seq_max_k3",
)
#: ``loss_type`` values (bypass mode).
LOSS_TYPES = ("ppo_clip", "reinforce")

_IS_FORMS = (
    "a positive number (TIS upper bound, e.g. 2.0) or a 'lower_upper' string "
    "(IcePop, e.g. '0.5_5.0')"
)


def _number(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{what}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"{what}: {text!r} is not a finite number")
    return value


def parse_is_threshold(spec: Union[float, str]) -> tuple[float, Optional[float]]:
    """``rollout_is_threshold`` as ``(upper, lower)``; ``lower`` is ``None`` for TIS.

    Accepts a number or a number-like string (TIS: truncate at ``upper``) and a ``"lower_upper"``
    string (IcePop: zero the weights outside ``[lower, upper]``), verl's forms.

    Raises:
        ValueError: anything else, a bound <= 0, or ``lower > upper``.
    """
    what = f"rollout_is_threshold must be {_IS_FORMS}"
    if isinstance(spec, bool) or not isinstance(spec, (int, float, str)):
        raise ValueError(f"{what}; got {type(spec).__name__} {spec!r}")
    lower: Optional[float] = None
    if isinstance(spec, str):
        text = spec.strip()
        if not text:
            raise ValueError(f"{what}; got an empty string")
        if "_" in text:
            low_text, high_text = text.split("_", 1)
            lower, upper = _number(low_text, what), _number(high_text, what)
        else:
            upper = _number(text, what)
    else:
        upper = float(spec)
        if not math.isfinite(upper):
            raise ValueError(f"{what}; got {spec!r}")
    if upper <= 0 or (lower is not None and lower <= 0):
        raise ValueError(f"{what}; bounds must be > 0, got {spec!r}")
    if lower is not None and lower > upper:
        raise ValueError(f"{what}; the lower bound exceeds the upper one in {spec!r}")
    return upper, lower


def parse_rs_options(spec: str) -> list[str]:
    """``rollout_rs`` as its list of options (order kept, duplicates dropped).

    Raises:
        ValueError: not a string, empty, or an unknown option (the message lists the options).
    """
    if not isinstance(spec, str):
        raise ValueError(
            f"rollout_rs must be a string of comma-separated options; got {type(spec).__name__} "
            f"{spec!r}; allowed options: {', '.join(ROLLOUT_RS_OPTIONS)}"
        )
    options: list[str] = []
    for part in spec.split(","):
        name = part.strip().lower()
        if not name:
            continue
        if name not in ROLLOUT_RS_OPTIONS:
            raise ValueError(
                f"unknown rollout_rs option {part.strip()!r}; allowed options: "
                f"{', '.join(ROLLOUT_RS_OPTIONS)} (several: comma-separated)"
            )
        if name not in options:
            options.append(name)
    if not options:
        raise ValueError(
            f"rollout_rs names no option; allowed options: {', '.join(ROLLOUT_RS_OPTIONS)}"
        )
    return options


def parse_rs_thresholds(
    options: list[str], spec: Union[float, str, None]
) -> dict[str, tuple[Optional[float], float]]:
    """``rollout_rs_threshold`` as ``{option: (lower, upper)}`` for ``options``.

    ``spec`` holds one threshold per option, comma-separated, or one shared by all. ``*_k1``
    options take ratio bounds ``"lower_upper"`` (a single number ``u`` means ``1/u_u``); the
    others a single upper bound on their divergence (``lower`` is ``None``). verl's rules.

    Raises:
        ValueError: no threshold, a count that is neither 1 nor ``len(options)``, a bound that is
            not a positive number, ``lower > upper``, or ``lower_upper`` for a k2/k3 option.
    """
    if spec is None:
        raise ValueError(
            f"rollout_rs_threshold is required with rollout_rs ({', '.join(options)}): one "
            "threshold per option, comma-separated, or one for all"
        )
    if isinstance(spec, bool) or not isinstance(spec, (int, float, str)):
        raise ValueError(
            f"rollout_rs_threshold must be a number or a string; got {type(spec).__name__} {spec!r}"
        )
    parts = [str(spec)] if not isinstance(spec, str) else spec.split(",")
    parts = [p.strip() for p in parts if p.strip()]
    if len(parts) not in (1, len(options)):
        raise ValueError(
            f"rollout_rs_threshold has {len(parts)} thresholds for {len(options)} rollout_rs "
            f"options ({', '.join(options)}); give one per option or one for all"
        )
    if len(parts) == 1:
        parts = parts * len(options)
    bounds: dict[str, tuple[Optional[float], float]] = {}
    for option, text in zip(options, parts, strict=True):
        what = f"rollout_rs_threshold for {option}"
        if option.endswith("k1"):
            if "_" in text:
                low_text, high_text = text.split("_", 1)
                lower, upper = _number(low_text, what), _number(high_text, what)
            else:
                upper = _number(text, what)
                lower = 1.0 / upper if upper > 0 else upper
            if lower <= 0 or upper <= 0:
                raise ValueError(f"{what} must be positive ratio bounds, got {text!r}")
            if lower > upper:
                raise ValueError(f"{what}: the lower bound exceeds the upper one in {text!r}")
            bounds[option] = (lower, upper)
        else:
            if "_" in text:
                raise ValueError(
                    f"{what} takes a single upper bound (k2/k3 divergences are >= 0), not "
                    f"'lower_upper' {text!r}"
                )
            upper = _number(text, what)
            if upper <= 0:
                raise ValueError(f"{what} must be > 0, got {text!r}")
            bounds[option] = (None, upper)
    return bounds


class RolloutCorrectionConfig(_Section):
    """``algorithm.rollout_correction`` (see the module docstring); ``null`` disables it."""

    rollout_is: Optional[Annotated[Literal["token", "sequence"], _normalized()]] = Field(
        None, description="IS weights per token or per sequence; null: none (metrics only)."
    )
    rollout_is_threshold: Union[float, str] = Field(
        2.0, description="TIS upper bound (number) or IcePop bounds ('lower_upper' string)."
    )
    rollout_is_batch_normalize: bool = Field(
        False, description="Rescale the IS weights to mean 1 over the batch."
    )
    rollout_rs: Optional[str] = Field(
        None, description="Rejection filters, comma-separated (token_k1, seq_mean_k3, ...)."
    )
    rollout_rs_threshold: Optional[Union[float, str]] = Field(
        None, description="One threshold per rollout_rs option ('lower_upper' for k1) or one."
    )
    bypass_mode: bool = Field(
        False, description="Use the rollout's log-probs as the old ones (no recomputation)."
    )
    loss_type: Annotated[Literal["ppo_clip", "reinforce"], _normalized()] = Field(
        "ppo_clip", description="Bypass mode's loss: ppo_clip or reinforce (explicit IS weights)."
    )

    @field_validator("rollout_is_threshold", mode="before")
    @classmethod
    def _check_is_threshold(cls, value: Any) -> Any:
        parse_is_threshold(value)
        return value

    @field_validator("rollout_rs", mode="before")
    @classmethod
    def _check_rs(cls, value: Any) -> Any:
        return None if value is None else ",".join(parse_rs_options(value))

    @field_validator("rollout_rs_threshold", mode="before")
    @classmethod
    def _check_rs_threshold_type(cls, value: Any) -> Any:
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, float, str))
        ):
            raise ValueError(
                "rollout_rs_threshold must be a number or a string ('lower_upper' for k1 "
                f"options, several comma-separated); got {type(value).__name__} {value!r}"
            )
        return value

    @model_validator(mode="after")
    def _check_rs_threshold(self) -> RolloutCorrectionConfig:
        if self.rollout_rs is not None:
            try:
                parse_rs_thresholds(self.rs_options, self.rollout_rs_threshold)
            except ValueError as exc:
                issue = ConfigIssue(
                    path="rollout_rs_threshold",
                    message=str(exc),
                    value=self.rollout_rs_threshold,
                    loc=("rollout_rs_threshold",),
                )
                raise _CrossFieldErrors([issue]) from None
        return self

    # ------------------------------------------------------------------ parsed values
    @property
    def is_bounds(self) -> tuple[float, Optional[float]]:
        """``(upper, lower)`` of the IS weights; ``lower`` is ``None`` for TIS."""
        return parse_is_threshold(self.rollout_is_threshold)

    @property
    def rs_options(self) -> list[str]:
        """The rejection filters, in order (empty without ``rollout_rs``)."""
        return [] if self.rollout_rs is None else parse_rs_options(self.rollout_rs)

    @property
    def rs_bounds(self) -> dict[str, tuple[Optional[float], float]]:
        """``{option: (lower, upper)}`` (see :func:`parse_rs_thresholds`)."""
        options = self.rs_options
        return parse_rs_thresholds(options, self.rollout_rs_threshold) if options else {}

    # ------------------------------------------------------------------ verl's presets
    @classmethod
    def decoupled_token_is(cls, threshold: float = 2.0) -> RolloutCorrectionConfig:
        """Token-TIS: per-token weights truncated at ``threshold``."""
        return cls(rollout_is="token", rollout_is_threshold=threshold)

    @classmethod
    def decoupled_seq_is(cls, threshold: float = 2.0) -> RolloutCorrectionConfig:
        """Seq-TIS: per-sequence weights truncated at ``threshold``."""
        return cls(rollout_is="sequence", rollout_is_threshold=threshold)

    @classmethod
    def decoupled_token_icepop(
        cls, threshold: float = 5.0, threshold_lower: float = 0.5
    ) -> RolloutCorrectionConfig:
        """Token IcePop: token weights outside ``[threshold_lower, threshold]`` become 0."""
        return cls(rollout_is="token", rollout_is_threshold=f"{threshold_lower}_{threshold}")

    @classmethod
    def decoupled_seq_is_rs(
        cls, is_threshold: float = 2.0, rs_threshold: Union[float, str] = "0.5_2.0"
    ) -> RolloutCorrectionConfig:
        """Seq-MIS: Seq-TIS plus rejection of sequences whose ratio leaves the RS bounds."""
        return cls(
            rollout_is="sequence",
            rollout_is_threshold=is_threshold,
            rollout_rs="seq_sum_k1",
            rollout_rs_threshold=rs_threshold,
        )

    @classmethod
    def decoupled_geo_rs(
        cls, rs_threshold: Union[float, str] = "0.999_1.001"
    ) -> RolloutCorrectionConfig:
        """Geo-RS: reject sequences whose geometric-mean ratio leaves the bounds."""
        return cls(rollout_rs="seq_mean_k1", rollout_rs_threshold=rs_threshold)

    @classmethod
    def decoupled_geo_rs_seq_tis(
        cls, is_threshold: float = 2.0, rs_threshold: Union[float, str] = "0.999_1.001"
    ) -> RolloutCorrectionConfig:
        """Geo-RS plus Seq-TIS."""
        return cls(
            rollout_is="sequence",
            rollout_is_threshold=is_threshold,
            rollout_rs="seq_mean_k1",
            rollout_rs_threshold=rs_threshold,
        )

    @classmethod
    def decoupled_geo_rs_token_tis(
        cls, is_threshold: float = 2.0, rs_threshold: Union[float, str] = "0.999_1.001"
    ) -> RolloutCorrectionConfig:
        """Geo-RS plus Token-TIS."""
        return cls(
            rollout_is="token",
            rollout_is_threshold=is_threshold,
            rollout_rs="seq_mean_k1",
            rollout_rs_threshold=rs_threshold,
        )

    @classmethod
    def decoupled_k3_rs(cls, rs_threshold: float = 0.01) -> RolloutCorrectionConfig:
        """K3-RS: reject sequences whose mean K3 divergence exceeds ``rs_threshold``."""
        return cls(rollout_rs="seq_mean_k3", rollout_rs_threshold=rs_threshold)

    @classmethod
    def decoupled_k3_rs_seq_tis(
        cls, is_threshold: float = 2.0, rs_threshold: float = 0.01
    ) -> RolloutCorrectionConfig:
        """K3-RS plus Seq-TIS."""
        return cls(
            rollout_is="sequence",
            rollout_is_threshold=is_threshold,
            rollout_rs="seq_mean_k3",
            rollout_rs_threshold=rs_threshold,
        )

    @classmethod
    def decoupled_k3_rs_token_tis(
        cls, is_threshold: float = 2.0, rs_threshold: float = 0.01
    ) -> RolloutCorrectionConfig:
        """K3-RS plus Token-TIS."""
        return cls(
            rollout_is="token",
            rollout_is_threshold=is_threshold,
            rollout_rs="seq_mean_k3",
            rollout_rs_threshold=rs_threshold,
        )

    @classmethod
    def bypass_ppo_clip(cls) -> RolloutCorrectionConfig:
        """Bypass mode, PPO-clip against the rollout policy (no extra weights)."""
        return cls(bypass_mode=True, loss_type="ppo_clip")

    @classmethod
    def bypass_ppo_clip_geo_rs(
        cls, rs_threshold: Union[float, str] = "0.999_1.001"
    ) -> RolloutCorrectionConfig:
        """Bypass PPO-clip plus Geo-RS."""
        return cls(
            rollout_rs="seq_mean_k1",
            rollout_rs_threshold=rs_threshold,
            bypass_mode=True,
            loss_type="ppo_clip",
        )

    @classmethod
    def bypass_ppo_clip_k3_rs(cls, rs_threshold: float = 0.01) -> RolloutCorrectionConfig:
        """Bypass PPO-clip plus K3-RS."""
        return cls(
            rollout_rs="seq_mean_k3",
            rollout_rs_threshold=rs_threshold,
            bypass_mode=True,
            loss_type="ppo_clip",
        )

    @classmethod
    def bypass_pg_is(cls, threshold: float = 2.0) -> RolloutCorrectionConfig:
        """Bypass REINFORCE with Seq-TIS weights."""
        return cls(
            rollout_is="sequence",
            rollout_is_threshold=threshold,
            bypass_mode=True,
            loss_type="reinforce",
        )

    @classmethod
    def bypass_pg_token_icepop(
        cls, threshold: float = 5.0, threshold_lower: float = 0.5
    ) -> RolloutCorrectionConfig:
        """Bypass REINFORCE with token IcePop weights."""
        return cls(
            rollout_is="token",
            rollout_is_threshold=f"{threshold_lower}_{threshold}",
            bypass_mode=True,
            loss_type="reinforce",
        )

    @classmethod
    def bypass_pg_geo_rs(
        cls, rs_threshold: Union[float, str] = "0.999_1.001"
    ) -> RolloutCorrectionConfig:
        """Bypass REINFORCE plus Geo-RS (no IS weights)."""
        return cls(
            rollout_rs="seq_mean_k1",
            rollout_rs_threshold=rs_threshold,
            bypass_mode=True,
            loss_type="reinforce",
        )

    @classmethod
    def bypass_pg_geo_rs_seq_tis(
        cls, is_threshold: float = 2.0, rs_threshold: Union[float, str] = "0.999_1.001"
    ) -> RolloutCorrectionConfig:
        """Bypass REINFORCE plus Geo-RS and Seq-TIS."""
        return cls(
            rollout_is="sequence",
            rollout_is_threshold=is_threshold,
            rollout_rs="seq_mean_k1",
            rollout_rs_threshold=rs_threshold,
            bypass_mode=True,
            loss_type="reinforce",
        )

    @classmethod
    def bypass_pg_geo_rs_token_tis(
        cls, is_threshold: float = 2.0, rs_threshold: Union[float, str] = "0.999_1.001"
    ) -> RolloutCorrectionConfig:
        """Bypass REINFORCE plus Geo-RS and Token-TIS."""
        return cls(
            rollout_is="token",
            rollout_is_threshold=is_threshold,
            rollout_rs="seq_mean_k1",
            rollout_rs_threshold=rs_threshold,
            bypass_mode=True,
            loss_type="reinforce",
        )

    @classmethod
    def disabled(cls) -> RolloutCorrectionConfig:
        """Metrics only: no weights, no rejection."""
        return cls()


#: verl's preset factory methods by name (the same names and defaults).
PRESETS = {
    name: getattr(RolloutCorrectionConfig, name)
    for name in (
        "decoupled_token_is",
        "decoupled_seq_is",
        "decoupled_token_icepop",
        "decoupled_seq_is_rs",
        "decoupled_geo_rs",
        "decoupled_geo_rs_seq_tis",
        "decoupled_geo_rs_token_tis",
        "decoupled_k3_rs",
        "decoupled_k3_rs_seq_tis",
        "decoupled_k3_rs_token_tis",
        "bypass_ppo_clip",
        "bypass_ppo_clip_geo_rs",
        "bypass_ppo_clip_k3_rs",
        "bypass_pg_is",
        "bypass_pg_token_icepop",
        "bypass_pg_geo_rs",
        "bypass_pg_geo_rs_seq_tis",
        "bypass_pg_geo_rs_token_tis",
        "disabled",
    )
}
