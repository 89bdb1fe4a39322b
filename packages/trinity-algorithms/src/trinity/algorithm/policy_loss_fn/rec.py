"""REC policy loss (``rec``): REINFORCE with clip modes, importance weights and regularisers."""

from __future__ import annotations

from typing import Any, Literal, Optional

from trinity.algorithm.args import Field, LossAggMode, NonNegFloat, PolicyLossArgs, PosFloat
from trinity.algorithm.policy_loss_fn.functional import rec_loss
from trinity.algorithm.policy_loss_fn.policy_loss_fn import POLICY_LOSS_FN, RatioPolicyLossFn

__all__ = ["RECPolicyLossFn"]

CLIP_MODES = ("none", "one-side", "gspo-one-side", "two-side", "ring")
WEIGHTS = ("none", "importance_sampling", "gspo_importance_sampling", "advantage")
REGULARIZERS = ("none", "k2", "forward-kl")

#: Trinity-RFT's configured defaults (its ``default_args``; its ``__init__`` says 0.4 / 0.4).
_DEFAULTS: dict[str, Any] = {
    "epsilon_low": 0.2,
    "epsilon_high": 0.2,
    "epsilon_low_prime": 0.6,
    "epsilon_high_prime": 2.0,
    "clip_mode": "none",
    "weight": "none",
    "regularizer": "none",
    "regularizer_coef": 0.0,
    "temp": 1.0,
}


def _check(name: str, value: float, low: float, high: Optional[float] = None) -> float:
    """``value`` if ``low < value`` (and ``value <= high``), else ``ValueError`` naming it."""
    if not (value > low and (high is None or value <= high)):
        where = f"in ({low}, {high}]" if high is not None else f"> {low}"
        raise ValueError(f"{name} must be {where}, got {value}")
    return float(value)


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
    return value


@POLICY_LOSS_FN.register_module("rec")
class RECPolicyLossFn(RatioPolicyLossFn):
    """REC; see :func:`~trinity.algorithm.policy_loss_fn.functional.rec_loss`.

    Args:
        epsilon_low / epsilon_high: the ratio range ``[1 - low, 1 + high]`` of the clip modes.
        epsilon_low_prime / epsilon_high_prime: the outer bounds of ``clip_mode="ring"``.
        clip_mode: ``none``, ``one-side``, ``gspo-one-side``, ``two-side`` or ``ring``.
        weight: ``none``, ``importance_sampling``, ``gspo_importance_sampling`` or
            ``advantage`` (``exp(A / temp)``).
        regularizer / regularizer_coef: ``none``, ``k2`` or ``forward-kl``, and its weight.
        temp: temperature of ``weight="advantage"``.
        loss_agg_mode: unset, Trinity-RFT's choice: ``token-mean``, or
            ``seq-mean-token-mean`` with ``clip_mode="gspo-one-side"``.
    """

    class Args(PolicyLossArgs):
        """``policy_loss_fn_args`` of ``rec``."""

        epsilon_low: float = Field(0.2, gt=0.0, le=1.0, description="Lower ratio range.")
        epsilon_high: PosFloat = Field(0.2, description="Upper ratio range.")
        epsilon_low_prime: float = Field(0.6, gt=0.0, le=1.0, description="Ring's outer low.")
        epsilon_high_prime: PosFloat = Field(2.0, description="Ring's outer high.")
        clip_mode: Literal["none", "one-side", "gspo-one-side", "two-side", "ring"] = Field(
            "none", description="Which tokens train, by their ratio and advantage sign."
        )
        weight: Literal["none", "importance_sampling", "gspo_importance_sampling", "advantage"] = (
            Field("none", description="Per-token weight of the advantage.")
        )
        regularizer: Literal["none", "k2", "forward-kl"] = Field(
            "none", description="Added per-token regulariser."
        )
        regularizer_coef: NonNegFloat = Field(0.0, description="Weight of the regulariser.")
        temp: PosFloat = Field(1.0, description="Temperature of weight=advantage.")
        loss_agg_mode: Optional[LossAggMode] = Field(  # type: ignore[assignment]
            None, description="Unset: token-mean (seq-mean-token-mean for gspo-one-side)."
        )

    loss_fn = staticmethod(rec_loss)

    def __init__(
        self,
        backend: str = "verl",
        epsilon_low: float = 0.2,
        epsilon_high: float = 0.2,
        epsilon_low_prime: float = 0.6,
        epsilon_high_prime: float = 2.0,
        clip_mode: str = "none",
        weight: str = "none",
        regularizer: str = "none",
        regularizer_coef: float = 0.0,
        temp: float = 1.0,
        loss_agg_mode: Optional[str] = None,
    ) -> None:
        super().__init__(backend=backend)
        self.epsilon_low = _check("epsilon_low", epsilon_low, 0.0, 1.0)
        self.epsilon_high = _check("epsilon_high", epsilon_high, 0.0)
        self.epsilon_low_prime = _check("epsilon_low_prime", epsilon_low_prime, 0.0, 1.0)
        self.epsilon_high_prime = _check("epsilon_high_prime", epsilon_high_prime, 0.0)
        self.clip_mode = _choice("clip_mode", clip_mode, CLIP_MODES)
        self.weight = _choice("weight", weight, WEIGHTS)
        self.regularizer = _choice("regularizer", regularizer, REGULARIZERS)
        if not regularizer_coef >= 0:
            raise ValueError(f"regularizer_coef must be >= 0, got {regularizer_coef}")
        self.regularizer_coef = float(regularizer_coef)
        self.temp = _check("temp", temp, 0.0)
        if loss_agg_mode is None:
            loss_agg_mode = "seq-mean-token-mean" if clip_mode == "gspo-one-side" else "token-mean"
        self.loss_agg_mode = loss_agg_mode

    def loss_settings(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in _DEFAULTS}

    @classmethod
    def default_args(cls) -> dict:
        return dict(_DEFAULTS)
