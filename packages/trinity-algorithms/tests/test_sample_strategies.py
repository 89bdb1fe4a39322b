"""Sample strategies over a tiny in-memory reader (the buffer package is not a dependency)."""

from __future__ import annotations

import asyncio
import random
from typing import Any, Optional

import pytest
import torch

from trinity.algorithm.policy_loss_fn import POLICY_LOSS_FN
from trinity.algorithm.sample_strategy import (
    SAMPLE_STRATEGY,
    DefaultSampleStrategy,
    MixSampleStrategy,
    StaleDataError,
    StalenessControlSampleStrategy,
    WarmupSampleStrategy,
    build_sample_strategy,
)
from trinity.algorithm.utils import build_component
from trinity.common.experience import EID, Experience, collate_experiences
from trinity.common.protocols import ExperienceReader, StatefulReader


class ListReader:
    """A FIFO over a list; ``batch_size=None`` reads ``default_batch_size``."""

    def __init__(self, exps: list[Experience], default_batch_size: int = 4) -> None:
        self.exps = list(exps)
        self.pos = 0
        self.default_batch_size = default_batch_size
        self.calls: list[Optional[int]] = []

    def read(self, batch_size: Optional[int] = None) -> list[Experience]:
        self.calls.append(batch_size)
        if self.pos >= len(self.exps):
            raise StopIteration
        n = self.default_batch_size if batch_size is None else batch_size
        out = self.exps[self.pos : self.pos + n]
        self.pos += len(out)
        return out

    async def read_async(self, batch_size: Optional[int] = None) -> list[Experience]:
        try:
            return self.read(batch_size)
        except StopIteration:
            raise StopAsyncIteration from None

    def state_dict(self) -> dict[str, Any]:
        return {"pos": self.pos}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pos = state["pos"]


class HintedReader(ListReader):
    """A version-aware reader: takes the ``min_model_version`` hint and records it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hints: list[Optional[int]] = []

    async def read_async(
        self, batch_size: Optional[int] = None, min_model_version: Optional[int] = None
    ) -> list[Experience]:
        self.hints.append(min_model_version)
        return await super().read_async(batch_size)


def exp(version: Optional[int] = None, reward: float = 1.0, n_resp: int = 3, **kw) -> Experience:
    return Experience(
        eid=EID(batch=0, task=0),
        tokens=torch.arange(2 + n_resp),
        prompt_length=2,
        reward=reward,
        model_version=version,
        **kw,
    )


def rl_exp(version: int = 0, n_resp: int = 3) -> Experience:
    return exp(
        version,
        n_resp=n_resp,
        logprobs=torch.full((n_resp,), -0.5),
        advantages=torch.ones(n_resp),
    )


def sample(strategy, step: int, version: Optional[int] = None):
    return asyncio.run(strategy.sample(step, current_model_version=version))


def test_reader_protocol_is_structural():
    reader = ListReader([])
    assert isinstance(reader, ExperienceReader)
    assert isinstance(reader, StatefulReader)
    assert not isinstance(object(), ExperienceReader)


def test_registered_names():
    assert {"default", "warmup", "staleness_control", "mix"} <= set(SAMPLE_STRATEGY.list())


# ---------------------------------------------------------------- default / warmup


def test_default_reads_one_batch_from_the_main_buffer():
    reader = ListReader([exp(v) for v in range(10)])
    strategy = DefaultSampleStrategy({"experience_buffer": reader}, train_batch_size=4)
    batch, metrics = sample(strategy, 1)
    assert [e.model_version for e in batch] == [0, 1, 2, 3]
    assert reader.calls == [4]
    assert metrics["sample/model_version/mean"] == 1.5
    assert metrics["sample/model_version/max"] == 3.0
    assert "time/read_experience" in metrics


def test_default_uses_the_reader_batch_size_and_a_lone_reader():
    reader = ListReader([exp() for _ in range(10)], default_batch_size=3)
    strategy = DefaultSampleStrategy({"my_queue": reader})  # a lone reader is the main one
    batch, _ = sample(strategy, 1)
    assert len(batch) == 3 and reader.calls == [None]


def test_missing_reader_is_a_clear_error():
    strategy = DefaultSampleStrategy({"a": ListReader([]), "b": ListReader([])})
    with pytest.raises(KeyError, match="experience_buffer"):
        sample(strategy, 1)


def test_warmup_reads_sft_data_first():
    main = ListReader([exp(reward=1.0) for _ in range(8)], default_batch_size=2)
    sft = ListReader([exp(reward=0.0) for _ in range(8)], default_batch_size=2)
    strategy = WarmupSampleStrategy(
        {"experience_buffer": main, "sft_dataset": sft}, sft_warmup_steps=2
    )
    rewards = [[e.reward for e in sample(strategy, s)[0]] for s in (1, 2, 3)]
    assert rewards == [[0.0, 0.0], [0.0, 0.0], [1.0, 1.0]]
    assert strategy.warmup_state(2) == (True, True)
    assert strategy.warmup_state(3) == (False, False)


def test_warmup_without_steps_is_default_and_needs_no_sft_reader():
    strategy = build_sample_strategy("warmup", {"experience_buffer": ListReader([exp()])})
    batch, _ = sample(strategy, 1)
    assert len(batch) == 1
    with pytest.raises(ValueError, match="sft_dataset"):
        WarmupSampleStrategy({"experience_buffer": ListReader([])}, sft_warmup_steps=1)


# ---------------------------------------------------------------- staleness control


def test_staleness_drops_old_experiences_and_refills():
    versions = [3, 9, 10, 7, 8, 10, 2, 9, 10, 10]
    reader = ListReader([exp(v) for v in versions])
    strategy = StalenessControlSampleStrategy(
        {"experience_buffer": reader}, max_staleness=2, train_batch_size=4
    )
    batch, metrics = sample(strategy, step=5, version=10)
    assert [e.model_version for e in batch] == [9, 10, 8, 10]  # 3 and 7 dropped
    assert all(10 - e.model_version <= 2 for e in batch)
    assert reader.calls == [4, 2]  # refilled exactly the missing rows
    assert metrics["sample/stale_dropped"] == 2.0
    assert metrics["sample/read_attempts"] == 2.0
    assert metrics["sample/staleness/max"] == 2.0
    assert metrics["sample/staleness/mean"] == pytest.approx((1 + 0 + 2 + 0) / 4)

    batch, metrics = sample(strategy, step=6, version=10)
    assert [e.model_version for e in batch] == [9, 10, 10]  # 2 dropped; then exhausted
    assert metrics["sample/stale_dropped"] == 1.0
    assert metrics["sample/stale_dropped_total"] == 3.0


def test_staleness_defaults_current_version_to_step():
    reader = ListReader([exp(v) for v in (0, 4, 5, 5)])
    strategy = StalenessControlSampleStrategy(
        {"experience_buffer": reader}, max_staleness=0, train_batch_size=2
    )
    batch, metrics = sample(strategy, step=5)
    assert [e.model_version for e in batch] == [5, 5]
    assert metrics["sample/stale_dropped"] == 2.0


def test_staleness_never_returns_stale_data_randomized():
    rng = random.Random(0)
    for trial in range(20):
        max_staleness = rng.randint(0, 3)
        exps = [exp(rng.randint(0, 30)) for _ in range(400)]
        reader = ListReader(exps, default_batch_size=rng.randint(1, 8))
        strategy = StalenessControlSampleStrategy(
            {"experience_buffer": reader},
            max_staleness=max_staleness,
            train_batch_size=rng.choice([None, 5, 16]),
        )
        seen = 0
        for step in range(1, 200):
            current = rng.randint(0, 30)
            try:
                batch, metrics = sample(strategy, step, current)
            except (StopAsyncIteration, StaleDataError):
                break
            assert batch
            assert all(current - e.model_version <= max_staleness for e in batch), trial
            seen += len(batch)
            assert metrics["sample/stale_dropped_total"] == strategy.stale_dropped_total
        # every consumed experience was either returned or counted as dropped
        assert seen + strategy.stale_dropped_total == reader.pos


def test_staleness_raises_when_nothing_is_fresh():
    reader = ListReader([exp(0) for _ in range(6)], default_batch_size=2)
    strategy = StalenessControlSampleStrategy(
        {"experience_buffer": reader}, max_staleness=1, max_read_attempts=2
    )
    with pytest.raises(StaleDataError, match="max_staleness=1"):
        sample(strategy, step=10)
    # two stale left, then exhausted with nothing kept: the reader's signal is re-raised
    with pytest.raises(StopAsyncIteration):
        sample(strategy, step=10)
    assert strategy.stale_dropped_total == 6


def test_staleness_unversioned_experiences():
    exps = [exp(None), exp(10), exp(None), exp(10)]
    strategy = StalenessControlSampleStrategy(
        {"experience_buffer": ListReader(list(exps))}, max_staleness=0, train_batch_size=4
    )
    batch, metrics = sample(strategy, 10)
    assert len(batch) == 4 and metrics["sample/unversioned"] == 2.0

    strategy = StalenessControlSampleStrategy(
        {"experience_buffer": ListReader(list(exps))},
        max_staleness=0,
        drop_unversioned=True,
        train_batch_size=4,
    )
    batch, metrics = sample(strategy, 10)
    assert [e.model_version for e in batch] == [10, 10]
    assert metrics["sample/stale_dropped"] == 2.0


def test_staleness_hint_goes_only_to_readers_that_take_it():
    hinted = HintedReader([exp(7), exp(8), exp(9)])
    strategy = StalenessControlSampleStrategy(
        {"experience_buffer": hinted}, max_staleness=2, train_batch_size=2
    )
    batch, _ = sample(strategy, 1, version=10)
    assert hinted.hints == [8, 8]
    assert [e.model_version for e in batch] == [8, 9]


def test_staleness_unlimited_by_default():
    strategy = build_sample_strategy(
        "staleness_control",
        {"experience_buffer": ListReader([exp(0), exp(100)])},
        train_batch_size=2,
    )
    assert strategy.max_staleness is None
    batch, metrics = sample(strategy, 1000)
    assert len(batch) == 2 and metrics["sample/stale_dropped"] == 0.0


def test_staleness_rejects_bad_args():
    with pytest.raises(ValueError):
        StalenessControlSampleStrategy({"experience_buffer": ListReader([])}, max_staleness=-1)
    with pytest.raises(ValueError):
        StalenessControlSampleStrategy(
            {"experience_buffer": ListReader([])}, max_staleness=1, max_read_attempts=0
        )


# ---------------------------------------------------------------- mix


def _mix(ratio: float = 0.25, batch: int = 8):
    usual = ListReader([rl_exp(3, n_resp=3) for _ in range(20)])
    expert = ListReader([exp(None, reward=None, n_resp=2) for _ in range(20)])
    strategy = build_sample_strategy(
        "mix",
        {"experience_buffer": usual, "sft_dataset": expert},
        {"expert_data_ratio": ratio},
        train_batch_size=batch,
    )
    return strategy, usual, expert


def test_mix_splits_the_batch_and_flags_expert_rows():
    strategy, usual, expert = _mix(0.25, 8)
    assert isinstance(strategy, MixSampleStrategy)
    assert (strategy.expert_batch_size, strategy.usual_batch_size) == (2, 6)
    batch, metrics = sample(strategy, 7)
    assert usual.calls == [6] and expert.calls == [2]
    assert [e.info["is_expert"] for e in batch] == [False] * 6 + [True] * 2
    assert all(e.info["step"] == 7 for e in batch)
    assert metrics["sample/expert_count"] == 2.0 and metrics["sample/usual_count"] == 6.0
    for e in batch[6:]:  # rollout-only fields filled so the batch collates
        assert e.reward == 0.0
        torch.testing.assert_close(e.logprobs, torch.zeros(2))
        torch.testing.assert_close(e.advantages, torch.zeros(2))

    collated = collate_experiences(batch)
    expected = torch.tensor([False] * 6 + [True] * 2)
    assert torch.equal(collated.custom_fields["expert_mask"], expected)
    assert torch.equal(collated.custom_fields["is_expert_mask"], expected)
    assert torch.equal(collated.custom_fields["step"], torch.full((8,), 7, dtype=torch.int32))


def test_mix_expert_rows_get_every_rollout_field_the_rl_rows_carry():
    """GRPO's explorer-side advantages also set ``returns``: expert rows need zeros there too,
    or the batch does not collate ("returns is set on 128 of 256 experiences")."""
    strategy, usual, _ = _mix(0.5, 4)
    for e in usual.exps:
        e.returns = e.advantages.clone()
    batch, _ = sample(strategy, 1)
    for e in batch[2:]:
        torch.testing.assert_close(e.returns, torch.zeros(2))
    collated = collate_experiences(batch)
    assert collated.returns is not None and collated.returns.shape[0] == 4
    # rows without returns stay without them
    strategy, _, _ = _mix(0.5, 4)
    batch, _ = sample(strategy, 1)
    assert all(e.returns is None for e in batch)


def test_mix_batch_feeds_the_mix_policy_loss():
    strategy, _, _ = _mix(0.5, 4)
    batch, _ = sample(strategy, 1)
    collated = collate_experiences(batch)
    loss_fn = build_component(POLICY_LOSS_FN.get("mix"), {"mu": 0.5})
    logprob = collated.logprobs.clone().requires_grad_(True)
    fields = {
        "old_logprob": collated.logprobs,
        "action_mask": collated.action_mask,
        "advantages": collated.advantages,
        **collated.custom_fields,
    }
    loss, metrics = loss_fn.compute(logprob, fields)
    assert torch.isfinite(loss)
    loss.backward()
    assert logprob.grad is not None
    assert any(k.startswith("expert/") for k in metrics)


def test_mix_edge_ratios_and_errors():
    strategy, usual, _ = _mix(1.0, 4)
    batch, _ = sample(strategy, 1)
    assert usual.calls == [] and all(e.info["is_expert"] for e in batch)
    strategy, _, expert = _mix(0.0, 4)
    batch, _ = sample(strategy, 1)
    assert expert.calls == [] and not any(e.info["is_expert"] for e in batch)

    readers = {"experience_buffer": ListReader([]), "sft_dataset": ListReader([])}
    with pytest.raises(ValueError, match="train_batch_size"):
        MixSampleStrategy(readers)
    with pytest.raises(ValueError, match="'sft_dataset'"):
        MixSampleStrategy({"experience_buffer": ListReader([])}, train_batch_size=4)
    with pytest.raises(ValueError, match="expert_data_ratio"):
        MixSampleStrategy(readers, expert_data_ratio=1.5, train_batch_size=4)


# ---------------------------------------------------------------- state


def test_state_dict_round_trips_reader_positions():
    reader = ListReader([exp() for _ in range(10)])
    strategy = DefaultSampleStrategy({"experience_buffer": reader}, train_batch_size=3)
    sample(strategy, 1)
    state = strategy.state_dict()
    assert state == {"experience_buffer": {"pos": 3}}
    sample(strategy, 2)
    strategy.load_state_dict(state)
    assert reader.pos == 3


def test_build_sample_strategy_merges_defaults_args_and_context():
    strategy = build_sample_strategy(
        SAMPLE_STRATEGY.get("staleness_control"),
        {"experience_buffer": ListReader([])},
        {"max_staleness": 3},
        train_batch_size=16,
    )
    assert strategy.max_staleness == 3
    assert strategy.max_read_attempts == 64
    assert strategy.train_batch_size == 16


# --------------------------------------------------------------------------------------
# Trinity-RFT's constructor: SAMPLE_STRATEGY.get(name)(buffer_config=config.buffer, **args)
# --------------------------------------------------------------------------------------

#: rows of the in-memory storage below, by storage name
_MEMORY: dict[str, list[Experience]] = {}


class MemoryStorageReader(ListReader):
    """A storage plugin (``storage_type: memory_rows``) over ``_MEMORY[config.name]``, as the
    buffer's readers are built: ``cls(storage_config)``."""

    def __init__(self, storage_config: Any) -> None:
        super().__init__(_MEMORY[storage_config.name], storage_config.batch_size or 4)


@pytest.fixture
def memory_storage():
    from trinity.common.storage import READER

    READER.register_module("memory_rows", MemoryStorageReader, force=True)
    yield _MEMORY
    _MEMORY.clear()
    READER.unregister("memory_rows")


def _buffer_config(train_batch_size: int = 4, sft: bool = False):
    from trinity.common.config import BufferConfig, ExperienceBufferConfig

    config = BufferConfig(train_batch_size=train_batch_size)
    config.trainer_input.experience_buffer = ExperienceBufferConfig(
        name="rl_rows", storage_type="memory_rows"
    )
    if sft:
        config.trainer_input.auxiliary_buffers = {
            "sft_dataset": ExperienceBufferConfig(name="sft_rows", storage_type="memory_rows")
        }
    return config


def test_trinity_rft_constructor_builds_readers_from_the_buffer_config(memory_storage):
    memory_storage["rl_rows"] = [exp(version=v, reward=float(v)) for v in range(6)]
    strategy = SAMPLE_STRATEGY.get("default")(buffer_config=_buffer_config(train_batch_size=4))
    assert strategy.train_batch_size == 4
    exps, metrics, samples = asyncio.run(strategy.sample(step=1))  # Trinity-RFT's 3 values
    assert [e.model_version for e in exps] == [0, 1, 2, 3]
    assert metrics["sample/model_version/max"] == 3.0
    assert [s["reward"] for s in samples] == [0.0, 3.0]  # lowest and highest reward
    # positional, as Trinity-RFT's subclasses call super().__init__(buffer_config)
    again = DefaultSampleStrategy(_buffer_config(train_batch_size=2))
    assert len(asyncio.run(again.sample(1))) == 3


def test_trinity_rft_constructor_with_strategy_arguments(memory_storage):
    memory_storage["rl_rows"] = [exp(version=v) for v in range(8)]
    memory_storage["sft_rows"] = [exp(reward=0.0) for _ in range(8)]
    staleness = StalenessControlSampleStrategy(
        buffer_config=_buffer_config(train_batch_size=2), max_staleness=1
    )
    exps, _, _ = asyncio.run(staleness.sample(step=3))  # versions 0 and 1 are too old
    assert [e.model_version for e in exps] == [2, 3]
    mix = MixSampleStrategy(buffer_config=_buffer_config(4, sft=True), expert_data_ratio=0.5)
    exps, metrics, _ = asyncio.run(mix.sample(step=1))
    assert [e.info["is_expert"] for e in exps] == [False, False, True, True]
    assert metrics["sample/expert_count"] == 2.0


def test_readers_keep_the_two_value_result():
    strategy = DefaultSampleStrategy({"experience_buffer": ListReader([exp(0)] * 4)})
    assert len(asyncio.run(strategy.sample(1))) == 2


def test_a_strategy_without_readers_or_buffer_config_is_refused():
    with pytest.raises(TypeError, match="needs readers .* or buffer_config"):
        DefaultSampleStrategy()


def test_build_sample_strategy_gives_a_trinity_rft_strategy_the_buffer_config(memory_storage):
    """A user's strategy written for Trinity-RFT: ``__init__(self, buffer_config, **kwargs)``,
    three return values; the trainer's factory hands it the run's buffer config."""
    memory_storage["rl_rows"] = [exp(version=v) for v in range(4)]

    class UpstreamStyle(DefaultSampleStrategy):
        def __init__(self, buffer_config, **kwargs):
            super().__init__(buffer_config=buffer_config, **kwargs)
            self.seen_config = buffer_config

    buffer = _buffer_config(train_batch_size=2)
    built = build_sample_strategy(UpstreamStyle, {}, {}, buffer_config=buffer)
    assert built.seen_config is buffer
    assert len(asyncio.run(built.sample(1))[0]) == 2
    # this package's strategies still get the trainer's readers
    readers = {"experience_buffer": ListReader([exp(0)] * 4)}
    ours = build_sample_strategy("default", readers, {}, buffer_config=buffer)
    assert ours.readers == readers and len(asyncio.run(ours.sample(1))) == 2


def test_a_version_recorded_in_info_counts_as_trinity_rft_records_it():
    rows = [exp(info={"model_version": v}) for v in (0, 1, 2, 3)]
    strategy = StalenessControlSampleStrategy(
        {"experience_buffer": ListReader(rows)}, train_batch_size=2, max_staleness=1
    )
    exps, metrics = sample(strategy, step=3)
    assert [e.info["model_version"] for e in exps] == [2, 3]
    assert metrics["sample/model_version/min"] == 2.0 and metrics["sample/stale_dropped"] == 2.0


def test_staleness_correct_keeps_stale_experiences_for_rollout_correction():
    """``stale: correct``: nothing is dropped, the stale ones are counted as corrected and no
    ``min_model_version`` hint goes to the reader (it would skip them)."""
    hinted = HintedReader([exp(3), exp(9), exp(10), exp(7)])
    strategy = StalenessControlSampleStrategy(
        {"experience_buffer": hinted}, max_staleness=2, train_batch_size=4, stale="correct"
    )
    batch, metrics = sample(strategy, 5, version=10)
    assert [e.model_version for e in batch] == [3, 9, 10, 7]
    assert hinted.hints == [None]
    assert metrics["sample/stale_dropped"] == 0.0 and strategy.stale_dropped_total == 0
    assert metrics["sample/stale_corrected"] == 2.0  # 3 and 7 are > 2 versions old
    assert metrics["sample/staleness/max"] == 7.0

    dropping = StalenessControlSampleStrategy(
        {"experience_buffer": ListReader([exp(3), exp(9), exp(10), exp(7)])},
        max_staleness=2,
        train_batch_size=4,
        stale="drop",
    )
    batch, metrics = sample(dropping, 5, version=10)
    assert [e.model_version for e in batch] == [9, 10]
    assert metrics["sample/stale_corrected"] == 0.0 and metrics["sample/stale_dropped"] == 2.0
    with pytest.raises(ValueError, match="stale"):
        StalenessControlSampleStrategy({"experience_buffer": ListReader([])}, stale="fix")
