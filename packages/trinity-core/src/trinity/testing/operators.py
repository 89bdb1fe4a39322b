"""Contract of experience operators (``data_processor.experience_pipeline.operators``).

An operator is duck typed as the pipeline sees it: ``op.process(list[Experience]) ->
(list[Experience], metrics)``, optionally ``op.close()``; it is built from its config ``args``.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch

from trinity.common.experience import Experience
from trinity.testing._contract import ComponentContract, check_metrics, rule
from trinity.testing.inputs import edge_groups, standard_experiences

__all__ = ["ExperienceOperatorContract"]


def _summary(exps: list[Experience]) -> list[tuple]:
    return [
        (
            e.eid.uid,
            e.reward,
            e.response_text,
            e.tokens.tolist(),
            None if e.action_mask is None else e.action_mask.tolist(),
        )
        for e in exps
    ]


class ExperienceOperatorContract(ComponentContract):
    """Rules of an experience operator.

    Class attributes besides the common ones:

    * ``non_numeric_metrics``: metric keys allowed to hold something other than a number (the
      pipeline passes them through unprefixed, e.g. ``taskset_schedule``: a dict per task).
    * ``experiences``: ``fn(seed) -> list[Experience]``; default
      :func:`trinity.testing.inputs.standard_experiences`.
    """

    kind = "experience operator"
    registry_path = "trinity.buffer.operators:EXPERIENCE_OPERATORS"
    non_numeric_metrics: ClassVar[frozenset[str]] = frozenset()
    experiences: ClassVar[Any] = None

    def step(self) -> list[Experience]:
        make = type(self).experiences
        return make(self.seed) if make is not None else standard_experiences(self.seed)

    def process(self, op: Any, exps: list[Experience]) -> tuple[list[Experience], dict]:
        out = op.process(exps)
        assert isinstance(out, tuple) and len(out) == 2, (
            f"process() must return (experiences, metrics), got {type(out).__name__}"
        )
        result, metrics = out
        assert isinstance(result, list), (
            f"process() returned a {type(result).__name__} of experiences"
        )
        for exp in result:
            assert isinstance(exp, Experience), f"process() returned a {type(exp).__name__}"
        check_metrics(metrics, "metrics", frozenset(self.non_numeric_metrics))
        return result, metrics

    # ------------------------------------------------------------------ rules
    @rule("output", "process() returns (a list of Experience, a dict of numbers)")
    def test_output(self) -> None:
        op = self.build()
        try:
            self.process(op, self.step())
        finally:
            close = getattr(op, "close", None)
            if callable(close):
                close()

    @rule("empty", "an empty step gives an empty list, not an error")
    def test_empty_input(self) -> None:
        result, _ = self.process(self.build(), [])
        assert result == [], f"an empty input gave {len(result)} experiences"

    @rule("edge-inputs", "edge inputs pass (identical rewards, one member, all masked)")
    def test_edge_inputs(self) -> None:
        for what, group in edge_groups(self.seed).items():
            try:
                result, _ = self.process(self.build(), group)
            except AssertionError as exc:
                raise AssertionError(f"on {what}: {exc}") from exc
            for exp in result:
                if exp.reward is not None:
                    assert math.isfinite(exp.reward), (
                        f"on {what}: {exp.eid.uid} got reward {exp.reward}"
                    )

    @rule("consistent", "returned experiences stay well formed (masks and rewards fit the tokens)")
    def test_experiences_stay_consistent(self) -> None:
        result, _ = self.process(self.build(), self.step())
        for exp in result:
            r = exp.response_length
            for field in ("logprobs", "action_mask", "advantages", "returns"):
                value = getattr(exp, field)
                if value is not None:
                    assert tuple(value.shape) == (r,), (
                        f"{exp.eid.uid}: {field} has shape {tuple(value.shape)}, expected ({r},)"
                    )
            if exp.reward is not None:
                assert isinstance(exp.reward, float) and math.isfinite(exp.reward), (
                    f"{exp.eid.uid}: reward {exp.reward!r} is not a finite float"
                )
            if exp.action_mask is not None:
                assert (
                    exp.action_mask.dtype == torch.bool or not exp.action_mask.is_floating_point()
                ), f"{exp.eid.uid}: action_mask has dtype {exp.action_mask.dtype}"
            exp.serialize()  # the buffer stores what comes out: it must still serialize

    @rule("deterministic", "the same step gives the same output and metrics")
    def test_deterministic(self) -> None:
        first, m1 = self.process(self.build(), self.step())
        second, m2 = self.process(self.build(), self.step())
        assert _summary(first) == _summary(second), (
            "two runs on the same step gave different output"
        )
        assert set(m1) == set(m2), f"metric keys differ between runs: {set(m1) ^ set(m2)}"
