"""Contract of sample strategies (``algorithm.sample_strategy``).

A strategy is built as the trainer builds it, ``cls(readers, **args, train_batch_size=...)``,
with in-memory readers that satisfy :class:`trinity.common.protocols.ExperienceReader`, and is
asked ``await strategy.sample(step)`` for ``(experiences, metrics)``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar, Optional

import pytest

from trinity.common.experience import Experience
from trinity.common.protocols import ExperienceReader
from trinity.testing._contract import ComponentContract, check_metrics, rule
from trinity.testing.inputs import make_experience
from trinity.utils.aio import run_sync

__all__ = ["ListReader", "SampleStrategyContract"]


class ListReader:
    """An in-memory :class:`~trinity.common.protocols.ExperienceReader` over a fixed list.

    Follows the protocol: ``batch_size=None`` means its own batch size, a call returns at most
    ``batch_size`` experiences (fewer only at the end), and an exhausted reader raises
    ``StopIteration`` / ``StopAsyncIteration``. Its position is checkpointable
    (``state_dict`` / ``load_state_dict``), as file and SQL readers are.
    """

    def __init__(self, experiences: list[Experience], batch_size: int = 4) -> None:
        self.experiences = list(experiences)
        self.batch_size = batch_size
        self.position = 0
        self.calls: list[Optional[int]] = []

    def read(self, batch_size: Optional[int] = None) -> list[Experience]:
        self.calls.append(batch_size)
        if self.position >= len(self.experiences):
            raise StopIteration
        n = self.batch_size if batch_size is None else batch_size
        out = self.experiences[self.position : self.position + n]
        self.position += len(out)
        return out

    async def read_async(self, batch_size: Optional[int] = None) -> list[Experience]:
        try:
            return self.read(batch_size)
        except StopIteration:
            raise StopAsyncIteration from None

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        self.position = int(state_dict["position"])


def _pool(prefix: int, n: int, version: int, expert: bool = False) -> list[Experience]:
    out = []
    for i in range(n):
        exp = make_experience(prefix, i, None if expert else float(i % 2), [1, 1, 0, 1])
        exp.model_version = version + i % 2
        out.append(exp)
    return out


class SampleStrategyContract(ComponentContract):
    """Rules of a sample strategy.

    Class attributes besides the common ones:

    * ``train_batch_size``: passed as the trainer does (default 4).
    * ``reader_names``: the readers to build (``experience_buffer`` and ``sft_dataset`` by
      default, so strategies that mix in SFT data find theirs); each holds 12 experiences.
    * ``steps``: the train steps sampled by the rules (default ``1, 2``).
    """

    kind = "sample strategy"
    registry_path = "trinity.algorithm.sample_strategy:SAMPLE_STRATEGY"
    train_batch_size: ClassVar[Optional[int]] = 4
    reader_names: ClassVar[tuple[str, ...]] = ("experience_buffer", "sft_dataset")
    steps: ClassVar[tuple[int, ...]] = (1, 2)
    pool_size: ClassVar[int] = 12

    def readers(self) -> dict[str, ListReader]:
        return {
            name: ListReader(_pool(100 + i, self.pool_size, version=1, expert=i > 0))
            for i, name in enumerate(self.reader_names)
        }

    def build(self, readers: Optional[Mapping[str, Any]] = None, **overrides: Any) -> Any:  # type: ignore[override]
        cls = self.component
        assert cls is not None, f"{type(self).__name__} sets no `component`"
        args = dict(getattr(cls, "default_args", dict)() or {})
        args.update(self.component_args)
        args.update(overrides)
        if self.train_batch_size is not None:
            args.setdefault("train_batch_size", self.train_batch_size)
        readers = self.readers() if readers is None else readers
        # as the trainer builds strategies (build_sample_strategy): readers first, then
        # default_args() overridden by the config, then run settings (train_batch_size)
        return cls(readers, **args)

    def sample(self, strategy: Any, step: int) -> tuple[list[Experience], dict]:
        out = run_sync(strategy.sample(step))
        assert isinstance(out, tuple) and len(out) == 2, (
            f"sample() must return (experiences, metrics), got {type(out).__name__}"
        )
        return out

    # ------------------------------------------------------------------ rules
    @rule("builds", "it builds from default_args() plus component_args")
    def test_builds_from_default_args(self) -> None:
        self.build()

    @rule("readers", "the kit's readers satisfy the ExperienceReader protocol")
    def test_readers_follow_the_protocol(self) -> None:
        for name, reader in self.readers().items():
            assert isinstance(reader, ExperienceReader), f"reader {name!r}"

    @rule("output", "sample() returns (experiences from the readers, a dict of numbers)")
    def test_output(self) -> None:
        readers = self.readers()
        known = {id(e) for r in readers.values() for e in r.experiences}
        strategy = self.build(readers)
        for step in self.steps:
            exps, metrics = self.sample(strategy, step)
            check_metrics(metrics, f"metrics of step {step}")
            assert isinstance(exps, list) and exps, f"step {step}: no experiences"
            for exp in exps:
                assert isinstance(exp, Experience), f"step {step}: a {type(exp).__name__}"
                assert id(exp) in known, f"step {step}: {exp.eid.uid} came from no reader"
            if self.train_batch_size is not None:
                assert len(exps) <= self.train_batch_size, (
                    f"step {step}: {len(exps)} experiences for train_batch_size "
                    f"{self.train_batch_size}"
                )

    @rule("no-repeats", "an experience is handed out once")
    def test_no_repeats(self) -> None:
        strategy = self.build()
        seen: set[str] = set()
        for step in self.steps:
            exps, _ = self.sample(strategy, step)
            uids = [e.eid.uid for e in exps]
            again = (set(uids) & seen) | {u for u in uids if uids.count(u) > 1}
            assert not again, f"step {step} hands out {sorted(again)} again"
            seen.update(uids)

    @rule("deterministic", "the same readers give the same batches")
    def test_deterministic(self) -> None:
        runs = []
        for _ in range(2):
            strategy = self.build()
            runs.append([[e.eid.uid for e in self.sample(strategy, s)[0]] for s in self.steps])
        assert runs[0] == runs[1], f"two identical runs sampled {runs[0]} and {runs[1]}"

    @rule("exhausted", "exhausted readers end sampling with StopAsyncIteration or StopIteration")
    def test_exhausted_readers(self) -> None:
        readers = {name: ListReader([]) for name in self.reader_names}
        strategy = self.build(readers)
        with pytest.raises((StopAsyncIteration, StopIteration)):
            self.sample(strategy, max(self.steps) + 1000)

    @rule("state", "state_dict() is JSON-able and load_state_dict() restores the positions")
    def test_state_round_trip(self) -> None:
        strategy = self.build()
        if not callable(getattr(strategy, "state_dict", None)):
            pytest.skip(f"{self._component_name()} has no state_dict()")
        self.sample(strategy, self.steps[0])
        state = strategy.state_dict()
        json.dumps(state)
        after = [e.eid.uid for e in self.sample(strategy, self.steps[-1])[0]]
        restored = self.build()
        restored.load_state_dict(json.loads(json.dumps(state)))
        again = [e.eid.uid for e in self.sample(restored, self.steps[-1])[0]]
        assert after == again, f"after load_state_dict, sampling gave {again}, not {after}"
