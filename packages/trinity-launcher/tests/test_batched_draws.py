"""A runner's concurrent ``draw_chat`` calls go to the engine as one call
(``trinity.launcher.engines.batched_draws``), each keeping its own outcome: its result, its
exception, or its cancellation, which reaches its request on the engine and no other.

The engine side here is :func:`draw_together` over a stand-in ``draw`` and the actor handle a
stand-in whose ``method.remote(...)`` runs the method on this event loop, so every step of the
protocol (one call per turn, the per-call results, ``cancel_draws``) runs for real without Ray;
the vLLM engine's side (its requests in one engine step) runs in every quickstart run of the
suite. ``inproc_core``'s ``held`` is checked on a stub core below.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import types

import pytest

from trinity.launcher.engines.batched_draws import (
    DrawBatcher,
    DrawRegistry,
    draw_together,
    portable_error,
)


class _Method:
    def __init__(self, fn):
        self.fn = fn

    def remote(self, *args, **kwargs):
        return asyncio.ensure_future(self.fn(*args, **kwargs))


class _Stream:
    """A Ray generator method's ``remote``: an async iterator of awaitable answers."""

    def __init__(self, fn):
        self.fn = fn

    def remote(self, *args, **kwargs):
        async def refs():
            async for item in self.fn(*args, **kwargs):
                ref = asyncio.get_running_loop().create_future()
                ref.set_result(item)
                yield ref

        return refs()


class StandInEngine:
    """An engine actor's handle as ``DrawBatcher`` uses it; ``draw`` answers each call with
    its conversation's last message, raises on ``"raise"``, hangs on ``"hang"``."""

    def __init__(self, fail_whole_call: bool = False):
        self.registry = DrawRegistry()
        self.batches: list[list[str]] = []
        self.single_calls: list[str] = []
        self.log: list[str] = []
        self.fail_whole_call = fail_whole_call
        self.draw_chat_many = _Stream(self._many)
        self.cancel_draws = _Method(self._cancel)
        self.draw_chat = _Method(self._single)

    async def draw(self, messages, **kwargs):
        text = messages[-1]["content"]
        if text == "raise":
            raise ValueError("bad request (injected)")
        if text == "unpicklable":
            raise _Unpicklable(lambda: None)
        if text == "hang":
            self.log.append("started")
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                self.log.append("cancelled")
                raise
        return f"draws of {text} n={kwargs.get('n')}"

    async def _many(self, calls):
        self.batches.append([messages[-1]["content"] for _, messages, _ in calls])
        if self.fail_whole_call:
            raise ConnectionError("the engine actor died (injected)")
        async for finished in draw_together(
            self.registry, calls, self.draw, contextlib.nullcontext
        ):
            yield finished

    async def _cancel(self, keys):
        self.registry.cancel(keys)

    async def _single(self, messages, **kwargs):
        self.single_calls.append(messages[-1]["content"])
        return await self.draw(messages, **kwargs)


class _Unpicklable(Exception):
    def __init__(self, fn):
        super().__init__("holds a lambda")
        self.fn = fn


def _chat(text):
    return [{"role": "user", "content": text}]


def test_the_calls_of_one_turn_reach_the_engine_as_one_call_each_with_its_result():
    engine = StandInEngine()

    async def main():
        batcher = DrawBatcher(engine, asyncio.get_running_loop())
        first = await asyncio.gather(
            *(batcher.draw_chat(_chat(f"q{i}"), {"n": i}) for i in range(8))
        )
        second = await batcher.draw_chat(_chat("later"), {"n": 1})
        return first, second

    first, second = asyncio.run(main())
    assert first == [f"draws of q{i} n={i}" for i in range(8)]
    assert second == "draws of later n=1"
    assert engine.batches == [[f"q{i}" for i in range(8)], ["later"]]


def test_an_answer_comes_back_when_ready_not_with_the_slowest_of_its_call():
    """A multi-turn workflow's next turn must not wait for a longer request of its batch."""
    registry = DrawRegistry()

    async def draw(messages, **kwargs):
        await asyncio.sleep(float(messages[-1]["content"]))
        return messages[-1]["content"]

    async def main():
        calls = [("a", _chat("0.5"), {}), ("b", _chat("0"), {}), ("c", _chat("0.01"), {})]
        order, start = [], asyncio.get_running_loop().time()
        async for finished in draw_together(registry, calls, draw, contextlib.nullcontext):
            order += [(i, round(asyncio.get_running_loop().time() - start, 1)) for i, _ in finished]
        return order

    order = asyncio.run(main())
    assert [i for i, _ in order] == [1, 2, 0]
    assert order[0][1] < 0.3 and order[-1][1] >= 0.4


def test_a_call_that_raises_fails_alone_with_the_engine_traceback_noted():
    engine = StandInEngine()

    async def main():
        batcher = DrawBatcher(engine, asyncio.get_running_loop())
        calls = [batcher.draw_chat(_chat(t), {}) for t in ("a", "raise", "unpicklable", "b")]
        return await asyncio.gather(*calls, return_exceptions=True)

    a, bad, odd, b = asyncio.run(main())
    assert (a, b) == ("draws of a n=None", "draws of b n=None")
    assert isinstance(bad, ValueError) and "injected" in str(bad)
    assert any("raised in the rollout engine" in n and "in draw" in n for n in bad.__notes__)
    # an exception that cannot travel back is named instead of failing the whole batch
    assert isinstance(odd, RuntimeError) and "_Unpicklable: holds a lambda" in str(odd)
    assert len(engine.batches) == 1


def test_a_cancelled_call_is_cancelled_on_the_engine_and_the_others_go_on():
    """A task past ``explorer.max_timeout``: Ray cancels its ``run_task``, so its draw is
    cancelled in the runner; its request must stop on the engine too, and only its own."""
    engine = StandInEngine()

    async def main():
        batcher = DrawBatcher(engine, asyncio.get_running_loop())
        hung = asyncio.ensure_future(batcher.draw_chat(_chat("hang"), {}))
        fine = asyncio.ensure_future(batcher.draw_chat(_chat("ok"), {}))
        for _ in range(100):  # the batch is on the engine
            if engine.log:
                break
            await asyncio.sleep(0.01)
        hung.cancel()
        with pytest.raises(asyncio.CancelledError):
            await hung
        for _ in range(100):
            if "cancelled" in engine.log:
                break
            await asyncio.sleep(0.01)
        return await asyncio.wait_for(fine, 5)

    assert asyncio.run(main()) == "draws of ok n=None"
    assert engine.log == ["started", "cancelled"]
    assert engine.batches == [["hang", "ok"]]
    assert engine.registry.running == {}


def test_a_call_cancelled_before_its_turn_ends_is_never_sent():
    engine = StandInEngine()

    async def main():
        batcher = DrawBatcher(engine, asyncio.get_running_loop())
        dropped = asyncio.ensure_future(batcher.draw_chat(_chat("dropped"), {}))
        await asyncio.sleep(0)  # queued, not yet sent
        dropped.cancel()
        kept = await batcher.draw_chat(_chat("kept"), {})
        return dropped.cancelled(), kept

    assert asyncio.run(main()) == (True, "draws of kept n=None")
    assert engine.batches == [["kept"]]


def test_a_cancel_that_arrives_before_its_call_cancels_the_call_when_it_starts():
    registry = DrawRegistry()
    drawn: list[str] = []

    async def draw(messages, **kwargs):
        drawn.append(messages[-1]["content"])
        return "drawn"

    async def main():
        registry.cancel(["k1"])
        calls = [("k1", _chat("x"), {}), ("k2", _chat("y"), {})]
        answers = {}
        async for finished in draw_together(registry, calls, draw, contextlib.nullcontext):
            answers.update(finished)
        return answers[0], answers[1]

    first, second = asyncio.run(main())
    assert isinstance(first, asyncio.CancelledError) and second == "drawn"
    assert drawn == ["y"]
    assert not registry.take_early_cancel("k1")  # applied once, then forgotten


def test_early_cancels_are_kept_up_to_a_bound_the_oldest_forgotten_first(monkeypatch):
    """A cancel whose call never comes (its runner died) must not be kept forever."""
    from trinity.launcher.engines import batched_draws

    monkeypatch.setattr(batched_draws, "EARLY_CANCELS_KEPT", 3)
    registry = DrawRegistry()
    registry.cancel(["a", "b", "c", "d"])
    assert [registry.take_early_cancel(k) for k in "abcd"] == [False, True, True, True]


def test_when_the_engine_call_itself_fails_every_waiting_call_fails_with_it():
    engine = StandInEngine(fail_whole_call=True)

    async def main():
        batcher = DrawBatcher(engine, asyncio.get_running_loop())
        calls = [batcher.draw_chat(_chat(f"q{i}"), {}) for i in range(3)]
        return await asyncio.gather(*calls, return_exceptions=True)

    results = asyncio.run(main())
    assert all(isinstance(r, ConnectionError) and "injected" in str(r) for r in results)


def test_calls_from_another_event_loop_are_sent_one_by_one():
    """A synchronous workflow's ``model.chat`` runs its coroutine on a loop of its own."""
    engine = StandInEngine()
    home = asyncio.new_event_loop()
    try:
        batcher = DrawBatcher(engine, home)

        async def main():
            return await asyncio.gather(*(batcher.draw_chat(_chat(t), {}) for t in "ab"))

        assert asyncio.run(main()) == ["draws of a n=None", "draws of b n=None"]
    finally:
        home.close()
    assert engine.batches == [] and engine.single_calls == ["a", "b"]


def test_portable_error_keeps_a_cancellation_as_it_is():
    exc = asyncio.CancelledError()
    assert portable_error(exc) is exc


def test_requests_posted_while_held_reach_the_core_thread_together_and_in_order():
    """``inproc_core``'s ``held``: what the engine's event loop posts meanwhile is one item for
    the core thread, run in order after the hold ends (nested holds: after the outer one)."""
    from trinity.launcher.engines.inproc_core import _CoreThread

    ran: list[tuple[int, str]] = []

    class Scheduler:
        def has_requests(self):
            return False

    class StubClient:
        def __init__(self, vllm_config, executor_class, log_stats):
            self.engine_core = types.SimpleNamespace(scheduler=Scheduler())

        def shutdown(self):
            pass

    client_cls = type("StubThreadedClient", (_CoreThread, StubClient), {})

    def record(i):
        ran.append((i, threading.current_thread().name))

    async def main():
        client = client_cls(None, None, False)
        try:
            with client.held():
                client._post(record, 1)
                with client.held():
                    client._post(record, 2)
                await asyncio.sleep(0.1)
                assert ran == []  # held back, nested hold included
                client._post(record, 3)
            for _ in range(200):
                if len(ran) == 3:
                    break
                await asyncio.sleep(0.01)
            client._post(record, 4)  # not held: on its own
            for _ in range(200):
                if len(ran) == 4:
                    break
                await asyncio.sleep(0.01)
        finally:
            client.shutdown()

    asyncio.run(main())
    assert [i for i, _ in ran] == [1, 2, 3, 4]
    assert {name for _, name in ran} == {"vllm-engine-core"}
