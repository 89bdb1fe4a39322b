"""The loop every multi-turn text environment shares: observation → model action → env step.

:class:`TextEnvWorkflow` plays ``repeat_times`` episodes of one task concurrently and turns each
episode into ONE :class:`~trinity.common.experience.Experience` for the whole conversation
(through :meth:`MultiTurnWorkflow.process_messages_to_experience_async`, so ``action_mask`` is 1
exactly on the model's tokens and 0 on the environment's). An environment adapter only says how
to start, reset, step and close its environment and how to read an action out of a reply; the
loop owns everything that must be the same for all of them:

* a reply without a readable action gets feedback and counts as a step, without touching the
  environment (``invalid_actions`` metric), so a model cannot stall an episode forever;
* the episode ends when the environment says so, after ``max_steps`` model turns, or when the
  next turn would not fit in the model's ``max_model_len`` — then it stops with
  ``truncate_status="response_truncated"`` (no credit: the task was not finished) instead of
  silently producing an experience longer than the trainer accepts;
* environment calls that block (a JVM, a game engine) run in a worker thread, so concurrent
  episodes and the model are never stalled by one of them;
* expensive environments can be kept between episodes and tasks (``reuse_envs``).

Workflow arguments understood by every text-environment workflow (``taskset.workflow_args``):

* ``max_steps``: model turns per episode (each adapter has its own default);
* ``max_parallel_envs``: episodes of one task run at the same time (default: all of them, or
  the adapter's default for environments that are heavy to hold several times);
* ``system_prompt``: replaces the adapter's system prompt (``format.system_prompt`` wins).
"""

from __future__ import annotations

import asyncio
import importlib
import re
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Optional

from trinity.common.experience import Experience
from trinity.common.models.calls import call_model, resolve_awaitable
from trinity.common.workflows import MultiTurnWorkflow, Task
from trinity.workflows.common import ResettableWorkflowMixin, generation_kwargs

__all__ = [
    "EnvironmentNotInstalledError",
    "EnvStep",
    "Episode",
    "TextEnvWorkflow",
    "as_bool",
    "import_env_module",
    "parse_tagged_action",
]


class EnvironmentNotInstalledError(ImportError):
    """An environment workflow was built without its environment package.

    ``install`` is the sentence telling how to get it (the exact ``pip install`` command, or
    the setup steps of a package that is not on PyPI). Raised when the workflow is constructed (not on its first run), so a misconfigured run
    fails before any rollout, with the command that fixes it.
    """

    def __init__(
        self, workflow: str, module: str, install: str, cause: Optional[BaseException] = None
    ) -> None:
        reason = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
        super().__init__(
            f"{workflow} needs the Python module {module!r}, which could not be imported"
            f"{reason}. {install}",
            name=module,
        )
        self.workflow = workflow
        self.module = module
        self.install = install


def import_env_module(module: str, workflow: str, install: str) -> ModuleType:
    """Import an environment's module, or raise :class:`EnvironmentNotInstalledError`.

    Any ``ImportError`` counts (the package itself missing, or one of its own dependencies):
    either way the fix is the install command, and the original error is kept in the message.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise EnvironmentNotInstalledError(workflow, module, install, exc) from exc


_TAG_CACHE: dict[str, re.Pattern[str]] = {}


def parse_tagged_action(text: str, tag: str = "action") -> Optional[str]:
    """The content of the LAST ``<tag>…</tag>`` in ``text`` (stripped), or ``None``.

    The last one counts because models often quote the format while reasoning before giving
    their real answer. An empty tag is no action.
    """
    pattern = _TAG_CACHE.get(tag)
    if pattern is None:
        pattern = re.compile(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", re.S | re.I)
        _TAG_CACHE[tag] = pattern
    found = pattern.findall(text or "")
    if not found:
        return None
    action = found[-1].strip()
    return action or None


@dataclass
class EnvStep:
    """What the environment answered to one action.

    Attributes:
        observation: text shown to the model next (unless the episode is over).
        reward: what this step earned; the episode's reward is the sum unless the adapter
            overrides :meth:`TextEnvWorkflow.episode_reward`.
        done: the episode is over (terminated or truncated by the environment).
        success: whether the task was accomplished (read when the episode ends).
        valid: ``False`` when the adapter refused the action without stepping the environment
            (e.g. a button that is not on the page); it counts as an invalid action.
        info: extra values kept with the episode's last step.
    """

    observation: str
    reward: float = 0.0
    done: bool = False
    success: Optional[bool] = None
    valid: bool = True
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Episode:
    """The running record of one episode, handed to the adapter's hooks.

    ``steps`` counts model turns (valid or not); ``env_steps`` only those that stepped the
    environment; ``terminate_reason`` says why the loop stopped (``"done"`` or an adapter's
    finer reason, ``"max_steps"``, ``"context_limit"``).
    """

    run_index: int
    messages: list[dict[str, Any]]
    steps: int = 0
    env_steps: int = 0
    invalid_actions: int = 0
    total_reward: float = 0.0
    last: Optional[EnvStep] = None
    done: bool = False
    terminate_reason: str = ""
    truncate_status: Optional[str] = None


def as_bool(value: Any, name: str, who: str) -> bool:
    """A yes/no setting from YAML or a row (``true``/``false``/``1``/``0``), strictly."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0"):
        return value.strip().lower() in ("true", "1")
    raise ValueError(f"{who}: {name} must be true or false, got {value!r}")


def _positive_int(value: Any, name: str, who: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{who}: {name} must be a positive integer, got {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"{who}: {name} must be a positive integer, got {value!r}") from None
    if number < 1 or (isinstance(value, float) and number != value):
        raise ValueError(f"{who}: {name} must be a positive integer, got {value!r}")
    return number


class TextEnvWorkflow(ResettableWorkflowMixin, MultiTurnWorkflow):
    """Base of the environment workflows: one experience per episode, episodes in parallel.

    Subclasses implement the environment hooks (all may block; they run in a worker thread
    when :attr:`blocking_env` is true):

    * :meth:`create_env` — start an environment (once per episode, or once per pool slot with
      :attr:`reuse_envs`);
    * :meth:`reset_env` — load the current task into it and return the first observation;
    * :meth:`step_env` — apply one parsed action and return an :class:`EnvStep`;
    * :meth:`close_env` — release it;

    and the model-facing hooks :meth:`parse_action`, :meth:`invalid_action_feedback` (may read
    the environment, so it runs like the environment hooks), :meth:`format_observation`, plus :meth:`configure` to read the task's fields (called by
    :meth:`reset`, so a bad row fails when the workflow is built or re-targeted).
    """

    can_reset: bool = True
    can_repeat: bool = True
    is_async: bool = True

    #: default model turns per episode (``workflow_args.max_steps`` overrides)
    default_max_steps: int = 30
    #: default cap on concurrently played episodes (None: all ``repeat_times`` at once)
    default_max_parallel_envs: Optional[int] = None
    #: environment calls block (JVM, game engine): run them in a worker thread
    blocking_env: bool = True
    #: keep environments between episodes and tasks instead of closing them (expensive starts)
    reuse_envs: bool = False
    #: system prompt used when neither the task set nor workflow_args gives one
    default_system_prompt: str = ""

    def _setup(self) -> None:
        self.check_dependencies()
        self._idle_envs: list[Any] = []
        self._env_key: Optional[Hashable] = None

    # ------------------------------------------------------------------ setup

    @classmethod
    def check_dependencies(cls) -> None:
        """Raise :class:`EnvironmentNotInstalledError` when the environment is not installed."""

    def reset(self, task: Task) -> None:
        """Re-target this workflow at ``task``; pooled environments are kept when compatible."""
        self.task = task
        self.raw_task: dict[str, Any] = dict(task.raw_task or {})
        self.workflow_args: dict[str, Any] = dict(task.workflow_args or {})
        self.rollout_args = task.rollout_args
        self.is_eval = task.is_eval
        self.repeat_times = task.repeat_times or task.rollout_args.n or 1
        who = self.workflow_name
        self.max_steps = _positive_int(
            self.workflow_args.get("max_steps", self.default_max_steps), "max_steps", who
        )
        parallel = self.workflow_args.get("max_parallel_envs", self.default_max_parallel_envs)
        self.max_parallel_envs = (
            None if parallel is None else _positive_int(parallel, "max_parallel_envs", who)
        )
        self.configure(task)
        self.system_prompt = self._system_prompt(task)
        key = self.env_settings()
        if key != self._env_key:
            # pooled environments were built for other settings: do not hand them out again
            self.close()
            self._env_key = key

    def configure(self, task: Task) -> None:
        """Read and validate the task's fields (row first, then ``workflow_args``)."""

    def setting(self, key: str, default: Any = None) -> Any:
        """A task field: the row's value, else ``workflow_args[key]``, else ``default``."""
        if key in self.raw_task and self.raw_task[key] is not None:
            return self.raw_task[key]
        if key in self.workflow_args and self.workflow_args[key] is not None:
            return self.workflow_args[key]
        return default

    def env_settings(self) -> Hashable:
        """Settings a pooled environment was built with; a change closes the pool."""
        return None

    def _system_prompt(self, task: Task) -> str:
        fmt = task.format_args
        if fmt.system_prompt_key and self.raw_task.get(fmt.system_prompt_key):
            return str(self.raw_task[fmt.system_prompt_key])
        return str(
            fmt.system_prompt
            or self.workflow_args.get("system_prompt")
            or self.build_system_prompt()
        )

    def build_system_prompt(self) -> str:
        """The adapter's system prompt (may depend on the configured task)."""
        return self.default_system_prompt

    # ------------------------------------------------------------------ environment hooks
    def create_env(self, run_index: int) -> Any:
        """Start one environment (blocking is fine)."""
        raise NotImplementedError(f"{type(self).__name__} must implement create_env")

    def reset_env(self, env: Any, run_index: int) -> str:
        """Load the current task into ``env`` and return the first observation text."""
        raise NotImplementedError(f"{type(self).__name__} must implement reset_env")

    def step_env(self, env: Any, action: str) -> EnvStep:
        """Apply one parsed action."""
        raise NotImplementedError(f"{type(self).__name__} must implement step_env")

    def close_env(self, env: Any) -> None:
        """Release ``env`` (default: call its ``close()`` if it has one)."""
        close = getattr(env, "close", None)
        if callable(close):
            close()

    # ------------------------------------------------------------------ model-facing hooks
    def parse_action(self, response_text: str) -> Optional[str]:
        """The action in a reply, or ``None`` when there is none (default: ``<action>`` tag)."""
        return parse_tagged_action(response_text, "action")

    def invalid_action_feedback(self, env: Any, response_text: str, episode: Episode) -> str:
        """What the model is told when its reply has no readable action."""
        return (
            "Invalid response: no action found. Put exactly one action inside "
            "<action></action>, for example <action>look</action>."
        )

    def format_observation(self, observation: str, episode: Episode) -> str:
        """The user message for an observation (default: the text and the turns left)."""
        left = self.max_steps - episode.steps
        return (
            f"Observation:\n{observation}\n\nYou have {left} step{'s' if left != 1 else ''} left."
        )

    # ------------------------------------------------------------------ outcome hooks
    def episode_reward(self, episode: Episode) -> float:
        """The episode's reward (default: the sum of the step rewards)."""
        return float(episode.total_reward)

    def episode_success(self, episode: Episode) -> bool:
        """Whether the episode accomplished the task (default: the last step's ``success``)."""
        return bool(episode.done and episode.last is not None and episode.last.success)

    def episode_info(self, episode: Episode) -> dict[str, Any]:
        """Extra values for the experience's ``info`` (numbers also become metrics)."""
        return {}

    # ------------------------------------------------------------------ running
    async def run_async(self) -> list[Experience]:
        """Play ``repeat_times`` episodes (at most ``max_parallel_envs`` at once)."""
        count = max(1, int(self.repeat_times))
        limit = asyncio.Semaphore(self.max_parallel_envs or count)

        async def play(i: int) -> Experience:
            async with limit:
                return await self.run_episode(self.run_id_base + i)

        results = await asyncio.gather(*(play(i) for i in range(count)), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        experiences: list[Experience] = list(results)  # type: ignore[arg-type]
        for i, exp in enumerate(experiences):
            exp.eid.run = self.run_id_base + i
        return experiences

    async def run_episode(self, run_index: int) -> Experience:
        """Play one episode and return its conversation as one experience."""
        env = await self._acquire_env(run_index)
        healthy = False
        try:
            first = await self._env_call(self.reset_env, env, run_index)
            messages: list[dict[str, Any]] = []
            if self.system_prompt:
                messages.append({"role": "system", "content": self.system_prompt})
            episode = Episode(run_index=run_index, messages=messages)
            messages.append({"role": "user", "content": self.format_observation(first, episode)})
            await self._play(env, episode)
            healthy = True
        finally:
            await self._release_env(env, healthy)
        reward = self.episode_reward(episode)
        success = self.episode_success(episode)
        info: dict[str, Any] = {
            "success": 1.0 if success else 0.0,
            "steps": episode.steps,
            "env_steps": episode.env_steps,
            "invalid_actions": episode.invalid_actions,
            "env_done": 1 if episode.done else 0,
            "env_reward": float(episode.total_reward),
            "terminate_reason": episode.terminate_reason,
            **self.episode_info(episode),
        }
        return await self.process_messages_to_experience_async(
            episode.messages, reward, info=info, truncate_status=episode.truncate_status
        )

    async def _play(self, env: Any, episode: Episode) -> None:
        messages = episode.messages
        while True:
            kwargs = generation_kwargs(self.rollout_args, n=1)
            budget = await self._response_budget(messages)
            capped = False
            if budget is not None:
                if budget < 1:
                    self._stop_for_context(episode)
                    return
                limit = kwargs.get("max_tokens") or _default_max_tokens(self.model)
                if limit is None or limit >= budget:
                    kwargs["max_tokens"] = budget
                    capped = True
            reply = (await call_model(self.model, "chat", messages, **kwargs))[0]
            if reply.truncate_status == "prompt_truncated":
                self._stop_for_context(episode)
                return
            text = reply.response_text or ""
            messages.append({"role": "assistant", "content": text})
            episode.steps += 1
            if capped and reply.truncate_status == "response_truncated":
                # the reply filled the context: there is no room for another turn
                episode.truncate_status = "response_truncated"
                episode.terminate_reason = "context_limit"
                return
            action = self.parse_action(text)
            if action is None:
                episode.invalid_actions += 1
                feedback = await self._env_call(self.invalid_action_feedback, env, text, episode)
            else:
                step = await self._env_call(self.step_env, env, action)
                episode.last = step
                episode.total_reward += float(step.reward)
                if step.valid:
                    episode.env_steps += 1
                else:
                    episode.invalid_actions += 1
                if step.done:
                    episode.done = True
                    episode.terminate_reason = str(step.info.get("terminate_reason") or "done")
                    return
                feedback = step.observation
            if episode.steps >= self.max_steps:
                episode.terminate_reason = "max_steps"
                return
            messages.append({"role": "user", "content": self.format_observation(feedback, episode)})

    def _stop_for_context(self, episode: Episode) -> None:
        """End the episode because the next turn does not fit in the model's context."""
        messages = episode.messages
        if not any(m.get("role") == "assistant" for m in messages):
            raise ValueError(
                f"{self.workflow_name}: the first observation does not leave room for a reply "
                f"within the model's max_model_len={getattr(self.model, 'max_model_len', None)}"
                f" (or max_prompt_tokens={getattr(self.model, 'max_prompt_tokens', None)}); "
                "raise the limit or shorten the system prompt / observation."
            )
        while messages and messages[-1].get("role") != "assistant":
            messages.pop()  # the unanswered observation is not part of the trajectory
        episode.truncate_status = "response_truncated"
        episode.terminate_reason = "context_limit"

    async def _response_budget(self, messages: list[dict[str, Any]]) -> Optional[int]:
        """Tokens the next reply may take so the conversation stays within ``max_model_len``."""
        max_len = getattr(self.model, "max_model_len", None)
        if not max_len:
            return None
        prompt_len = await resolve_awaitable(self.model.get_message_token_len(messages))
        # convert_messages_to_experience keeps at most max_model_len - 1 tokens
        return int(max_len) - 1 - int(prompt_len)

    # ------------------------------------------------------------------ env pool
    async def _env_call(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self.blocking_env:
            return await asyncio.to_thread(fn, *args)
        return fn(*args)

    async def _acquire_env(self, run_index: int) -> Any:
        if self.reuse_envs and self._idle_envs:
            return self._idle_envs.pop()
        return await self._env_call(self.create_env, run_index)

    async def _release_env(self, env: Any, healthy: bool) -> None:
        if self.reuse_envs and healthy:
            self._idle_envs.append(env)
            return
        try:
            await self._env_call(self.close_env, env)
        except Exception as exc:  # a failing close must not hide the episode's own outcome
            self.logger.warning("%s: closing an environment failed: %s", self.workflow_name, exc)

    def close(self) -> None:
        """Close the environments kept for reuse (call when the workflow is discarded)."""
        idle, self._idle_envs = self._idle_envs, []
        for env in idle:
            try:
                self.close_env(env)
            except Exception as exc:
                self.logger.warning(
                    "%s: closing an environment failed: %s", self.workflow_name, exc
                )


def _default_max_tokens(model: Any) -> Optional[int]:
    defaults = getattr(model, "default_generation_kwargs", None) or {}
    value = defaults.get("max_tokens")
    return int(value) if value else None
