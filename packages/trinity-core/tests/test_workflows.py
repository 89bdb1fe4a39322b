"""Task, Workflow, MultiTurnWorkflow and run_task against the deterministic model double."""

from __future__ import annotations

import asyncio
import sys
import uuid

import openai
import pytest
import torch

import trinity.common.rewards as rewards_mod
import trinity.common.workflows as workflows_mod
from trinity.common.config import FormatConfig, GenerationConfig
from trinity.common.experience import Experience
from trinity.common.models.testing import FakeModelWrapper
from trinity.common.rewards import REWARD_FUNCTIONS, RewardFn
from trinity.common.workflows import (
    WORKFLOWS,
    MultiTurnWorkflow,
    Task,
    Workflow,
    run_task,
    run_task_async,
)
from trinity.utils.registry import UnknownModuleError


@pytest.fixture
def names():
    """Unique registry names per test, unregistered afterwards."""
    made: list[tuple] = []

    def make(registry=WORKFLOWS):
        name = f"wf_{uuid.uuid4().hex[:8]}"
        made.append((registry, name))
        return name

    yield make
    for registry, name in made:
        registry.unregister(name)


class EchoWorkflow(Workflow):
    """Sync workflow: one chat call, reward 1 when the reply equals the truth."""

    def run(self):
        responses = self.model.chat(
            [{"role": "user", "content": self.task.task_desc}], n=self.task.rollout_args.n
        )
        for r in responses:
            r.reward = float(r.response_text == self.task.truth)
        return responses


class AsyncRepeatWorkflow(Workflow):
    """Async, repeatable: produces all repeat_times samples in one generation call."""

    can_repeat = True
    is_async = True

    async def run_async(self):
        responses = await self.model.chat_async(
            [{"role": "user", "content": "hi"}], n=self.repeat_times
        )
        for i, r in enumerate(responses):
            r.eid.run = self.run_id_base + i
            r.reward = 0.5
        return responses


def test_task_accepts_dicts_and_exposes_prompt_and_truth():
    task = Task(
        raw_task={"q": "1+2=", "a": "3"},
        format_args={"prompt_key": "q", "response_key": "a"},
        rollout_args={"n": 4, "temperature": 0.3},
    )
    assert isinstance(task.format_args, FormatConfig)
    assert isinstance(task.rollout_args, GenerationConfig)
    assert task.task_desc == "1+2=" and task.truth == "3"
    assert task.rollout_args.n == 4
    with pytest.raises(ValueError, match="repeat_times"):
        Task(repeat_times=0)


def test_unknown_or_missing_workflow_is_a_clear_error(names):
    WORKFLOWS.register_module(names(), EchoWorkflow)
    with pytest.raises(UnknownModuleError, match="Known names"):
        Task(workflow="no_such_workflow").to_workflow(FakeModelWrapper())
    with pytest.raises(ValueError, match="default_workflow_type"):
        Task().to_workflow(FakeModelWrapper())


def test_sync_workflow_runs_sync_and_async(names):
    name = names()
    WORKFLOWS.register_module(name, EchoWorkflow)
    model = FakeModelWrapper(["4", "5"])
    task = Task(
        workflow=name,
        raw_task={"prompt": "2+2=", "response": "4"},
        rollout_args=GenerationConfig(n=2),
    )
    wf = task.to_workflow(model)
    assert [e.reward for e in wf.run()] == [1.0, 0.0]
    assert [e.reward for e in asyncio.run(wf.run_async())] == [1.0, 0.0]


def test_async_workflow_runs_sync_inside_and_outside_a_loop():
    model = FakeModelWrapper(["x"])
    wf = AsyncRepeatWorkflow(task=Task(), model=model)
    wf.set_repeat_times(3, run_id_base=0)
    assert len(wf.run()) == 3  # no loop running

    async def inside():
        return wf.run()  # a loop is running: the sync twin must still work

    assert len(asyncio.run(inside())) == 3


def test_both_constructor_orders_are_accepted():
    model, task = FakeModelWrapper(), Task()
    for wf in (
        EchoWorkflow(task=task, model=model),
        EchoWorkflow(model, task),  # older guide: (model, task, auxiliary_models)
        EchoWorkflow(task, model, None),
        EchoWorkflow(model, task=task),
    ):
        assert wf.task is task and wf.model is model
    with pytest.raises(TypeError, match="needs task= and model="):
        EchoWorkflow(task=task)


def test_a_workflow_must_implement_run_or_run_async():
    class Empty(Workflow):
        pass

    with pytest.raises(TypeError, match="must implement run"):
        Empty(task=Task(), model=FakeModelWrapper())


def test_auxiliary_model_wrappers_become_openai_clients():
    aux = FakeModelWrapper(model_path="judge")
    wf = EchoWorkflow(task=Task(), model=FakeModelWrapper(), auxiliary_models=[aux])
    assert wf.auxiliary_model_wrappers == [aux]
    (client,) = wf.auxiliary_models
    assert isinstance(client, openai.OpenAI)
    awf = AsyncRepeatWorkflow(task=Task(), model=FakeModelWrapper(), auxiliary_models=[aux])
    assert isinstance(awf.auxiliary_models[0], openai.AsyncOpenAI)
    # clients given directly (older API) are kept as they are
    given = aux.get_openai_client()
    assert EchoWorkflow(task=Task(), model=aux, auxiliary_models=[given]).auxiliary_models == [
        given
    ]


def test_run_task_repeats_non_repeatable_workflows_and_stamps_ids(names):
    name = names()
    WORKFLOWS.register_module(name, EchoWorkflow)
    model = FakeModelWrapper(["4"], model_version=7)
    task = Task(
        workflow=name,
        raw_task={"prompt": "2+2=", "response": "4"},
        repeat_times=3,
        batch_id=5,
        task_id=2,
    )
    exps = run_task(task, model)
    assert len(exps) == 3
    assert [e.eid.run for e in exps] == [0, 1, 2]
    assert {e.eid.tid for e in exps} == {"5/2"}
    assert len({e.eid.uid for e in exps}) == 3
    assert {e.model_version for e in exps} == {7}


class EpisodeWorkflow(Workflow):
    """Sync, stateful like an environment: counts the runs an instance has made and the
    resets it got; optionally resettable."""

    def __init__(self, *, task, model, auxiliary_models=None):
        super().__init__(task=task, model=model, auxiliary_models=auxiliary_models)
        self.runs = 0
        self.resets = 0

    def reset(self, task):
        self.task = task
        self.resets += 1
        self.runs = 0  # a new episode

    def run(self):
        self.runs += 1
        [exp] = self.model.chat([{"role": "user", "content": "q"}], n=1)
        exp.info["runs_on_instance"] = self.runs
        exp.info["instance"] = id(self)
        exp.info["resets"] = self.resets
        return [exp]


class ResettableEpisodeWorkflow(EpisodeWorkflow):
    can_reset = True


@pytest.mark.parametrize("cls", [EpisodeWorkflow, ResettableEpisodeWorkflow])
def test_each_sequential_run_starts_afresh(names, cls):
    """As in Trinity-RFT 0.6's runner: a task's later runs get the instance reset for them
    (resettable) or a new instance, never the state the run before left."""
    name = names()
    WORKFLOWS.register_module(name, cls)
    task = Task(workflow=name, raw_task={"prompt": "q", "response": "a"}, repeat_times=3)
    exps = run_task(task, FakeModelWrapper(["a"]))
    assert [e.info["runs_on_instance"] for e in exps] == [1, 1, 1]
    if cls.can_reset:
        assert len({e.info["instance"] for e in exps}) == 1
        assert [e.info["resets"] for e in exps] == [0, 1, 2]
    else:
        assert [e.info["resets"] for e in exps] == [0, 0, 0]


def test_run_task_lets_repeatable_workflows_produce_all_runs(names):
    name = names()
    WORKFLOWS.register_module(name, AsyncRepeatWorkflow)
    model = FakeModelWrapper(["a"])
    exps, wf = asyncio.run(run_task_async(Task(workflow=name, repeat_times=4), model))
    assert len(model.calls) == 1, "one generation call for all samples"
    assert model.calls[0].kwargs["n"] == 4
    assert [e.eid.run for e in exps] == [0, 1, 2, 3]
    assert isinstance(wf, AsyncRepeatWorkflow)


def test_run_task_keeps_an_explicit_model_version_and_checks_return_type(names):
    class Versioned(Workflow):
        def run(self):
            return [Experience(tokens=[1, 2, 3], prompt_length=1, model_version=2)]

    class Wrong(Workflow):
        def run(self):
            return ["not an experience"]

    ok, bad = names(), names()
    WORKFLOWS.register_module(ok, Versioned)
    WORKFLOWS.register_module(bad, Wrong)
    assert run_task(Task(workflow=ok), FakeModelWrapper(model_version=9))[0].model_version == 2
    with pytest.raises(TypeError, match="must return a list of Experience"):
        run_task(Task(workflow=bad), FakeModelWrapper())


def test_reward_fn_names_resolve_for_the_workflow(names):
    rname = names(REWARD_FUNCTIONS)

    @REWARD_FUNCTIONS.register_module(rname)
    class Exact(RewardFn):
        def __call__(self, response, truth, **kwargs):
            return {"accuracy": float(response == truth) * self.scale}

    class Scored(Workflow):
        def run(self):
            fn = self.task.reward_fn(**self.task.reward_fn_args)
            out = self.model.chat([{"role": "user", "content": "q"}])
            for r in out:
                r.reward = sum(fn(response=r.response_text, truth=self.task.truth).values())
            return out

    wname = names()
    WORKFLOWS.register_module(wname, Scored)
    task = Task(
        workflow=wname,
        reward_fn=rname,
        reward_fn_args={"scale": 2.0},
        raw_task={"prompt": "q", "response": "yes"},
    )
    exps = run_task(task, FakeModelWrapper(["yes"]))
    assert exps[0].reward == 2.0
    assert task.reward_fn is Exact


def test_multi_turn_workflow_masks_only_model_tokens(names):
    class Dialogue(MultiTurnWorkflow):
        def run(self):
            messages = [
                {"role": "system", "content": "play"},
                {"role": "user", "content": "state 1"},
                {"role": "assistant", "content": "move a"},
                {"role": "user", "content": "state 2"},
                {"role": "assistant", "content": "move b"},
            ]
            return [
                self.process_messages_to_experience(
                    messages, reward=1.0, info={"steps": 2, "note": "x"}
                )
            ]

    model = FakeModelWrapper()
    (exp,) = Dialogue(task=Task(), model=model).run()
    assert exp.reward == 1.0 and exp.metrics["steps"] == 2.0 and exp.info["note"] == "x"
    response = exp.tokens[exp.prompt_length :]
    masked_text = model.tokenizer.decode(response[exp.action_mask.bool()], skip_special_tokens=True)
    assert "move a" in masked_text and "move b" in masked_text
    assert "state 2" not in masked_text
    unmasked = model.tokenizer.decode(response[~exp.action_mask.bool()], skip_special_tokens=True)
    assert "state 2" in unmasked


def test_truncated_multi_turn_conversation_earns_no_reward():
    class Cut(MultiTurnWorkflow):
        def run(self):
            msgs = [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]
            return [
                self.process_messages_to_experience(
                    msgs, reward=1.0, truncate_status="response_truncated"
                )
            ]

    (exp,) = Cut(task=Task(), model=FakeModelWrapper()).run()
    assert exp.reward == 0.0 and exp.truncate_status == "response_truncated"


def test_guide_class_paths_resolve_through_entry_points(tmp_path, monkeypatch):
    """`trinity.common.workflows.MathWorkflow` resolves to a class of another distribution."""
    mod = f"fake_builtin_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{mod}.py").write_text(
        "from trinity.common.workflows import WORKFLOWS, Workflow\n"
        "from trinity.common.rewards import REWARD_FUNCTIONS, RewardFn\n"
        "class FancyWorkflow(Workflow):\n    def run(self):\n        return []\n"
        "class FancyRewardFn(RewardFn):\n    def __call__(self, **kw):\n        return {}\n"
    )
    info = tmp_path / "fake_builtins-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-builtins\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(
        f"[trinity.workflows]\nfancy_workflow = {mod}:FancyWorkflow\n"
        f"[trinity.reward_functions]\nfancy_reward = {mod}:FancyRewardFn\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    WORKFLOWS.refresh()
    REWARD_FUNCTIONS.refresh()
    try:
        assert "fancy_workflow" in WORKFLOWS.list()
        cls = workflows_mod.FancyWorkflow
        assert cls.__name__ == "FancyWorkflow" and WORKFLOWS.get("fancy_workflow") is cls
        assert rewards_mod.FancyRewardFn is REWARD_FUNCTIONS.get("fancy_reward")
        with pytest.raises(AttributeError, match="installed workflows"):
            workflows_mod.NoSuchWorkflow  # noqa: B018
    finally:
        WORKFLOWS.unregister("fancy_workflow")
        REWARD_FUNCTIONS.unregister("fancy_reward")
        monkeypatch.undo()
        WORKFLOWS.refresh()
        REWARD_FUNCTIONS.refresh()
        sys.modules.pop(mod, None)


def test_logprobs_in_experiences_are_response_aligned(names):
    name = names()
    WORKFLOWS.register_module(name, EchoWorkflow)
    model = FakeModelWrapper(["abc"])
    (exp,) = run_task(Task(workflow=name, raw_task={"prompt": "q", "response": "abc"}), model)
    assert exp.logprobs.shape == (len(exp.tokens) - exp.prompt_length,)
    assert torch.all(exp.logprobs < 0)


class _SlowEpisode(Workflow):
    """A non-repeatable 'episode': two chat turns with a pause between them (an environment
    step), recording which runs overlapped and which model view each run used."""

    is_async = True
    active = 0
    most_active = 0
    models: list = []

    async def run_async(self):
        cls = type(self)
        cls.active += 1
        cls.most_active = max(cls.most_active, cls.active)
        cls.models.append(id(self.model))
        try:
            await self.model.chat_async([{"role": "user", "content": "turn 1"}])
            await asyncio.sleep(0.05)
            await self.model.chat_async([{"role": "user", "content": "turn 2"}])
            exps = self.model.extract_experience_from_history()
            assert len(exps) == 2, "another run's calls leaked into this history"
            return exps
        finally:
            cls.active -= 1


@pytest.mark.parametrize("mode", ["sequential", "asynchronous", "multi-threading"])
def test_concurrent_mode_runs_the_repeats_of_a_task_at_once_in_isolation(names, mode):
    name = names()
    cls = type(f"Episode_{mode.replace('-', '_')}", (_SlowEpisode,), {"models": []})
    WORKFLOWS.register_module(name, cls)
    model = FakeModelWrapper(["ok"], enable_history=True)
    task = Task(workflow=name, repeat_times=4, batch_id=1, task_id=0)
    exps, _ = asyncio.run(run_task_async(task, model, run_id_base=4, concurrent_mode=mode))
    assert sorted(e.eid.run for e in exps) == [4, 4, 5, 5, 6, 6, 7, 7]  # ids from the base
    if mode == "sequential":
        assert cls.most_active == 1 and len(set(cls.models)) == 1
    else:
        assert cls.most_active == 4  # all runs in flight together
        assert len(set(cls.models)) == 4  # each on its own model view (own history)


def test_unknown_concurrent_mode_is_refused(names):
    name = names()
    WORKFLOWS.register_module(name, EchoWorkflow)
    with pytest.raises(ValueError, match="concurrent_mode: 'parallel' is not one of"):
        run_task(Task(workflow=name), FakeModelWrapper(["4"]), concurrent_mode="parallel")


# ---------------------------------------------------------------- Trinity-RFT 0.6 spellings
class _AsyncBuiltin(Workflow):
    """Stands for a built-in async workflow (the built-ins ship in trinity-workflows)."""

    can_repeat = True
    is_async = True

    async def run_async(self):
        exps = await self.model.chat_async([{"role": "user", "content": "hi"}], n=self.repeat_times)
        for exp in exps:
            exp.reward = 1.0
        return exps


def test_a_sync_run_override_below_an_async_class_is_the_entry_point():
    """Trinity-RFT's SimpleWorkflow is sync: subclasses override ``run``, and here that
    override runs (in a worker thread), not the inherited ``run_async``."""

    class Override(_AsyncBuiltin):
        def run(self):
            exps = self.model.chat([{"role": "user", "content": "hi"}], n=self.repeat_times)
            for exp in exps:
                exp.reward = 42.0
            return exps

    class AsyncAgain(Override):
        async def run_async(self):
            return await _AsyncBuiltin.run_async(self)

    task = Task(workflow=Override, raw_task={}, repeat_times=2)
    assert [e.reward for e in run_task(task, FakeModelWrapper(["x"]))] == [42.0, 42.0]
    task = Task(workflow=AsyncAgain, raw_task={}, repeat_times=2)
    assert [e.reward for e in run_task(task, FakeModelWrapper(["x"]))] == [1.0, 1.0]
    assert [
        e.reward
        for e in run_task(Task(workflow=_AsyncBuiltin, raw_task={}), FakeModelWrapper(["x"]))
    ] == [1.0]


def test_resettable_is_read_as_a_call_a_flag_or_an_override_of_either():
    from trinity.common.workflows import is_resettable

    model = FakeModelWrapper(["x"])

    class Plain(EchoWorkflow):
        pass

    class Reusable(EchoWorkflow):
        can_reset = True

    class MethodOverride(EchoWorkflow):  # the guides
        def resettable(self):
            return True

    class PropertyOverride(EchoWorkflow):  # Trinity-RFT
        @property
        def resettable(self):
            return True

    def build(cls):
        return cls(task=Task(workflow=cls, raw_task={}), model=model)

    plain, reusable = build(Plain), build(Reusable)
    assert plain.resettable() is False and not plain.resettable and plain.resettable == False  # noqa: E712
    assert reusable.resettable() is True and reusable.resettable and reusable.resettable == True  # noqa: E712
    assert [
        is_resettable(build(c)) for c in (Plain, Reusable, MethodOverride, PropertyOverride)
    ] == [
        False,
        True,
        True,
        True,
    ]
    assert build(Plain).asynchronous is False and _AsyncBuiltin.is_async is True


def test_generation_config_spreads_as_keyword_arguments():
    """Trinity-RFT workflows call ``model.chat(messages, **self.rollout_args)``."""
    args = GenerationConfig(temperature=0.3, n=2, max_tokens=8)
    assert dict(**args) == args.model_dump() == dict(args.items())
    assert args["n"] == 2 and args.get("top_p") == 1.0 and args.get("missing", 0) == 0
    assert "temperature" in args and "missing" not in args
    assert list(args.keys()) == list(GenerationConfig.model_fields)
    with pytest.raises(KeyError):
        args["missing"]
    model = FakeModelWrapper(["x"])
    exps = model.chat([{"role": "user", "content": "hi"}], **args)
    assert len(exps) == 2
    assert model.calls_of("chat")[0].kwargs["temperature"] == 0.3


def test_experience_keeps_multi_modal_data_without_serializing_it():
    exp = Experience(tokens=[1, 2, 3], prompt_length=2, multi_modal_data={"image": [object()]})
    assert exp.multi_modal_data is not None
    assert Experience.deserialize(exp.serialize()).multi_modal_data is None


def test_selector_metric_is_a_core_constant():
    from trinity.common.constants import SELECTOR_METRIC

    assert SELECTOR_METRIC == "selector_metric"
