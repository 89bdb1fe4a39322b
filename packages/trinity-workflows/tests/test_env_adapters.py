"""ALFWorld / ScienceWorld / WebShop adapters.

The environment packages are not installed in the test environment (ALFWorld and ScienceWorld
need game data and a JVM; WebShop is not on PyPI), so:

* the missing-package tests use the real absence: building the workflow must fail with an
  ImportError that names the workflow, the module and the install command;
* the adapter tests put small TEST DOUBLES of those packages into ``sys.modules`` (with
  ``monkeypatch``, undone after each test). Each double implements the slice of the real
  package's documented API the adapter uses — same module paths, constructor arguments,
  method names and return shapes (``scienceworld.ScienceWorldEnv``; ``textworld.EnvInfos`` /
  ``textworld.gym.register_game`` / ``make`` and ALFWorld's ``AlfredDemangler``;
  ``web_agent_site.envs.WebAgentTextEnv``) — with a tiny scripted game behind it. That
  exercises the whole adapter (import, environment creation, reset, step, scoring, pooling)
  and the shared loop, but says nothing about the real simulators' behaviour.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import types
from typing import Any

import pytest

from trinity.common.models.testing import FakeModelWrapper
from trinity.common.workflows import WORKFLOWS, Task, run_task
from trinity.workflows.envs.alfworld import AlfworldWorkflow
from trinity.workflows.envs.base import EnvironmentNotInstalledError, parse_tagged_action
from trinity.workflows.envs.sciworld import SciWorldWorkflow
from trinity.workflows.envs.webshop import WebShopWorkflow, check_webshop_action


def install_fake_modules(monkeypatch: pytest.MonkeyPatch, **modules: types.ModuleType) -> None:
    """Put fake modules (dotted names as keys with '__' for '.') into sys.modules."""
    for key, module in modules.items():
        monkeypatch.setitem(sys.modules, key.replace("__", "."), module)


def module(name: str, **attrs: Any) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__path__ = []  # importable as a package too
    for key, value in attrs.items():
        setattr(mod, key, value)
    return mod


def last_user(messages: list[dict[str, Any]]) -> str:
    return messages[-1]["content"]


def masked_text(model: FakeModelWrapper, exp: Any) -> str:
    response = exp.tokens[exp.prompt_length :]
    return model.tokenizer.decode(response[exp.action_mask.bool()])


# ====================================================================== missing packages
MISSING = [
    ("alfworld_workflow", {"game_file": "/data/x/game.tw-pddl"}, "alfworld", "[alfworld]"),
    ("sciworld_workflow", {"task_name": "boil"}, "scienceworld", "[sciworld]"),
    ("webshop_workflow", {"session_id": 3}, "web_agent_site", "princeton-nlp/WebShop"),
]


@pytest.mark.parametrize("name, row, module_name, install", MISSING, ids=[m[0] for m in MISSING])
def test_missing_environment_package_fails_at_construction(name, row, module_name, install):
    if importlib.util.find_spec(module_name) is not None:
        pytest.skip(f"{module_name} is installed here")
    task = Task(workflow=name, raw_task=row)
    with pytest.raises(ImportError) as caught:
        task.to_workflow(FakeModelWrapper())
    err = caught.value
    assert isinstance(err, EnvironmentNotInstalledError)
    message = str(err)
    assert name in message and repr(module_name) in message.replace(".envs", "")
    assert install in message
    if install.startswith("["):
        assert f"pip install 'trinity-workflows{install}'" in message


def test_adapters_resolve_by_name():
    assert WORKFLOWS.get("alfworld_workflow") is AlfworldWorkflow
    assert WORKFLOWS.get("sciworld_workflow") is SciWorldWorkflow
    assert WORKFLOWS.get("webshop_workflow") is WebShopWorkflow


def test_parse_tagged_action_takes_the_last_tag():
    assert parse_tagged_action("<action>a</action> or <ACTION> b </ACTION>") == "b"
    assert parse_tagged_action("<action></action>") is None
    assert parse_tagged_action("go north") is None


# ====================================================================== ScienceWorld double
class FakeScienceWorldEnv:
    """Double of ``scienceworld.ScienceWorldEnv`` (same signatures and return shapes).

    Task ``boil``: ``focus on water`` (+50) then ``activate stove`` (+50) completes it;
    focusing on anything else fails the task (score -100, completed), as ScienceWorld does.
    """

    instances: list[FakeScienceWorldEnv] = []

    def __init__(self, taskName=None, serverPath=None, envStepLimit=100):
        self.server_path = serverPath
        self.env_step_limit = envStepLimit
        self.loads: list[tuple] = []
        self.closed = False
        self.score = 0
        FakeScienceWorldEnv.instances.append(self)

    def load(self, taskName, variationIdx=0, simplificationStr="", generateGoldPath=False):
        if taskName not in ("boil", "melt"):
            raise ValueError(f"Unknown taskName: '{taskName}'.")
        self.loads.append((taskName, variationIdx, simplificationStr))
        self.task_name = taskName

    def get_task_description(self):
        return f"Your task is to {self.task_name} water. First, focus on the substance."

    def reset(self):
        self.score, self.moves, self.focused = 0, 0, False
        return "This room is called the kitchen. You see: a stove, a pot of water.", {"score": 0}

    def step(self, input_str):
        assert not self.closed
        self.moves += 1
        before = self.score
        if input_str == "focus on water":
            self.focused, self.score = True, 50
            obs = "You focus on the water."
        elif input_str.startswith("focus on"):
            self.score = -100
            obs = "You focus on the wrong thing."
        elif input_str == "activate stove" and self.focused:
            self.score = 100
            obs = "The stove is now activated. The water boils."
        elif input_str in ("look around", "activate stove"):
            obs = "This room is called the kitchen."
        else:
            obs = "No known action matches that input."
        done = self.score >= 100 or self.score < 0 or self.moves > self.env_step_limit
        return obs, self.score - before, done, {"score": self.score, "moves": self.moves}

    def close(self):
        self.closed = True


@pytest.fixture
def sciworld(monkeypatch):
    FakeScienceWorldEnv.instances = []
    install_fake_modules(
        monkeypatch, scienceworld=module("scienceworld", ScienceWorldEnv=FakeScienceWorldEnv)
    )
    return FakeScienceWorldEnv


def sci_task(row: dict, repeat_times: int = 1, **args: Any) -> Task:
    return Task(
        workflow="sciworld_workflow", raw_task=row, repeat_times=repeat_times, workflow_args=args
    )


def test_sciworld_solved_task_scores_one(sciworld):
    plan = iter(
        [
            "<think>focus first</think><action>focus on water</action>",
            "<action>activate stove</action>",
        ]
    )
    model = FakeModelWrapper(responses=lambda messages, i: next(plan))
    [exp] = run_task(sci_task({"task_name": "boil", "variation": 2}), model)
    env = sciworld.instances[0]
    assert env.loads == [("boil", 2, "easy")]
    assert exp.messages[1]["content"].startswith("Observation:\nTask: Your task is to boil water.")
    assert exp.reward == 1.0 and exp.info["success"] == 1.0
    assert exp.info["score"] == 100 and exp.info["terminate_reason"] == "completed"
    assert exp.info["steps"] == 2 and exp.info["invalid_actions"] == 0


def test_sciworld_failed_task_scores_zero_and_partial_progress_counts(sciworld):
    model = FakeModelWrapper(responses="<action>focus on stove</action>")
    [failed] = run_task(sci_task({"task_name": "boil"}), model)
    assert failed.reward == 0.0 and failed.info["score"] == -100
    assert failed.info["terminate_reason"] == "failed" and failed.info["success"] == 0.0

    plan = iter(["<action>focus on water</action>"])
    model = FakeModelWrapper(responses=lambda m, i: next(plan, "<action>look around</action>"))
    [partial] = run_task(sci_task({"task_name": "boil"}, max_steps=3), model)
    assert partial.reward == 0.5 and partial.info["terminate_reason"] == "max_steps"


def test_sciworld_invalid_reply_gets_feedback_without_touching_the_simulator(sciworld):
    plan = iter(
        ["I will boil it.", "<action>focus on water</action>", "<action>activate stove</action>"]
    )
    model = FakeModelWrapper(responses=lambda m, i: next(plan))
    [exp] = run_task(sci_task({"task_name": "boil"}), model)
    assert (
        exp.info["invalid_actions"] == 1 and exp.info["steps"] == 3 and exp.info["env_steps"] == 2
    )
    assert sciworld.instances[0].moves == 2
    assert "no command found" in exp.messages[3]["content"]
    assert exp.reward == 1.0


def test_sciworld_reuses_jvms_across_episodes_and_tasks(sciworld):
    """Environments are pooled: repeat_times=3 with 2 parallel envs starts 2 JVMs, ever."""
    model = FakeModelWrapper(responses="<action>focus on water</action>")
    task = sci_task({"task_name": "boil"}, repeat_times=3, max_parallel_envs=2, max_steps=1)
    workflow = task.to_workflow(model)
    exps = workflow.run()
    assert [e.eid.run for e in exps] == [0, 1, 2]
    assert len(sciworld.instances) <= 2
    workflow.reset(sci_task({"task_name": "melt", "var_num": 1}, repeat_times=2, max_steps=1))
    workflow.run()
    loads = [load for env in sciworld.instances for load in env.loads]
    assert ("melt", 1, "easy") in loads and len(loads) == 5
    assert len(sciworld.instances) <= 2
    # other simulator settings: the pooled JVMs are closed, not handed out again
    workflow.reset(sci_task({"task_name": "boil"}, env_step_limit=7, max_steps=1))
    assert all(env.closed for env in sciworld.instances)
    workflow.run()
    assert sciworld.instances[-1].env_step_limit == 7 and not sciworld.instances[-1].closed
    workflow.close()
    assert all(env.closed for env in sciworld.instances)


def test_sciworld_accepts_the_older_json_prompt_row(sciworld):
    model = FakeModelWrapper(responses="<action>focus on water</action>")
    row = {"prompt": json.dumps({"task_name": "melt", "var_num": 4})}
    [exp] = run_task(sci_task(row, max_steps=1), model)
    assert sciworld.instances[0].loads == [("melt", 4, "easy")]
    assert exp.info["sciworld_task"] == "melt/4"


def test_sciworld_bad_rows_fail_at_construction(sciworld):
    with pytest.raises(KeyError, match="lacks 'task_name'"):
        sci_task({"variation": 1}).to_workflow(FakeModelWrapper())
    with pytest.raises(ValueError, match="variation must be a non-negative integer"):
        sci_task({"task_name": "boil", "variation": "two"}).to_workflow(FakeModelWrapper())


def test_sciworld_action_mask_is_exactly_the_assistant_turns(sciworld):
    plan = iter(["nothing", "<action>focus on water</action>", "<action>activate stove</action>"])
    model = FakeModelWrapper(responses=lambda m, i: next(plan))
    [exp] = run_task(sci_task({"task_name": "boil"}), model)
    replies = [m["content"] for m in exp.messages if m["role"] == "assistant"]
    assert masked_text(model, exp) == "".join(r + "<|end|>" for r in replies)
    unmasked = model.tokenizer.decode(exp.tokens[exp.prompt_length :][~exp.action_mask.bool()])
    assert "You focus on the water." in unmasked
    assert "<action>focus on water</action>" not in unmasked and "nothing" not in unmasked


# ====================================================================== ALFWorld double
class FakeEnvInfos:
    """Double of ``textworld.EnvInfos``: records which infos were requested."""

    def __init__(self, **kwargs):
        self.requested = kwargs


class FakeAlfredDemangler:
    """Double of ``alfworld.agents.environment.alfred_tw_env.AlfredDemangler``."""

    def __init__(self, shuffle=False):
        self.shuffle = shuffle


class FakeTextWorldEnv:
    """Double of the env ``textworld.gym.make`` returns for an ALFWorld game.

    ``reset() -> (obs, infos)``, ``step(cmd) -> (obs, score, done, infos)``; the game is won by
    taking the apple and moving it to the fridge; unknown commands give "Nothing happens.".
    """

    def __init__(self, registration):
        self.registration = registration
        self.closed = False
        self.commands: list[str] = []

    def _infos(self, won=False):
        infos = {"won": won}
        if self.registration["request_infos"].requested.get("admissible_commands"):
            infos["admissible_commands"] = ["look", "take apple 1 from table 1", "go to fridge 1"]
        return infos

    def reset(self):
        self.holding = False
        obs = "-= Welcome to TextWorld, ALFRED! =-\nYour task is to: put an apple in fridge."
        return obs, self._infos()

    def step(self, command):
        self.commands.append(command)
        if command == "take apple 1 from table 1":
            self.holding = True
            return "You pick up the apple 1.", 0, False, self._infos()
        if command == "move apple 1 to fridge 1" and self.holding:
            return "You move the apple 1 to the fridge 1.", 1, True, self._infos(won=True)
        return "Nothing happens.", 0, False, self._infos()

    def close(self):
        self.closed = True


@pytest.fixture
def alfworld(monkeypatch):
    registry: dict[str, dict] = {}
    made: list[FakeTextWorldEnv] = []

    def register_game(gamefile, request_infos=None, max_episode_steps=50, wrappers=None, **kw):
        env_id = f"tw-alfworld-{len(registry)}"
        registry[env_id] = dict(
            gamefile=gamefile,
            request_infos=request_infos,
            max_episode_steps=max_episode_steps,
            wrappers=wrappers or [],
        )
        return env_id

    def make(env_id):
        env = FakeTextWorldEnv(registry[env_id])
        made.append(env)
        return env

    tw_gym = module("textworld.gym", register_game=register_game, make=make)
    install_fake_modules(
        monkeypatch,
        textworld=module("textworld", EnvInfos=FakeEnvInfos, gym=tw_gym),
        textworld__gym=tw_gym,
        alfworld=module("alfworld"),
        alfworld__agents=module("alfworld.agents"),
        alfworld__agents__environment=module("alfworld.agents.environment"),
        alfworld__agents__environment__alfred_tw_env=module(
            "alfworld.agents.environment.alfred_tw_env", AlfredDemangler=FakeAlfredDemangler
        ),
    )
    return made


def alf_task(row: dict, repeat_times: int = 1, **args: Any) -> Task:
    return Task(
        workflow="alfworld_workflow", raw_task=row, repeat_times=repeat_times, workflow_args=args
    )


def test_alfworld_won_game_scores_one_and_closes_its_env(alfworld):
    plan = iter(
        ["<action>take apple 1 from table 1</action>", "<action>move apple 1 to fridge 1</action>"]
    )
    model = FakeModelWrapper(responses=lambda m, i: next(plan))
    [exp] = run_task(alf_task({"game_file": "/data/json_2.1.1/train/a/game.tw-pddl"}), model)
    [env] = alfworld
    reg = env.registration
    assert reg["gamefile"] == "/data/json_2.1.1/train/a/game.tw-pddl"
    assert reg["request_infos"].requested == {"won": True, "admissible_commands": True}
    assert [type(w) for w in reg["wrappers"]] == [FakeAlfredDemangler]
    assert reg["max_episode_steps"] > 30  # our loop, not TextWorld, enforces max_steps
    assert "Admissible commands: look, take apple 1 from table 1" in exp.messages[1]["content"]
    assert (
        exp.reward == 1.0 and exp.info["success"] == 1.0 and exp.info["terminate_reason"] == "won"
    )
    assert env.closed  # one game per environment: closed after the episode


def test_alfworld_lost_game_and_hints(alfworld):
    model = FakeModelWrapper(responses="<action>open drawer 9</action>")
    [exp] = run_task(
        alf_task({"prompt": "/data/b/game.tw-pddl"}, max_steps=2, show_admissible_commands=False),
        model,
    )
    assert (
        alfworld[0].registration["gamefile"] == "/data/b/game.tw-pddl"
    )  # older prompt-column rows
    assert exp.reward == 0.0 and exp.info["terminate_reason"] == "max_steps"
    assert "Nothing happens. (The command had no effect" in exp.messages[3]["content"]
    assert "Admissible commands" not in exp.messages[1]["content"]


def test_alfworld_repeats_run_one_env_each_with_run_ids(alfworld):
    model = FakeModelWrapper(responses="no idea")
    exps = run_task(alf_task({"game_file": "g.tw-pddl"}, repeat_times=3, max_steps=2), model)
    assert [e.eid.run for e in exps] == [0, 1, 2]
    assert len(alfworld) == 3 and all(env.closed and env.commands == [] for env in alfworld)
    assert all(e.info["invalid_actions"] == 2 for e in exps)
    reply = "no idea"
    assert all(masked_text(model, e) == (reply + "<|end|>") * 2 for e in exps)


def test_alfworld_row_without_game_file_fails_at_construction(alfworld):
    with pytest.raises(KeyError, match="lacks 'game_file'"):
        alf_task({"other": 1}).to_workflow(FakeModelWrapper())


# ====================================================================== WebShop double
class FakeSimServer:
    """Double of WebShop's ``SimServer``: the expensive catalogue, built once."""

    built = 0

    def __init__(self):
        FakeSimServer.built += 1
        self.user_sessions: dict[str, dict] = {}


class FakeWebAgentTextEnv:
    """Double of ``web_agent_site.envs.WebAgentTextEnv`` (constructor, reset, step, actions).

    Goal 3: "red shoes". Pages: search → results (B001 red, B002 blue) → item → Buy Now;
    buying B001 earns 1.0, B002 0.25. Like the real env, an action it cannot perform does
    nothing; ``steps`` records what actually reached it.
    """

    instances: list[FakeWebAgentTextEnv] = []

    def __init__(self, observation_mode="html", file_path=None, server=None, **kwargs):
        self.observation_mode = observation_mode
        self.kwargs = kwargs
        self.server = server if server is not None else FakeSimServer()
        self.session_prefix = kwargs.get("session_prefix")
        self.steps: list[str] = []
        FakeWebAgentTextEnv.instances.append(self)
        self.reset()

    def reset(self, session=None):
        self.session = (self.session_prefix or "") + str(session)
        goal = "red shoes" if session == 3 else "something"
        self.server.user_sessions[self.session] = {"goal": goal}
        self.page, self.item = "search", None
        return self.observation, None

    @property
    def observation(self):
        goal = self.server.user_sessions[self.session]["goal"]
        if self.page == "search":
            return f"WebShop [SEP] Instruction: [SEP] i want {goal} [SEP] Search"
        if self.page == "results":
            return "[button] Back to Search [button_]\n[button] B001 [button_] red shoes\n[button] B002 [button_] blue shoes"
        return f"[button] Back to Search [button_]\nItem {self.item}\n[button] Buy Now [button_]"

    def get_available_actions(self):
        clickables = {"search": ["search"], "results": ["back to search", "b001", "b002"]}.get(
            self.page, ["back to search", "buy now"]
        )
        return {"has_search_bar": self.page == "search", "clickables": clickables}

    def step(self, action):
        self.steps.append(action)
        match = re.match(r"(search|click)\[(.*)\]", action)
        name, arg = match.group(1), match.group(2).lower()
        if name == "search" and self.page == "search":
            self.page = "results"
        elif name == "click" and arg == "back to search":
            self.page = "search"
        elif name == "click" and arg in ("b001", "b002") and self.page == "results":
            self.page, self.item = "item", arg.upper()
        elif name == "click" and arg == "buy now" and self.page == "item":
            return "Thank you for shopping", (1.0 if self.item == "B001" else 0.25), True, None
        return self.observation, 0.0, False, None

    def close(self):
        pass


@pytest.fixture
def webshop(monkeypatch):
    import trinity.workflows.envs.webshop as adapter

    FakeWebAgentTextEnv.instances = []
    FakeSimServer.built = 0
    monkeypatch.setattr(adapter, "_SERVERS", {})
    envs = module("web_agent_site.envs", WebAgentTextEnv=FakeWebAgentTextEnv)
    install_fake_modules(
        monkeypatch,
        web_agent_site=module("web_agent_site", envs=envs),
        web_agent_site__envs=envs,
    )
    return FakeWebAgentTextEnv


def shop_task(row: dict, repeat_times: int = 1, **args: Any) -> Task:
    return Task(
        workflow="webshop_workflow", raw_task=row, repeat_times=repeat_times, workflow_args=args
    )


def shopper(messages, sample_index):
    page = last_user(messages)
    if "Search" in page and "Instruction" in page:
        return "<action>search[red shoes]</action>"
    if "click[buy now]" in page:
        return "<action>click[Buy Now]</action>"
    return "<action>click[B001]</action>"


def test_webshop_purchase_reward_and_shared_catalogue(webshop):
    model = FakeModelWrapper(responses=shopper)
    exps = run_task(shop_task({"session_id": 3}, repeat_times=2, num_products=1000), model)
    assert [e.reward for e in exps] == [1.0, 1.0]
    assert [e.info["success"] for e in exps] == [1.0, 1.0]
    assert [e.eid.run for e in exps] == [0, 1]
    assert "i want red shoes" in exps[0].messages[1]["content"]
    assert "Available actions: search[...]" in exps[0].messages[1]["content"]
    # catalogue loaded once; each env has its own session namespace
    assert FakeSimServer.built == 1
    assert all(env.server is webshop.instances[0].server for env in webshop.instances)
    prefixes = {env.session_prefix for env in webshop.instances}
    assert len(prefixes) == len(webshop.instances)
    assert webshop.instances[0].kwargs["num_products"] == 1000
    assert webshop.instances[0].observation_mode == "text_rich"


def test_webshop_refused_actions_are_invalid_and_never_reach_the_env(webshop):
    plan = iter(
        [
            "<action>click[B001]</action>",  # not on the search page
            "<action>search[]</action>",  # no keywords
            "<action>buy it</action>",  # not search[...] / click[...]
            "<action>search[red shoes]</action>",
            "<action>click[B002]</action>",
            "<action>click[Buy Now]</action>",
        ]
    )
    model = FakeModelWrapper(responses=lambda m, i: next(plan))
    [exp] = run_task(shop_task({"prompt": "3"}), model)
    env = webshop.instances[0]
    assert env.steps == ["search[red shoes]", "click[B002]", "click[Buy Now]"]
    assert exp.info["invalid_actions"] == 3 and exp.info["env_steps"] == 3
    assert exp.reward == 0.25 and exp.info["success"] == 0.0
    assert "'b001' is not clickable" in exp.messages[3]["content"].lower()


def test_webshop_action_check_mirrors_the_env():
    page = {"has_search_bar": False, "clickables": ["back to search", "buy now"]}
    assert check_webshop_action("click[Buy Now]", page) is None
    assert "no search bar" in check_webshop_action("search[shoes]", page)
    assert "not clickable" in check_webshop_action("click[B009]", page)
    assert check_webshop_action("search[shoes]", {"has_search_bar": True, "clickables": []}) is None


def test_webshop_bad_settings_fail_at_construction(webshop):
    with pytest.raises(ValueError, match="session_id must be an integer goal index"):
        shop_task({"session_id": "abc"}).to_workflow(FakeModelWrapper())
    with pytest.raises(ValueError, match="observation_mode must be one of"):
        shop_task({"session_id": 1}, observation_mode="html").to_workflow(FakeModelWrapper())
