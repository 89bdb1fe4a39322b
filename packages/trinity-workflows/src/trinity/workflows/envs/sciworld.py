"""ScienceWorld experiments played by the model through text.

Needs the ``scienceworld`` package (``pip install 'trinity-workflows[sciworld]'``) and Java 1.8+
on ``PATH`` (the simulator is a JVM started by ``ScienceWorldEnv``). The adapter uses the
package's documented API: ``ScienceWorldEnv("", serverPath, envStepLimit)``,
``env.load(task_name, variation, simplification)``, ``env.reset() -> (obs, info)``,
``env.step(action) -> (obs, reward, done, info)`` with ``info["score"]`` in 0-100 (negative
when the task failed) and ``env.get_task_description()``.

Task fields (row first, then ``workflow_args``): ``task_name`` (e.g. ``"boil"``), ``variation``
(alias ``var_num``, default 0), ``simplification`` (default ``"easy"``). Older Trinity data sets
put ``{"task_name": ..., "var_num": ...}`` as JSON in the prompt column; that is accepted too.

* observation: the task description, then the simulator's text;
* action: the command inside ``<action>…</action>`` (the last one counts); a reply without it
  is an invalid action (feedback, counts as a step, the simulator is not touched);
* reward: the final score / 100, clipped at 0 (a failed task scores -100 in ScienceWorld);
  ``success`` when the simulator completed the task with score 100.

Workflow arguments: ``max_steps`` (default 30), ``jar_path`` (a custom simulator jar),
``env_step_limit`` (the simulator's own limit, default 100), ``max_parallel_envs`` (default 4:
each environment is a JVM, kept between episodes and tasks), and those of
:class:`~trinity.workflows.envs.base.TextEnvWorkflow`.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from trinity.common.workflows import WORKFLOWS, Task
from trinity.workflows.common import MissingTaskFieldError, registered_name
from trinity.workflows.envs.base import EnvStep, Episode, TextEnvWorkflow, import_env_module

__all__ = ["SciWorldWorkflow", "SCIWORLD_INSTALL", "SCIWORLD_SYSTEM_PROMPT"]

SCIWORLD_INSTALL = (
    "Install it with: pip install 'trinity-workflows[sciworld]' "
    "(ScienceWorld also needs Java 1.8+ on PATH)."
)

SCIWORLD_SYSTEM_PROMPT = """You are an agent doing a science experiment in a text-based \
virtual environment. Accomplish the task stated in the first observation.

Each turn, you may think briefly, then give exactly ONE command inside <action></action>, \
for example <action>look around</action>. Only the last <action> tag counts.
Commands:
  look around, look at OBJ, examine OBJ, read OBJ, inventory
  open OBJ, close OBJ, activate OBJ, deactivate OBJ
  connect OBJ to OBJ, disconnect OBJ, use OBJ [on OBJ]
  pick up OBJ, put down OBJ, move OBJ to OBJ, pour OBJ into OBJ, mix OBJ
  teleport to LOC, go to LOC, focus on OBJ, wait, wait1
Use "focus on" only on the object the task is about: focusing on a wrong object fails the task.
Do not ask the user anything; finish the task by yourself."""


@WORKFLOWS.register_module("sciworld_workflow")
class SciWorldWorkflow(TextEnvWorkflow):
    """ScienceWorld: one experience per episode, reward = final score / 100."""

    default_max_steps = 30
    default_max_parallel_envs = 4
    default_system_prompt = SCIWORLD_SYSTEM_PROMPT
    blocking_env = True
    reuse_envs = True  # a ScienceWorldEnv is a JVM: start it once, load tasks into it

    @classmethod
    def check_dependencies(cls) -> None:
        import_env_module("scienceworld", registered_name(cls), SCIWORLD_INSTALL)

    def configure(self, task: Task) -> None:
        who = self.workflow_name
        fields = dict(self.raw_task)
        prompt = fields.get(task.format_args.prompt_key) if task.format_args.prompt_key else None
        if "task_name" not in fields and isinstance(prompt, str) and prompt.lstrip()[:1] == "{":
            try:
                fields.update(json.loads(prompt))
            except json.JSONDecodeError:
                pass
        task_name = fields.get("task_name") or self.workflow_args.get("task_name")
        if not task_name or not isinstance(task_name, str):
            raise MissingTaskFieldError(
                f"{who}: the task row lacks 'task_name' (a ScienceWorld task such as 'boil'); "
                f"the row has keys {sorted(self.raw_task) or 'none'}."
            )
        variation = fields.get("variation", fields.get("var_num"))
        if variation is None:
            variation = self.workflow_args.get("variation", 0)
        if isinstance(variation, bool) or not isinstance(variation, (int, str)):
            raise ValueError(f"{who}: variation must be a non-negative integer, got {variation!r}")
        try:
            variation = int(variation)
        except ValueError:
            raise ValueError(
                f"{who}: variation must be a non-negative integer, got {variation!r}"
            ) from None
        if variation < 0:
            raise ValueError(f"{who}: variation must be a non-negative integer, got {variation!r}")
        simplification = fields.get("simplification")
        if simplification is None:
            simplification = self.workflow_args.get("simplification", "easy")
        self.task_name: str = task_name
        self.variation: int = variation
        self.simplification: str = str(simplification or "")
        self.jar_path: Optional[str] = self.workflow_args.get("jar_path") or fields.get("jar_path")
        limit = self.workflow_args.get("env_step_limit", 100)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"{who}: env_step_limit must be a positive integer, got {limit!r}")
        self.env_step_limit: int = limit

    def env_settings(self) -> Any:
        return (self.jar_path, self.env_step_limit)

    # ------------------------------------------------------------------ environment
    def create_env(self, run_index: int) -> Any:
        module = import_env_module("scienceworld", self.workflow_name, SCIWORLD_INSTALL)
        try:
            return module.ScienceWorldEnv("", self.jar_path, envStepLimit=self.env_step_limit)
        except OSError as exc:  # py4j could not start `java`
            raise RuntimeError(
                f"{self.workflow_name}: starting the ScienceWorld simulator failed ({exc}); "
                "it needs Java 1.8+ on PATH."
            ) from exc

    def reset_env(self, env: Any, run_index: int) -> str:
        env.load(self.task_name, self.variation, self.simplification)
        observation, _info = env.reset()
        return f"Task: {env.get_task_description()}\n\n{observation}"

    def step_env(self, env: Any, action: str) -> EnvStep:
        observation, reward, done, info = env.step(action)
        score = int((info or {}).get("score", 0))
        if done:
            reason = "completed" if score >= 100 else ("failed" if score < 0 else "env_step_limit")
        else:
            reason = ""
        return EnvStep(
            observation=str(observation),
            reward=float(reward) / 100.0,
            done=bool(done),
            success=bool(done and score >= 100),
            info={"score": score, "terminate_reason": reason},
        )

    def invalid_action_feedback(self, env: Any, response_text: str, episode: Episode) -> str:
        return (
            "Invalid response: no command found. Put exactly one command inside "
            "<action></action>, for example <action>look around</action>. Nothing happened."
        )

    # ------------------------------------------------------------------ outcome
    def _final_score(self, episode: Episode) -> int:
        return int(episode.last.info.get("score", 0)) if episode.last is not None else 0

    def episode_reward(self, episode: Episode) -> float:
        return max(0, self._final_score(episode)) / 100.0

    def episode_info(self, episode: Episode) -> dict[str, Any]:
        # the raw 0-100 score is a metric; which task/variation stays a string (not averaged)
        return {
            "score": self._final_score(episode),
            "sciworld_task": f"{self.task_name}/{self.variation}",
        }
