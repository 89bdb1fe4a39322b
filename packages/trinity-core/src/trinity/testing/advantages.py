"""Contract of advantage functions (``algorithm.advantage_fn``), both places they run.

* In the experience pipeline (``compute_in_trainer() -> False``, group methods such as GRPO or
  OPMD): ``fn(list[Experience]) -> (list[Experience], metrics)`` with ``advantages`` /
  ``returns`` ``[response_len]`` set on each returned experience.
* In the trainer (``compute_in_trainer() -> True``, GAE and friends): ``fn(batch, **fields)`` on
  the collated :class:`~trinity.common.experience.Experiences` returns it with ``advantages`` /
  ``returns`` ``[B, R]``. Fields the trainer computes (critic ``values [B, R]``,
  ``reward_baselines [B]``) are passed when ``__call__`` names them.

Duck typed: no import of trinity-algorithms.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Optional

import pytest
import torch
from torch import Tensor

from trinity.common.experience import Experience, Experiences, collate_experiences
from trinity.testing._contract import ComponentContract, assert_finite, check_metrics, rule
from trinity.testing.inputs import edge_groups, standard_experiences

__all__ = ["AdvantageFnContract"]


class AdvantageFnContract(ComponentContract):
    """Rules of an advantage function.

    Class attributes besides the common ones:

    * ``compute_in_trainer``: ``None`` asks the component (``compute_in_trainer()``); set it for
      a duck-typed class that lacks the method.
    * ``experiences``: ``fn(seed) -> list[Experience]``, the explore step the rules use
      (default :func:`trinity.testing.inputs.standard_experiences`: four task groups with the
      edge cases). Multi-step advantages may want several steps per run.
    * ``trainer_fields``: ``{name: fn(batch) -> Tensor}`` extra keyword inputs of a
      trainer-side ``__call__`` (``values`` and ``reward_baselines`` are built in).
    """

    kind = "advantage function"
    registry_path = "trinity.algorithm.advantage_fn:ADVANTAGE_FN"
    compute_in_trainer: ClassVar[Optional[bool]] = None
    experiences: ClassVar[Optional[Callable[[int], list[Experience]]]] = None
    trainer_fields: ClassVar[Mapping[str, Callable[[Experiences], Tensor]]] = {}
    atol: ClassVar[float] = 1e-6

    # ------------------------------------------------------------------ inputs and calls
    def in_trainer(self) -> bool:
        if self.compute_in_trainer is not None:
            return bool(self.compute_in_trainer)
        fn = getattr(self.component, "compute_in_trainer", None)
        assert callable(fn), (
            f"{self._component_name()} has no compute_in_trainer(); set compute_in_trainer "
            "on the test class"
        )
        return bool(fn())

    def step(self) -> list[Experience]:
        make = type(self).experiences
        return make(self.seed) if make is not None else standard_experiences(self.seed)

    def batch(self, exps: list[Experience]) -> Experiences:
        return collate_experiences(exps)

    def _trainer_kwargs(self, fn: Any, batch: Experiences) -> dict[str, Any]:
        params = inspect.signature(type(fn).__call__).parameters
        gen = self.generator(3)
        b, r = batch.action_mask.shape
        builtin: dict[str, Callable[[Experiences], Tensor]] = {
            "values": lambda _: torch.randn((b, r), generator=gen) * batch.action_mask,
            "reward_baselines": lambda _: torch.rand(b, generator=gen),
        }
        builtin.update(self.trainer_fields or {})
        return {n: make(batch) for n, make in builtin.items() if n in params}

    def run(self, exps: list[Experience], kwargs: Optional[dict] = None) -> tuple[Any, Any, dict]:
        """Call the function on ``exps`` the way the framework does; returns (input, out, kwargs)."""
        fn = self.build()
        if self.in_trainer():
            batch = self.batch(exps)
            kwargs = self._trainer_kwargs(fn, batch) if kwargs is None else kwargs
            out = fn(batch, **kwargs)
            return batch, out, kwargs
        return exps, fn(exps), {}

    def outputs(
        self, exps: list[Experience]
    ) -> tuple[dict[str, tuple[Tensor, Tensor, Tensor]], dict]:
        """``({uid: (advantages, returns, action_mask)}, metrics)`` of one call, checked."""
        given, out, _ = self.run(exps)
        assert isinstance(out, tuple) and len(out) == 2, (
            f"expected (experiences, metrics), got {type(out).__name__}"
        )
        result, metrics = out
        check_metrics(metrics, "metrics")
        rows: dict[str, tuple[Tensor, Tensor, Tensor]] = {}
        if self.in_trainer():
            assert isinstance(result, Experiences), (
                f"a trainer-side advantage must return the Experiences batch, got "
                f"{type(result).__name__}"
            )
            shape = tuple(result.action_mask.shape)
            for field in ("advantages", "returns"):
                value = getattr(result, field)
                assert isinstance(value, Tensor), f"batch.{field} is not set"
                assert tuple(value.shape) == shape, (
                    f"batch.{field} has shape {tuple(value.shape)}, expected {shape} [B, R]"
                )
                assert value.is_floating_point(), f"batch.{field} has dtype {value.dtype}"
            for i, eid in enumerate(result.eids):
                rows[eid.uid] = (result.advantages[i], result.returns[i], result.action_mask[i])
            return rows, dict(metrics)
        assert isinstance(result, list), (
            f"expected a list of experiences, got {type(result).__name__}"
        )
        known = {e.eid.uid for e in exps}
        for exp in result:
            assert isinstance(exp, Experience), (
                f"returned a {type(exp).__name__}, not an Experience"
            )
            for field in ("advantages", "returns"):
                value = getattr(exp, field)
                assert isinstance(value, Tensor), f"experience {exp.eid.uid}: {field} is not set"
                assert tuple(value.shape) == (exp.response_length,), (
                    f"experience {exp.eid.uid}: {field} has shape {tuple(value.shape)}, "
                    f"expected ({exp.response_length},) [response_len]"
                )
                assert value.is_floating_point(), f"{field} has dtype {value.dtype}"
            if exp.eid.uid in known:
                rows[exp.eid.uid] = (exp.advantages, exp.returns, exp.action_mask)
        return rows, dict(metrics)

    # ------------------------------------------------------------------ rules
    @rule(
        "output", "it returns the experiences with advantages and returns set, and numeric metrics"
    )
    def test_output(self) -> None:
        rows, _ = self.outputs(self.step())
        assert rows, "no input experience came back with advantages"
        for uid, (adv, ret, _) in rows.items():
            assert_finite(adv, f"advantages of {uid}")
            assert_finite(ret, f"returns of {uid}")

    @rule(
        "edge-inputs",
        "edge inputs give finite advantages (identical rewards, one member, all masked)",
    )
    def test_edge_inputs(self) -> None:
        for what, group in edge_groups(self.seed).items():
            try:
                rows, _ = self.outputs(group)
            except AssertionError as exc:
                raise AssertionError(f"on {what}: {exc}") from exc
            for uid, (adv, ret, _) in rows.items():
                assert_finite(adv, f"advantages on {what} ({uid})")
                assert_finite(ret, f"returns on {what} ({uid})")

    @rule("masked-tokens", "advantages are 0 on tokens the action mask excludes")
    def test_masked_tokens_get_zero_advantage(self) -> None:
        rows, _ = self.outputs(self.step())
        for uid, (adv, _, mask) in rows.items():
            off = ~mask.to(torch.bool)
            if bool(off.any()):
                worst = float(adv[off].abs().max())
                assert worst <= self.atol, (
                    f"experience {uid} has advantage {worst:.3g} on a token whose action mask is 0"
                )

    @rule("masked-values", "values under a zero mask do not change the advantages")
    def test_masked_values_do_not_change_advantages(self) -> None:
        exps = self.step()
        base, _ = self.outputs([self.clone(e) for e in exps])
        changed = [self.clone(e) for e in exps]
        gen = self.generator(11)
        for exp in changed:
            off = ~exp.action_mask.to(torch.bool)
            if exp.logprobs is not None and bool(off.any()):
                noise = torch.rand(exp.logprobs.shape, generator=gen) * 4
                exp.logprobs = torch.where(off, exp.logprobs - noise, exp.logprobs)
        if self.in_trainer():
            fn = self.build()
            batch = self.batch(changed)
            kwargs = self._trainer_kwargs(fn, batch)
            off = ~batch.action_mask
            for name, value in kwargs.items():
                if isinstance(value, Tensor) and value.shape == off.shape:
                    kwargs[name] = torch.where(off, value + 3.0, value)
            result, _ = fn(batch, **kwargs)
            other = {
                eid.uid: (result.advantages[i], result.returns[i], result.action_mask[i])
                for i, eid in enumerate(result.eids)
            }
        else:
            other, _ = self.outputs(changed)
        assert set(base) == set(other), "changing masked values changed which experiences came back"
        for uid, (adv, _, mask) in base.items():
            on = mask.to(torch.bool)
            diff = float((adv[on] - other[uid][0][on]).abs().max()) if bool(on.any()) else 0.0
            assert diff <= self.atol, (
                f"experience {uid}: changing values under a zero mask moved a trained token's "
                f"advantage by {diff:.3g}"
            )

    @rule("deterministic", "the same input gives the same advantages and metrics")
    def test_deterministic(self) -> None:
        torch.manual_seed(self.seed)
        first, m1 = self.outputs(self.step())
        torch.manual_seed(self.seed)
        second, m2 = self.outputs(self.step())
        assert set(first) == set(second), "two runs returned different experiences"
        for uid, (adv, ret, _) in first.items():
            assert torch.allclose(adv, second[uid][0], atol=self.atol), (
                f"advantages of {uid} differ"
            )
            assert torch.allclose(ret, second[uid][1], atol=self.atol), f"returns of {uid} differ"
        assert set(m1) == set(m2), f"metric keys differ between runs: {set(m1) ^ set(m2)}"

    @rule("keeps-tokens", "experiences keep their ids and tokens")
    def test_keeps_identity(self) -> None:
        if self.in_trainer():
            pytest.skip("trainer-side: the batch is returned as a whole")
        exps = self.step()
        tokens = {e.eid.uid: e.tokens.clone() for e in exps}
        fn = self.build()
        result, _ = fn(exps)
        for exp in result:
            if exp.eid.uid in tokens:
                assert torch.equal(exp.tokens, tokens[exp.eid.uid]), (
                    f"experience {exp.eid.uid}: its tokens changed"
                )
