"""ALFWorld trained step by step (Trinity-RFT 0.6's ``step_wise_alfworld_workflow``).

The same games as :mod:`~trinity.workflows.envs.alfworld` (same environment, same game-file
lookup), but the episode is not one experience for the whole conversation: every model turn
is its own :class:`~trinity.common.experience.Experience`, recorded exactly as sampled by the
model's history (``explorer.rollout_model.enable_history: true``), with ``eid.step`` the turn.
That is what step-wise algorithms (``multi_step_grpo``, GiGPO) group by. The workflow is a
:class:`~trinity.common.workflows.step_wise_workflow.AsyncRewardPropagationWorkflow`:

* reward: the episode's final reward goes to every step: 1 when the game is won, 0 when the
  game ended otherwise, -0.1 when the turn limit came first (0.6's rule);
  ``metrics["actual_env_steps"]`` counts the turns;
* ``info["env_state_hash"]``: SHA-256 of the observation the model saw before acting (the
  anchor state GiGPO groups steps by), ``info["step_reward"]``: what that step's action earned
  from the game;
* a reply without ``<action>…</action>`` gets the feedback of ``alfworld_workflow`` and counts
  as a step without touching the game; a prompt that no longer fits the model ends the
  episode (that call's placeholder experience is masked out by the model).

One run plays one episode (the runner repeats runs; concurrent runs get their own instance and
history), as in 0.6. ``workflow_args``: ``max_env_steps`` (0.6's name, default 30; ``max_steps``
also works), ``show_admissible_commands`` (default false: 0.6 does not list them),
``system_prompt``.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any, Optional

from trinity.common.experience import Experience
from trinity.common.models.calls import call_model
from trinity.common.workflows import WORKFLOWS, Task, Workflow
from trinity.common.workflows.step_wise_workflow import AsyncRewardPropagationWorkflow
from trinity.workflows.common import generation_kwargs, registered_name
from trinity.workflows.envs.alfworld import (
    ALFWORLD_INVALID_ACTION,
    ALFWORLD_SYSTEM_PROMPT,
    alfworld_observation,
    check_alfworld_installed,
    make_alfworld_env,
    read_game_file,
)
from trinity.workflows.envs.base import _positive_int, as_bool, parse_tagged_action

__all__ = ["StepWiseAlfworldWorkflow", "UNFINISHED_REWARD"]

#: Reward of an episode the turn limit ended before the game did (0.6's value).
UNFINISHED_REWARD = -0.1


@WORKFLOWS.register_module("step_wise_alfworld_workflow")
class StepWiseAlfworldWorkflow(AsyncRewardPropagationWorkflow):
    """ALFWorld with one experience per model turn and the final reward on each (see module)."""

    can_reset = True
    can_repeat = False
    is_async = True

    def __init__(
        self,
        *args: Any,
        task: Optional[Task] = None,
        model: Any = None,
        auxiliary_models: Optional[list] = None,
        use_openai_client: bool = False,
    ) -> None:
        super().__init__(
            *args,
            task=task,
            model=model,
            auxiliary_models=auxiliary_models,
            use_openai_client=use_openai_client,
        )
        self.reset(self.task)

    @property
    def workflow_name(self) -> str:
        return registered_name(type(self))

    def reset(self, task: Task) -> None:
        """Read the task (game file and settings); the game starts when a run starts."""
        who = self.workflow_name
        check_alfworld_installed(who)
        self.task = task
        self.raw_task: dict[str, Any] = dict(task.raw_task or {})
        self.workflow_args: dict[str, Any] = dict(task.workflow_args or {})
        self.rollout_args = task.rollout_args
        self.is_eval = task.is_eval
        args = self.workflow_args
        self.game_file = read_game_file(task, self.raw_task, args, who)
        steps = args.get("max_env_steps", args.get("max_steps", 30))
        self.max_env_steps = _positive_int(steps, "max_env_steps", who)
        self.show_admissible_commands = as_bool(
            args.get("show_admissible_commands", False), "show_admissible_commands", who
        )
        self.system_prompt = str(
            task.format_args.system_prompt or args.get("system_prompt") or ALFWORLD_SYSTEM_PROMPT
        )

    @property
    def max_step_num(self) -> int:
        return self.max_env_steps

    # ------------------------------------------------------------------ running
    def run(self) -> list[Experience]:
        # the step-wise base's run() drives a synchronous step(); this workflow's steps are
        # async, so run() drives run_async() like every async workflow
        return Workflow.run(self)

    async def run_async(self) -> list[Experience]:
        """Play one episode; its step experiences carry the final reward and step metadata."""
        self.model.extract_experience_from_history()  # drop calls recorded before this run
        self._env = await asyncio.to_thread(
            make_alfworld_env, self.game_file, self.max_env_steps + 1, self.workflow_name
        )
        try:
            observation, infos = await asyncio.to_thread(self._env.reset)
            self._observation = alfworld_observation(
                observation, infos, self.show_admissible_commands
            )
            self._memory: list[dict[str, Any]] = [{"role": "system", "content": self.system_prompt}]
            self._done = False
            self._won = False
            self._final_reward = UNFINISHED_REWARD
            self._invalid_actions = 0
            self._step_meta: dict[int, tuple[str, float]] = {}
            experiences = await super().run_async()
        finally:
            await asyncio.to_thread(_close, self._env)
        return self._annotate(experiences)

    async def step_async(self, step_num: int) -> bool:
        """One turn: show the observation, sample an action, play it; ``False`` ends the run."""
        if self._done:
            return False
        shown = f"Observation:\n{self._observation}"
        state_hash = hashlib.sha256(shown.encode()).hexdigest()
        self._memory.append({"role": "user", "content": shown})
        kwargs = generation_kwargs(self.rollout_args, n=1)
        reply = (await call_model(self.model, "chat", self._memory, **kwargs))[0]
        self._step_meta[step_num] = (state_hash, 0.0)
        if reply.truncate_status == "prompt_truncated":
            return False  # the conversation outgrew the model: the episode ends unfinished
        text = reply.response_text or ""
        self._memory.append({"role": "assistant", "content": text})
        action = parse_tagged_action(text, "action")
        if action is None:
            self._invalid_actions += 1
            self._observation = ALFWORLD_INVALID_ACTION
            return True
        observation, score, done, infos = await asyncio.to_thread(self._env.step, action)
        self._won = bool((infos or {}).get("won"))
        self._step_meta[step_num] = (state_hash, float(score or 0.0))
        self._observation = alfworld_observation(observation, infos, self.show_admissible_commands)
        if done or self._won:
            self._done = True
            self._final_reward = 1.0 if self._won else 0.0
        return not self._done

    async def reward_async(self, exps: list[Experience]) -> float:
        return self._final_reward

    def _annotate(self, experiences: list[Experience]) -> list[Experience]:
        """Each step's GiGPO anchor (``env_state_hash``), step reward and episode outcome."""
        episode = {
            "success": 1.0 if self._won else 0.0,
            "env_done": 1.0 if self._done else 0.0,
            "invalid_actions": float(self._invalid_actions),
        }
        for exp in experiences:
            state_hash, step_reward = self._step_meta.get(exp.eid.step, ("", 0.0))
            exp.info = {
                **(exp.info or {}),
                "env_state_hash": state_hash,
                "step_reward": step_reward,
            }
            exp.metrics = {**(exp.metrics or {}), **episode}
        return experiences


def _close(env: Any) -> None:
    close = getattr(env, "close", None)
    if callable(close):
        close()
