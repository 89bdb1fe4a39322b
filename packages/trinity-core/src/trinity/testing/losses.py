"""Contracts of the trainer's loss terms: policy loss, KL function, entropy loss.

They talk to the component only through the methods the trainer calls (duck typing): trinity-core
does not import trinity-algorithms, and a plugin needs no base class to be tested.

* policy loss: ``loss_fn(logprob=..., <fields its __call__ names>) -> (scalar loss, metrics)``
  (through ``loss_fn.compute(logprob, batch)`` when it has that method, as the trainer does);
* KL function: ``calculate_kl(logprob, ref_logprob, old_logprob=None) -> [B, R]``,
  ``calculate_kl_loss(logprob, ref_logprob, response_mask, loss_agg_mode, old_logprob=None)`` and
  ``apply_kl_penalty_to_reward(batch)``;
* entropy loss: ``fn(entropy, action_mask, loss_agg_mode, **fields) -> (scalar loss, metrics)``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import pytest
import torch
from torch import Tensor

from trinity.testing._contract import (
    ComponentContract,
    assert_finite,
    check_metrics,
    rule,
)
from trinity.testing.inputs import perturb_masked, token_inputs

__all__ = ["EntropyLossContract", "KLFnContract", "PolicyLossContract"]

_NOT_FIELDS = {"self", "logprob", "kwargs", "args"}


def _named_fields(fn: Callable[..., Any]) -> list[str]:
    params = inspect.signature(fn).parameters
    return [
        name
        for name, p in params.items()
        if name not in _NOT_FIELDS and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]


class _TensorLossContract(ComponentContract):
    """Shared rules of components that reduce ``[B, R]`` tensors to a scalar loss."""

    #: Extra batch fields the component names that the kit does not know:
    #: ``{name: fn(inputs: dict) -> Tensor}`` (``inputs`` holds the standard tensors).
    extra_inputs: ClassVar[Mapping[str, Callable[[dict[str, Tensor]], Tensor]]] = {}
    #: Tolerance of "the same loss" comparisons.
    atol: ClassVar[float] = 1e-6
    rtol: ClassVar[float] = 1e-5

    # subclasses implement ------------------------------------------------------------
    def call(self, fn: Any, inputs: dict[str, Tensor]) -> tuple[Tensor, Any]:
        raise NotImplementedError

    # shared helpers -------------------------------------------------------------------
    def inputs(self, dtype: torch.dtype = torch.float32, offset: int = 0) -> dict[str, Tensor]:
        data = token_inputs(self.generator(offset), dtype=dtype)
        for name, make in (self.extra_inputs or {}).items():
            data[name] = make(data)
        return data

    def grad_leaf(self, inputs: dict[str, Tensor], name: str) -> Tensor:
        leaf = inputs[name].detach().clone().requires_grad_(True)
        inputs[name] = leaf
        return leaf

    def loss_of(self, inputs: dict[str, Tensor]) -> Tensor:
        loss, _ = self.call(self.build(), self.clone(inputs))
        return loss.detach()

    def assert_same(self, a: Tensor, b: Tensor, what: str) -> None:
        assert torch.allclose(a.double(), b.double(), atol=self.atol, rtol=self.rtol), (
            f"{what}: {a.item()} != {b.item()}"
        )

    #: the differentiable input (``logprob``; ``entropy`` for entropy losses)
    grad_input: ClassVar[str] = "logprob"

    # rules ----------------------------------------------------------------------------
    @rule("output", "it returns (a scalar loss of the input's dtype, a dict of numbers)")
    def test_output_types(self) -> None:
        for dtype in (torch.float32, torch.float64):
            out = self.call(self.build(), self.inputs(dtype))
            assert isinstance(out, tuple) and len(out) == 2, (
                f"expected (loss, metrics), got {type(out).__name__}"
            )
            loss, metrics = out
            assert isinstance(loss, Tensor), f"loss is a {type(loss).__name__}, not a Tensor"
            assert loss.dim() == 0, f"loss has shape {tuple(loss.shape)}, expected a scalar ()"
            assert loss.dtype == dtype, f"{dtype} inputs gave a {loss.dtype} loss"
            check_metrics(metrics, "metrics")

    @rule("finite", "the loss and its gradient are finite on ordinary inputs")
    def test_finite(self) -> None:
        inputs = self.inputs()
        leaf = self.grad_leaf(inputs, self.grad_input)
        loss, _ = self.call(self.build(), inputs)
        assert_finite(loss, "loss")
        if loss.requires_grad:
            loss.backward()
            assert leaf.grad is not None, f"no gradient reached {self.grad_input}"
            assert_finite(leaf.grad, f"gradient of {self.grad_input}")

    @rule("masked-tokens", "masked tokens do not change the loss")
    def test_masked_tokens_do_not_change_the_loss(self) -> None:
        inputs = self.inputs()
        changed = perturb_masked(inputs, inputs["action_mask"], self.generator(7))
        base, other = self.loss_of(inputs), self.loss_of(changed)
        self.assert_same(base, other, "changing values under a zero action mask changed the loss")

    @rule("masked-gradient", "masked tokens get no gradient")
    def test_masked_tokens_get_no_gradient(self) -> None:
        inputs = self.inputs()
        leaf = self.grad_leaf(inputs, self.grad_input)
        loss, _ = self.call(self.build(), inputs)
        if not loss.requires_grad:
            return  # a constant loss (e.g. a disabled term) has no gradient to leak
        loss.backward()
        assert leaf.grad is not None, f"no gradient reached {self.grad_input}"
        leak = leaf.grad[~inputs["action_mask"]].abs().max()
        assert float(leak) == 0.0, (
            f"{self.grad_input} has gradient {float(leak):.3g} on tokens whose action mask is 0"
        )

    @rule("mask-dtype", "a 0/1 float or int mask gives the same loss as a bool mask")
    def test_mask_dtype(self) -> None:
        inputs = self.inputs()
        base = self.loss_of(inputs)
        for dtype in (torch.float32, torch.int64):
            other = dict(inputs)
            other["action_mask"] = inputs["action_mask"].to(dtype)
            other["response_mask"] = inputs["response_mask"].to(dtype)
            self.assert_same(base, self.loss_of(other), f"a {dtype} action mask changed the loss")

    @rule("all-masked-row", "an all-masked row gives a finite loss and gradient")
    def test_all_masked_row(self) -> None:
        for rows, what in (([1], "one row"), ([0, 1, 2, 3], "every row")):
            inputs = self.inputs()
            for key in ("action_mask", "response_mask"):
                inputs[key] = inputs[key].clone()
                inputs[key][rows] = False
            leaf = self.grad_leaf(inputs, self.grad_input)
            loss, metrics = self.call(self.build(), inputs)
            assert_finite(loss, f"loss with {what} fully masked")
            check_metrics(metrics, f"metrics with {what} fully masked")
            if loss.requires_grad:
                loss.backward()
                if leaf.grad is not None:
                    assert_finite(leaf.grad, f"gradient with {what} fully masked")

    @rule("deterministic", "the same inputs give the same loss and do not get modified")
    def test_deterministic(self) -> None:
        inputs = self.inputs()
        kept = {k: v.clone() for k, v in inputs.items()}
        fn = self.build()
        first, m1 = self.call(fn, inputs)
        second, m2 = self.call(self.build(), self.clone(kept))
        self.assert_same(first.detach(), second.detach(), "two calls on the same inputs differ")
        assert set(m1) == set(m2), f"metric keys differ between calls: {set(m1) ^ set(m2)}"
        for name, value in kept.items():
            assert torch.equal(inputs[name], value), f"the component modified its input {name!r}"


class PolicyLossContract(_TensorLossContract):
    """Rules of a policy loss (``algorithm.policy_loss_fn``).

    Subclass with ``component = MyLoss``. The loss is called as the trainer calls it: with
    ``logprob`` and the batch fields its ``__call__`` names (``old_logprob``, ``action_mask``,
    ``advantages``, ``ref_logprob``, ``expert_mask`` ... the kit provides the standard ones;
    name others in ``extra_inputs``).
    """

    kind = "policy loss"
    registry_path = "trinity.algorithm.policy_loss_fn:POLICY_LOSS_FN"

    def batch_for(self, fn: Any, inputs: dict[str, Tensor]) -> dict[str, Tensor]:
        names = _named_fields(type(fn).__call__)
        missing = [n for n in names if n not in inputs]
        assert not missing, (
            f"__call__ names batch fields {missing} that the kit does not provide; give them in "
            "`extra_inputs = {name: lambda inputs: tensor}`"
        )
        return {n: inputs[n] for n in names}

    def call(self, fn: Any, inputs: dict[str, Tensor]) -> tuple[Tensor, Any]:
        batch = self.batch_for(fn, inputs)
        compute = getattr(fn, "compute", None)
        if callable(compute):  # the trainer's path (PolicyLossFn.compute)
            return compute(inputs["logprob"], batch)
        return fn(logprob=inputs["logprob"], **batch)

    @rule("gradient", "the loss has a gradient through logprob")
    def test_gradient_reaches_logprob(self) -> None:
        inputs = self.inputs()
        leaf = self.grad_leaf(inputs, "logprob")
        loss, _ = self.call(self.build(), inputs)
        assert loss.requires_grad, "the loss does not depend on logprob (nothing to train)"
        loss.backward()
        assert leaf.grad is not None and bool(leaf.grad.abs().sum() > 0), (
            "the gradient of the loss w.r.t. logprob is zero everywhere on ordinary inputs"
        )


class EntropyLossContract(_TensorLossContract):
    """Rules of an entropy loss (``algorithm.entropy_loss_fn``).

    Called as ``fn(entropy, action_mask, loss_agg_mode=..., <fields it names>)``; ``entropy`` is
    ``[B, R]`` per-token entropy in ``[0, 3]``. ``loss_agg_modes`` lists the aggregation modes
    tried (each must keep every rule).
    """

    kind = "entropy loss"
    registry_path = "trinity.algorithm.entropy_loss_fn:ENTROPY_LOSS_FN"
    grad_input = "entropy"
    loss_agg_modes: ClassVar[tuple[str, ...]] = ("token-mean", "seq-mean-token-mean")
    #: the coefficient the component is built with unless component_args sets one (a zero
    #: coefficient would hide every mistake behind a multiplication by 0)
    default_coef: ClassVar[float] = 0.5

    def build(self, **overrides: Any) -> Any:
        if "entropy_coef" not in self.component_args:
            overrides.setdefault("entropy_coef", self.default_coef)
        return super().build(**overrides)

    def call(self, fn: Any, inputs: dict[str, Tensor]) -> tuple[Tensor, Any]:
        names = [n for n in _named_fields(type(fn).__call__) if n not in ("entropy", "action_mask")]
        extra = {n: inputs[n] for n in names if n in inputs and n != "loss_agg_mode"}
        results = [
            fn(inputs["entropy"], inputs["action_mask"], loss_agg_mode=mode, **extra)
            for mode in self.loss_agg_modes
        ]
        # rules compare the first mode's loss; every mode must be finite and well typed
        for loss, metrics in results[1:]:
            assert isinstance(loss, Tensor) and loss.dim() == 0, "a loss is not a scalar tensor"
            assert_finite(loss, "loss")
            check_metrics(metrics, "metrics")
        if len(results) > 1:
            total = sum(r[0] for r in results)
            return total, results[0][1]
        return results[0]


class KLFnContract(_TensorLossContract):
    """Rules of a KL function (``algorithm.kl_loss_fn`` / ``kl_penalty_fn``).

    Checks the estimator (``calculate_kl``), the loss term (``calculate_kl_loss``, as the loss
    rules) and the reward penalty (``apply_kl_penalty_to_reward``, when the class has it).
    """

    kind = "KL function"
    registry_path = "trinity.algorithm.kl_fn:KL_FN"
    loss_agg_mode: ClassVar[str] = "token-mean"
    #: coefficient used unless component_args sets ``kl_coef`` (non-zero, so mistakes show)
    default_coef: ClassVar[float] = 0.5

    def build(self, **overrides: Any) -> Any:
        if "kl_coef" not in self.component_args:
            overrides.setdefault("kl_coef", self.default_coef)
        return super().build(**overrides)

    def call(self, fn: Any, inputs: dict[str, Tensor]) -> tuple[Tensor, Any]:
        return fn.calculate_kl_loss(
            inputs["logprob"],
            inputs["ref_logprob"],
            inputs["action_mask"],
            self.loss_agg_mode,
            old_logprob=inputs["old_logprob"],
        )

    @rule("kl-shape", "calculate_kl keeps the [batch, response_len] shape and dtype")
    def test_kl_shape(self) -> None:
        for dtype in (torch.float32, torch.float64):
            inputs = self.inputs(dtype)
            kl = self.build().calculate_kl(
                inputs["logprob"], inputs["ref_logprob"], inputs["old_logprob"]
            )
            assert isinstance(kl, Tensor), f"calculate_kl returned a {type(kl).__name__}"
            assert kl.shape == inputs["logprob"].shape, (
                f"calculate_kl returned shape {tuple(kl.shape)} for inputs of shape "
                f"{tuple(inputs['logprob'].shape)}"
            )
            assert kl.dtype == dtype, f"{dtype} inputs gave a {kl.dtype} KL"
            assert_finite(kl, "KL")

    @rule("kl-self-zero", "the KL of a policy with itself is 0")
    def test_kl_to_itself_is_zero(self) -> None:
        inputs = self.inputs()
        lp = inputs["logprob"]
        kl = self.build().calculate_kl(lp, lp.clone(), lp.clone())
        assert float(kl.abs().max()) < 1e-6, f"KL(pi, pi) reaches {float(kl.abs().max()):.3g}"

    @rule("kl-penalty", "apply_kl_penalty_to_reward sets finite token_level_rewards, masked")
    def test_kl_penalty(self) -> None:
        fn = self.build()
        apply = getattr(fn, "apply_kl_penalty_to_reward", None)
        if not callable(apply):
            pytest.skip(f"{self._component_name()} has no apply_kl_penalty_to_reward")
        inputs = self.inputs()
        scores = inputs["token_level_scores"] * inputs["response_mask"]
        batch = {
            "token_level_scores": scores.clone(),
            "old_log_probs": inputs["logprob"],
            "ref_log_prob": inputs["ref_logprob"],
            "response_mask": inputs["response_mask"],
        }
        out, metrics = apply(batch)
        check_metrics(metrics, "penalty metrics")
        container = getattr(out, "batch", out)
        rewards = container["token_level_rewards"]
        assert rewards.shape == scores.shape, (
            f"token_level_rewards has shape {tuple(rewards.shape)}, expected {tuple(scores.shape)}"
        )
        assert_finite(rewards, "token_level_rewards")
        off = ~inputs["response_mask"]
        assert torch.equal(rewards[off], scores[off]), (
            "the penalty changed rewards on tokens whose response mask is 0"
        )
        # no reference model: no penalty
        plain = {k: v.clone() for k, v in batch.items() if k != "ref_log_prob"}
        plain["token_level_scores"] = scores.clone()
        out, _ = self.build().apply_kl_penalty_to_reward(plain)
        rewards = getattr(out, "batch", out)["token_level_rewards"]
        assert torch.allclose(rewards, scores), "without ref_log_prob the rewards changed"
