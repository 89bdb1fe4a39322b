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

Workflow arguments: ``max_steps`` (default 30; Trinity-RFT 0.6's ``max_env_steps`` is read
when ``max_steps`` is not given), ``show_admissible_commands`` (default true), and those of
:class:`~trinity.workflows.envs.base.TextEnvWorkflow`.

The environment, the game-file lookup and the observation text are module functions
(:func:`make_alfworld_env`, :func:`read_game_file`, :func:`alfworld_observation`) because 0.6's
other ALFWorld workflows (:mod:`~trinity.workflows.envs.alfworld_step_wise`,
:mod:`~trinity.workflows.envs.alfworld_raft`) play the same games with other loops.
"""

from __future__ import annotations

from collections.abc import Mapping
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
from trinity.workflows.envs.env_args import read_max_steps

__all__ = [
    "AlfworldWorkflow",
    "ALFWORLD_INSTALL",
    "ALFWORLD_INVALID_ACTION",
    "ALFWORLD_SYSTEM_PROMPT",
    "alfworld_observation",
    "check_alfworld_installed",
    "make_alfworld_env",
    "read_game_file",
]

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


ALFWORLD_INVALID_ACTION = (
    "Invalid response: no command found. Put exactly one command inside "
    "<action></action>, for example <action>look</action>. Nothing happened."
)


def check_alfworld_installed(who: str) -> None:
    """Raise :class:`~trinity.workflows.envs.base.EnvironmentNotInstalledError` (naming ``who``
    and the install command) unless ALFWorld and TextWorld import."""
    import_env_module("alfworld", who, ALFWORLD_INSTALL)
    import_env_module("textworld", who, ALFWORLD_INSTALL)


def read_game_file(
    task: Task, raw_task: Mapping[str, Any], workflow_args: Mapping[str, Any], who: str
) -> str:
    """The ALFWorld game of a task: the row's ``game_file``, else ``workflow_args.game_file``,
    else the prompt column (0.6's data sets put the path there, read as ``task.task_desc``)."""
    game_file = raw_task.get("game_file") or workflow_args.get("game_file")
    if not game_file and task.format_args.prompt_key:
        game_file = raw_task.get(task.format_args.prompt_key)
    if not game_file or not isinstance(game_file, str):
        raise MissingTaskFieldError(
            f"{who}: the task row lacks 'game_file' (the path of an ALFWorld "
            f"game.tw-pddl; the prompt column {task.format_args.prompt_key!r} is also "
            f"accepted); the row has keys {sorted(raw_task) or 'none'}."
        )
    return game_file


def make_alfworld_env(game_file: str, max_episode_steps: int, who: str) -> Any:
    """A TextWorld environment on one ALFWorld game, set up as ALFWorld's ``AlfredTWEnv`` does.

    Objects get their readable names (``AlfredDemangler``); ``won`` and
    ``admissible_commands`` are requested. ``max_episode_steps`` should exceed the workflow's
    own limit: the workflow, not TextWorld, ends an episode on steps.
    """
    textworld = import_env_module("textworld", who, ALFWORLD_INSTALL)
    tw_gym = import_env_module("textworld.gym", who, ALFWORLD_INSTALL)
    alfred = import_env_module("alfworld.agents.environment.alfred_tw_env", who, ALFWORLD_INSTALL)
    infos = textworld.EnvInfos(won=True, admissible_commands=True)
    env_id = tw_gym.register_game(
        game_file,
        infos,
        max_episode_steps=max_episode_steps,
        wrappers=[alfred.AlfredDemangler()],
    )
    return tw_gym.make(env_id)


def alfworld_observation(
    observation: Any, infos: Optional[Mapping[str, Any]], show_admissible_commands: bool
) -> str:
    """The text shown for a TextWorld observation: a hint when the command did nothing, and
    the admissible commands when asked for."""
    text = str(observation)
    if "Nothing happens." in text:
        text += " (The command had no effect: check that it is valid here and well formed.)"
    commands = (infos or {}).get("admissible_commands")
    if show_admissible_commands and commands:
        text += "\nAdmissible commands: " + ", ".join(str(c) for c in commands)
    return text


@WORKFLOWS.register_module("alfworld_workflow")
class AlfworldWorkflow(TextEnvWorkflow):
    """ALFWorld through TextWorld: one experience per episode, reward 1 for a won game."""

    default_max_steps = 30
    default_system_prompt = ALFWORLD_SYSTEM_PROMPT
    #: whether observations list the admissible commands (``workflow_args`` overrides)
    default_show_admissible_commands = True
    blocking_env = True
    reuse_envs = False  # a TextWorld environment is bound to its game file

    @classmethod
    def check_dependencies(cls) -> None:
        check_alfworld_installed(registered_name(cls))

    def configure(self, task: Task) -> None:
        who = self.workflow_name
        self.max_steps = read_max_steps(self.workflow_args, self.max_steps, who)
        self.game_file = read_game_file(task, self.raw_task, self.workflow_args, who)
        self.show_admissible_commands = as_bool(
            self.workflow_args.get(
                "show_admissible_commands", self.default_show_admissible_commands
            ),
            "show_admissible_commands",
            who,
        )

    # ------------------------------------------------------------------ environment
    def create_env(self, run_index: int) -> Any:
        # one more step than our own limit: the loop, not TextWorld, ends the episode on steps
        return make_alfworld_env(self.game_file, self.max_steps + 1, self.workflow_name)

    def reset_env(self, env: Any, run_index: int) -> str:
        observation, infos = env.reset()
        return alfworld_observation(observation, infos, self.show_admissible_commands)

    def step_env(self, env: Any, action: str) -> EnvStep:
        observation, _score, done, infos = env.step(action)
        won = bool((infos or {}).get("won"))
        return EnvStep(
            observation=alfworld_observation(observation, infos, self.show_admissible_commands),
            reward=1.0 if won else 0.0,
            done=bool(done) or won,
            success=won,
            info={"terminate_reason": "won" if won else ("env_done" if done else "")},
        )

    def invalid_action_feedback(self, env: Any, response_text: str, episode: Episode) -> str:
        return ALFWORLD_INVALID_ACTION
