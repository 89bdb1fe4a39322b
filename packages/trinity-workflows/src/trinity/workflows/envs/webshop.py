"""WebShop (simulated e-commerce site) played by the model through text.

WebShop is not on PyPI. This adapter uses WebShop's own text environment,
``web_agent_site.envs.WebAgentTextEnv`` — the interface WebShop documents for agents — in
process, rather than scraping the Flask site over HTTP (that site serves HTML pages meant for
people and Selenium; its text rendering and reward live in ``WebAgentTextEnv`` anyway). Set it
up once per machine::

    git clone https://github.com/princeton-nlp/WebShop && cd WebShop
    ./setup.sh -d small        # or -d all for the 1.18M products (~15 GB of memory)
    # then make `web_agent_site` importable here: run from the checkout or add it to PYTHONPATH

The product catalogue and search index (``SimServer``) are loaded once per process and shared
by every episode (``WebAgentTextEnv(server=...)``); each environment gets its own session
prefix, so concurrent episodes of the same goal do not share a cart. Calls into WebShop are
serialized by a lock (its server and search engine are not made for threads); the model's
generation still runs concurrently.

Task fields: ``session_id`` (the goal index, an integer; older data sets put it in the prompt
column, which is accepted too).

* observation: WebShop's text page (``observation_mode``, default ``"text_rich"``) and, by
  default, the actions available on it;
* action: ``search[keywords]`` or ``click[button]`` inside ``<action>…</action>`` (the last one
  counts). A reply without it, a search without a search bar, or a click on something not on
  the page is an invalid action: feedback, counts as a step, WebShop is not touched;
* reward: WebShop's purchase reward in [0, 1] after ``click[Buy Now]``; ``success`` when it is 1.

Workflow arguments: ``max_steps`` (default 15), ``observation_mode`` (``text`` or
``text_rich``), ``num_products`` (``None``: all loaded by the data files), ``human_goals``
(default true), ``file_path`` (product file), ``show_available_actions`` (default true), and
those of :class:`~trinity.workflows.envs.base.TextEnvWorkflow`.
"""

from __future__ import annotations

import re
import threading
import uuid
from typing import Any, Optional

from trinity.common.workflows import WORKFLOWS, Task
from trinity.workflows.common import MissingTaskFieldError, registered_name
from trinity.workflows.envs.base import (
    EnvStep,
    Episode,
    TextEnvWorkflow,
    as_bool,
    import_env_module,
)

__all__ = ["WebShopWorkflow", "WEBSHOP_INSTALL", "WEBSHOP_SYSTEM_PROMPT", "check_webshop_action"]

WEBSHOP_INSTALL = (
    "WebShop is not on PyPI; set it up with: git clone https://github.com/princeton-nlp/WebShop "
    "&& cd WebShop && ./setup.sh -d small (or -d all), then make its `web_agent_site` package "
    "importable in this environment (run from the checkout or add it to PYTHONPATH)."
)

WEBSHOP_SYSTEM_PROMPT = """You are shopping on a text-based web store. Find and buy the \
product that best matches the instruction shown on the page, with the requested options.

Each turn, you may think briefly, then give exactly ONE action inside <action></action>:
- <action>search[your query]</action> when the page has a search bar;
- <action>click[button text]</action> to click a button or option shown on the current page, \
e.g. <action>click[Buy Now]</action>.
Only the last <action> tag counts. Do not ask the user anything; finish by buying an item."""

_ACTION = re.compile(r"^\s*(search|click)\s*\[(.*)\]\s*$", re.I | re.S)
_OBSERVATION_MODES = ("text", "text_rich")

# One catalogue/search index per process and settings (loading it takes minutes and GBs).
_SERVERS: dict[tuple, Any] = {}
_WEBSHOP_LOCK = threading.RLock()


def check_webshop_action(action: str, available: dict[str, Any]) -> Optional[str]:
    """Why WebShop would ignore ``action`` on the current page, or ``None`` if it would not.

    Mirrors ``WebAgentTextEnv.step``: a search needs a search bar and keywords; a click needs
    its (lower-cased) target among ``get_available_actions()["clickables"]``.
    """
    match = _ACTION.match(action)
    if match is None:
        return (
            f"Invalid action {action!r}: use search[keywords] or click[button text] inside "
            "<action></action>."
        )
    name, arg = match.group(1).lower(), match.group(2).strip()
    clickables = [c for c in available.get("clickables", []) if c != "search"]
    if name == "search":
        if not arg:
            return "Invalid action: put the search keywords inside the brackets, e.g. search[red shoes]."
        if not available.get("has_search_bar"):
            return "There is no search bar on this page: click[Back to Search] first."
        return None
    if arg.lower() not in clickables:
        return (
            f"Invalid action: {arg!r} is not clickable on this page. "
            f"Clickable now: {', '.join(clickables) or 'nothing'}."
        )
    return None


@WORKFLOWS.register_module("webshop_workflow")
class WebShopWorkflow(TextEnvWorkflow):
    """WebShop through ``WebAgentTextEnv``: one experience per episode, purchase reward."""

    default_max_steps = 15
    default_system_prompt = WEBSHOP_SYSTEM_PROMPT
    blocking_env = True
    reuse_envs = True  # environments are cheap views on the shared server; keep their sessions

    @classmethod
    def check_dependencies(cls) -> None:
        import_env_module("web_agent_site.envs", registered_name(cls), WEBSHOP_INSTALL)

    def configure(self, task: Task) -> None:
        who = self.workflow_name
        session = self.raw_task.get("session_id")
        if session is None and task.format_args.prompt_key:
            session = self.raw_task.get(task.format_args.prompt_key)
        if session is None:
            raise MissingTaskFieldError(
                f"{who}: the task row lacks 'session_id' (the WebShop goal index; the prompt "
                f"column {task.format_args.prompt_key!r} is also accepted); the row has keys "
                f"{sorted(self.raw_task) or 'none'}."
            )
        try:
            if isinstance(session, bool):
                raise ValueError
            self.session_id = int(str(session).strip())
        except ValueError:
            raise ValueError(
                f"{who}: session_id must be an integer goal index, got {session!r}"
            ) from None
        if self.session_id < 0:
            raise ValueError(f"{who}: session_id must be >= 0, got {self.session_id}")
        mode = self.workflow_args.get("observation_mode", "text_rich")
        if mode not in _OBSERVATION_MODES:
            raise ValueError(
                f"{who}: observation_mode must be one of {_OBSERVATION_MODES}, got {mode!r}"
            )
        self.observation_mode: str = mode
        num_products = self.workflow_args.get("num_products")
        if num_products is not None and (
            isinstance(num_products, bool) or not isinstance(num_products, int) or num_products < 1
        ):
            raise ValueError(
                f"{who}: num_products must be a positive integer or null, got {num_products!r}"
            )
        self.num_products: Optional[int] = num_products
        self.human_goals = as_bool(self.workflow_args.get("human_goals", True), "human_goals", who)
        self.file_path: Optional[str] = self.workflow_args.get("file_path")
        self.show_available_actions = as_bool(
            self.workflow_args.get("show_available_actions", True), "show_available_actions", who
        )

    def env_settings(self) -> Any:
        return (self.observation_mode, self.num_products, self.human_goals, self.file_path)

    # ------------------------------------------------------------------ environment
    def create_env(self, run_index: int) -> Any:
        module = import_env_module("web_agent_site.envs", self.workflow_name, WEBSHOP_INSTALL)
        key = (self.num_products, self.human_goals, self.file_path)
        kwargs: dict[str, Any] = {
            "observation_mode": self.observation_mode,
            "num_products": self.num_products,
            "human_goals": self.human_goals,
            # a private session namespace: concurrent episodes of one goal must not share a cart
            "session_prefix": f"trinity-{uuid.uuid4().hex[:12]}-",
        }
        if self.file_path:
            kwargs["file_path"] = self.file_path
        with _WEBSHOP_LOCK:
            env = module.WebAgentTextEnv(server=_SERVERS.get(key), **kwargs)
            _SERVERS.setdefault(key, env.server)
        return env

    def reset_env(self, env: Any, run_index: int) -> str:
        with _WEBSHOP_LOCK:
            observation, _ = env.reset(session=self.session_id)
            return self._observation(env, observation)

    def step_env(self, env: Any, action: str) -> EnvStep:
        with _WEBSHOP_LOCK:
            problem = check_webshop_action(action, env.get_available_actions())
            if problem is not None:
                return EnvStep(
                    observation=f"{problem}\n\n{self._observation(env, env.observation)}",
                    valid=False,
                )
            observation, reward, done, _ = env.step(action)
            text = self._observation(env, observation) if not done else str(observation)
        reward = float(reward or 0.0)
        return EnvStep(
            observation=text,
            reward=reward,
            done=bool(done),
            success=bool(done and reward >= 1.0 - 1e-9),
            info={"terminate_reason": "purchased" if done else ""},
        )

    def _observation(self, env: Any, observation: Any) -> str:
        text = str(observation)
        if not self.show_available_actions:
            return text
        available = env.get_available_actions()
        actions = ["search[...]"] if available.get("has_search_bar") else []
        actions += [f"click[{c}]" for c in available.get("clickables", []) if c != "search"]
        return text + "\nAvailable actions: " + (", ".join(actions) or "none")

    def invalid_action_feedback(self, env: Any, response_text: str, episode: Episode) -> str:
        with _WEBSHOP_LOCK:
            page = self._observation(env, env.observation)
        return (
            "Invalid response: no action found. Put exactly one action inside "
            "<action></action>, e.g. <action>search[red shoes]</action>. Nothing happened.\n\n"
            + page
        )

    def episode_info(self, episode: Episode) -> dict[str, Any]:
        return {"webshop_session": str(self.session_id)}
