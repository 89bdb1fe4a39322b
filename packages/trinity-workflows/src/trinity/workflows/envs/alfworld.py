"""ALFWorld household tasks (TextWorld engine) played by the model through text.

Needs the ``alfworld`` package (``pip install 'trinity-workflows[alfworld]'``, which brings
TextWorld) and ALFWorld's game files (``alfworld-download``). Each task row names one game by
its ``game_file`` (the ``game.tw-pddl`` of an ALFWorld trajectory folder); older Trinity data
sets put that path in the prompt column, which is accepted too.

Every episode starts a TextWorld environment on that game the way ALFWorld's own
``AlfredTWEnv`` does (``textworld.gym.register_game`` with ALFWorld's ``AlfredDemangler``, so
objects have their readable names, and ``won`` / ``admissible_commands`` requested), then:

* observation: TextWorld's text (plus, by default, the admissible commands);
* action: the text command inside ``<action>…</action>`` (the last one counts); a reply
  without it is an invalid action (feedback, counts as a step, the game is not touched);
* reward: 1 when the game is won (``infos["won"]``), else 0; ``success`` likewise.

Workflow arguments: ``max_steps`` (default 30), ``show_admissible_commands`` (default true),
and those of :class:`~trinity.workflows.envs.base.TextEnvWorkflow`.
"""

from __future__ import annotations

from typing import Any

from trinity.common.workflows import WORKFLOWS, Task
from trinity.workflows.common import MissingTaskFieldError, registered_name
from trinity.workflows.envs.base import (
    EnvStep,
    Episode,
    TextEnvWorkflow,
    as_bool,
    import_env_module,
)

__all__ = ["AlfworldWorkflow", "ALFWORLD_INSTALL", "ALFWORLD_SYSTEM_PROMPT"]

ALFWORLD_INSTALL = (
    "Install it with: pip install 'trinity-workflows[alfworld]' (then fetch the game files "
    "with `alfworld-download`; see https://github.com/alfworld/alfworld)."
)

ALFWORLD_SYSTEM_PROMPT = """You are an agent in a text-based household environment. \
Accomplish the task stated in the first observation.

Each turn, you may think briefly, then give exactly ONE command inside <action></action>, \
for example <action>go to cabinet 1</action>. Only the last <action> tag counts.
Commands:
  look, inventory, examine (something)
  go to (receptacle), open (receptacle), close (receptacle)
  take (object) from (receptacle), move (object) to (receptacle)
  heat (object) with (receptacle), cool (object) with (receptacle), clean (object) with (receptacle)
  use (object), slice (object) with (object)
Do not ask the user anything; finish the task by yourself."""


@WORKFLOWS.register_module("alfworld_workflow")
class AlfworldWorkflow(TextEnvWorkflow):
    """ALFWorld through TextWorld: one experience per episode, reward 1 for a won game."""

    default_max_steps = 30
    default_system_prompt = ALFWORLD_SYSTEM_PROMPT
    blocking_env = True
    reuse_envs = False  # a TextWorld environment is bound to its game file

    @classmethod
    def check_dependencies(cls) -> None:
        name = registered_name(cls)
        import_env_module("alfworld", name, ALFWORLD_INSTALL)
        import_env_module("textworld", name, ALFWORLD_INSTALL)

    def configure(self, task: Task) -> None:
        game_file = self.raw_task.get("game_file") or self.workflow_args.get("game_file")
        if not game_file and task.format_args.prompt_key:
            game_file = self.raw_task.get(task.format_args.prompt_key)
        if not game_file or not isinstance(game_file, str):
            raise MissingTaskFieldError(
                f"{self.workflow_name}: the task row lacks 'game_file' (the path of an ALFWorld "
                f"game.tw-pddl; the prompt column {task.format_args.prompt_key!r} is also "
                f"accepted); the row has keys {sorted(self.raw_task) or 'none'}."
            )
        self.game_file = game_file
        self.show_admissible_commands = as_bool(
            self.workflow_args.get("show_admissible_commands", True),
            "show_admissible_commands",
            self.workflow_name,
        )

    # ------------------------------------------------------------------ environment
    def create_env(self, run_index: int) -> Any:
        name = self.workflow_name
        textworld = import_env_module("textworld", name, ALFWORLD_INSTALL)
        tw_gym = import_env_module("textworld.gym", name, ALFWORLD_INSTALL)
        alfred = import_env_module(
            "alfworld.agents.environment.alfred_tw_env", name, ALFWORLD_INSTALL
        )
        infos = textworld.EnvInfos(won=True, admissible_commands=True)
        env_id = tw_gym.register_game(
            self.game_file,
            infos,
            # one more than our own limit: the loop, not TextWorld, ends the episode on steps
            max_episode_steps=self.max_steps + 1,
            wrappers=[alfred.AlfredDemangler()],
        )
        return tw_gym.make(env_id)

    def reset_env(self, env: Any, run_index: int) -> str:
        observation, infos = env.reset()
        return self._observation(observation, infos)

    def step_env(self, env: Any, action: str) -> EnvStep:
        observation, _score, done, infos = env.step(action)
        won = bool((infos or {}).get("won"))
        return EnvStep(
            observation=self._observation(observation, infos),
            reward=1.0 if won else 0.0,
            done=bool(done) or won,
            success=won,
            info={"terminate_reason": "won" if won else ("env_done" if done else "")},
        )

    def _observation(self, observation: Any, infos: dict[str, Any]) -> str:
        text = str(observation)
        if "Nothing happens." in text:
            text += " (The command had no effect: check that it is valid here and well formed.)"
        commands = (infos or {}).get("admissible_commands")
        if self.show_admissible_commands and commands:
            text += "\nAdmissible commands: " + ", ".join(str(c) for c in commands)
        return text

    def invalid_action_feedback(self, env: Any, response_text: str, episode: Episode) -> str:
        return (
            "Invalid response: no command found. Put exactly one command inside "
            "<action></action>, for example <action>look</action>. Nothing happened."
        )
