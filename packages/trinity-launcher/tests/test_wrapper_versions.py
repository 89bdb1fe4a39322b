"""``EngineModelWrapper.refresh_model_version``: the tasks a runner starts together share one
model-version ask (each task refreshes before it runs; every ask is a round trip through the
engine's event loop)."""

from __future__ import annotations

import asyncio

import pytest

from trinity.launcher.engines import EngineModelWrapper, EngineSettings
from trinity.launcher.engines.testing import FakeEngine


class _SlowVersionEngine(FakeEngine):
    """Counts the version asks; each answer takes a round trip's time, or fails on demand."""

    def __init__(self, settings: EngineSettings) -> None:
        super().__init__(settings)
        self.asks = 0
        self.fail_next = False

    async def get_model_version(self) -> int:
        self.asks += 1
        version = self.model_version
        await asyncio.sleep(0.05)
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("engine unreachable")
        return version


def _engine() -> _SlowVersionEngine:
    return _SlowVersionEngine(EngineSettings(model_path="fake", engine_type="fake", seed=0))


def test_clones_refreshing_together_ask_once_and_later_refreshes_ask_again():
    engine = _engine()

    async def go():
        wrapper = await EngineModelWrapper.create(engine)
        asked_at_create = engine.asks
        clones = [wrapper.clone_with_isolated_history() for _ in range(8)]
        engine.model_version = 3
        together = await asyncio.gather(*(c.refresh_model_version() for c in clones))
        shared = engine.asks - asked_at_create
        engine.model_version = 4
        later = await clones[5].refresh_model_version()
        return together, shared, later, [c.model_version for c in clones]

    together, shared, later, stamps = asyncio.run(go())
    assert together == [3] * 8
    assert shared == 1
    assert later == 4  # an ask is shared only while in flight: a later one sees the update
    assert stamps == [3] * 5 + [4] + [3] * 2


def test_a_failed_ask_fails_every_clone_waiting_on_it_and_the_next_ask_retries():
    engine = _engine()

    async def go():
        wrapper = await EngineModelWrapper.create(engine)
        clones = [wrapper.clone_with_isolated_history() for _ in range(3)]
        engine.fail_next = True
        outcomes = await asyncio.gather(
            *(c.refresh_model_version() for c in clones), return_exceptions=True
        )
        engine.model_version = 2
        return outcomes, await clones[0].refresh_model_version()

    outcomes, retried = asyncio.run(go())
    assert [type(o) for o in outcomes] == [RuntimeError] * 3
    assert retried == 2


def test_a_cancelled_waiter_does_not_cancel_the_ask_the_others_share():
    engine = _engine()

    async def go():
        wrapper = await EngineModelWrapper.create(engine)
        a, b = wrapper.clone_with_isolated_history(), wrapper.clone_with_isolated_history()
        engine.model_version = 5
        first = asyncio.ensure_future(a.refresh_model_version())
        second = asyncio.ensure_future(b.refresh_model_version())
        await asyncio.sleep(0.01)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        return await second

    assert asyncio.run(go()) == 5
