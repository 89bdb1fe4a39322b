"""RAFT on ALFWorld: keep only the trajectories worth imitating (Trinity-RFT 0.6's RAFT pair).

RAFT (reward-ranked fine-tuning) trains by supervised fine-tuning on the model's own good
trajectories, so these workflows filter instead of scoring everything:

* ``RAFT_alfworld_workflow`` (:class:`RAFTAlfworldWorkflow`): play the game once; a won game
  whose every reply kept the format is kept (the whole conversation, as one experience);
* ``RAFT_reflect_alfworld_workflow`` (:class:`RAFTReflectAlfworldWorkflow`): a failed game is
  played again with the first attempt and a note on how it went in front of the model; the
  second attempt is kept (without that context, so the model learns to do it unaided) when it
  kept the format and either scored more, or won in fewer steps.

Every reply must hold three parts, in order: ``<experience>`` (what the episode taught so far),
``<think>`` (the plan) and ``<action>`` (one command). A reply without them is an invalid
action (feedback, counts as a step, the game is not touched) and breaks the trajectory's
format. Sending the same command three times in a row ends the first attempt with reward 0
(0.6's loop guard). Reward of an attempt: the game's reward on its last step (1 for a win).

A run that keeps nothing still returns one experience, as 0.6 does, so its metrics reach the
monitor: a masked placeholder (the opening prompt and one token, ``action_mask`` all zero,
reward 0, ``info["kept_for_sft"] = False``) that contributes no gradient. In evaluation
(``task.is_eval``) the played trajectory is returned with its reward, nothing is filtered.

``workflow_args``: those of ``alfworld_workflow`` (``max_steps`` / 0.6's ``max_env_steps``,
default 50 here; ``show_admissible_commands``, default false here), and for the reflecting
workflow ``data_dir``: a folder where each task's two attempts are written as JSON
(``sft_data/`` when kept, ``non_sft_data/`` otherwise; 0.6 always writes them to
``RAFT_reflect_alfworld_data`` in the working directory, here only when asked).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Optional

import torch

from trinity.common.experience import Experience
from trinity.common.workflows import WORKFLOWS, Task
from trinity.workflows.envs.alfworld import AlfworldWorkflow
from trinity.workflows.envs.base import EnvStep, Episode

__all__ = [
    "RAFTAlfworldWorkflow",
    "RAFTReflectAlfworldWorkflow",
    "RAFT_SYSTEM_PROMPT",
    "attempt_feedback",
    "masked_placeholder",
    "parse_raft_response",
    "raft_format_valid",
]

RAFT_SYSTEM_PROMPT = """You are an agent in a text-based household environment. Accomplish the \
task stated in the first observation, by yourself, without asking the user anything.

Every reply has exactly three parts, in this order:
<experience>what this episode has taught you so far that matters for the task: places \
checked, objects found, commands that worked or did nothing</experience>
<think>your plan for the next step</think>
<action>exactly one command</action>

Commands:
  look, inventory, examine (something)
  go to (receptacle), open (receptacle), close (receptacle)
  take (object) from (receptacle), move (object) to (receptacle)
  heat (object) with (receptacle), cool (object) with (receptacle), clean (object) with (receptacle)
  use (object), slice (object) with (object)"""

REFLECTION_GUIDANCE = """That was your previous attempt at this same task. {feedback}
Play it again from the start. Use what the attempt taught you, avoid its mistakes and reach \
the goal in as few steps as you can. Keep the same reply format."""

RAFT_INVALID_ACTION = (
    "Invalid response: write the three parts <experience>...</experience>, "
    "<think>...</think> and <action>...</action>, in this order, with exactly one command in "
    "the action. Nothing happened."
)

_RAFT_PARTS = re.compile(
    r"<experience>\s*(.*?)\s*</experience>.*?<think>\s*(.*?)\s*</think>.*?"
    r"<action>\s*(.*?)\s*</action>",
    re.S,
)


def parse_raft_response(text: str) -> dict[str, str]:
    """The ``experience``, ``think`` and ``action`` parts of a reply, in that order (all
    ``""`` when the reply does not hold the three)."""
    match = _RAFT_PARTS.search(text or "")
    if match is None:
        return {"experience": "", "think": "", "action": ""}
    experience, think, action = (part.strip() for part in match.groups())
    return {"experience": experience, "think": think, "action": action}


def raft_format_valid(messages: list[dict[str, Any]]) -> bool:
    """Whether every assistant reply of a conversation has its three parts, none empty."""
    for message in messages:
        if message.get("role") == "assistant":
            parts = parse_raft_response(str(message.get("content") or ""))
            if not all(parts.values()):
                return False
    return True


def attempt_feedback(reward: float, steps: int, done: bool, max_steps: int) -> str:
    """One sentence on how an attempt went, shown to the model before it tries again."""
    if done and reward >= 1:
        return f"You completed the task in {steps} steps (reward {reward:.3f}); now be quicker."
    if done:
        return (
            f"The game ended after {steps} steps with reward {reward:.3f}, short of success; "
            "find what went wrong."
        )
    if steps >= max_steps:
        return (
            f"You used all {max_steps} steps without finishing (reward {reward:.3f}); "
            "head for the goal more directly."
        )
    return (
        f"You stopped after {steps} steps without finishing (reward {reward:.3f}); "
        "change your approach and keep going until the task is done."
    )


def masked_placeholder(exp: Experience, info: dict[str, Any]) -> Experience:
    """A stand-in for a run that keeps nothing: ``exp``'s prompt and one token, masked out.

    It carries the run's ``info`` and metrics to the monitor and costs the trainer one token;
    its all-zero ``action_mask`` gives it no gradient.
    """
    keep = exp.prompt_length + 1
    info = {**(exp.info or {}), **info, "kept_for_sft": False}
    numeric = {k: float(v) for k, v in info.items() if isinstance(v, (int, float))}
    return Experience(
        eid=exp.eid,
        tokens=exp.tokens[:keep],
        prompt_length=exp.prompt_length,
        logprobs=None if exp.logprobs is None else exp.logprobs[:1],
        action_mask=torch.zeros(1, dtype=torch.bool),
        reward=0.0,
        info=info,
        metrics={**(exp.metrics or {}), **numeric},
    )


@dataclass
class Attempt:
    """One played episode: its conversation and outcome."""

    messages: list[dict[str, Any]]
    reward: float
    steps: int
    done: bool
    success: bool
    format_valid: bool
    truncate_status: Optional[str] = None


class _EpisodeEnv:
    """An ALFWorld environment and the commands sent to it in this episode (loop guard)."""

    def __init__(self, env: Any, stop_on_repeats: bool = True) -> None:
        self.env = env
        self.stop_on_repeats = stop_on_repeats
        self.actions: list[str] = []

    def reset(self) -> Any:
        self.actions.clear()
        return self.env.reset()

    def step(self, action: str) -> Any:
        return self.env.step(action)

    def close(self) -> None:
        close = getattr(self.env, "close", None)
        if callable(close):
            close()


@WORKFLOWS.register_module("RAFT_alfworld_workflow")
class RAFTAlfworldWorkflow(AlfworldWorkflow):
    """ALFWorld for RAFT: keep won trajectories in the three-part format (see the module)."""

    default_max_steps = 50
    default_system_prompt = RAFT_SYSTEM_PROMPT
    default_show_admissible_commands = False

    # ------------------------------------------------------------------ environment
    def create_env(self, run_index: int) -> Any:
        return _EpisodeEnv(super().create_env(run_index))

    def step_env(self, env: Any, action: str) -> EnvStep:
        env.actions.append(action)
        recent = env.actions[-3:]
        if env.stop_on_repeats and len(recent) == 3 and len(set(recent)) == 1:
            # a model repeating one command is stuck: end the attempt as a failure
            return EnvStep(
                observation="",
                reward=0.0,
                done=True,
                success=False,
                info={"terminate_reason": "repeated_action"},
            )
        return super().step_env(env, action)

    def parse_action(self, response_text: str) -> Optional[str]:
        return parse_raft_response(response_text)["action"] or None

    def invalid_action_feedback(self, env: Any, response_text: str, episode: Episode) -> str:
        return RAFT_INVALID_ACTION

    def episode_reward(self, episode: Episode) -> float:
        return float(episode.last.reward) if episode.last is not None else 0.0

    # ------------------------------------------------------------------ running
    async def run_episode(self, run_index: int) -> Experience:
        """Play once; keep the trajectory, or hand the failure to :meth:`after_failure`."""
        exp = await super().run_episode(run_index)
        first = _attempt_of(exp)
        if self.is_eval:
            return exp
        if first.success and first.format_valid:
            exp.info = {**exp.info, "kept_for_sft": True, "format_valid": 1.0}
            exp.metrics = {**exp.metrics, "kept_for_sft": 1.0, "format_valid": 1.0}
            return exp
        return await self.after_failure(run_index, exp, first)

    async def after_failure(self, run_index: int, exp: Experience, first: Attempt) -> Experience:
        """What a run that did not win in format returns: here, a masked placeholder."""
        return masked_placeholder(exp, {"format_valid": float(first.format_valid)})


def _attempt_of(exp: Experience) -> Attempt:
    info = exp.info or {}
    messages = list(exp.messages or [])
    return Attempt(
        messages=messages,
        reward=float(exp.reward or 0.0),
        steps=int(info.get("steps", 0)),
        # 0.6 counts an attempt ended by the loop guard as unfinished, not as a finished game
        done=bool(info.get("env_done")) and info.get("terminate_reason") != "repeated_action",
        success=bool(info.get("success")),
        format_valid=raft_format_valid(messages),
        truncate_status=exp.truncate_status,
    )


@WORKFLOWS.register_module("RAFT_reflect_alfworld_workflow")
class RAFTReflectAlfworldWorkflow(RAFTAlfworldWorkflow):
    """RAFT with a second, reflective attempt after a failure (see the module docstring)."""

    def configure(self, task: Task) -> None:
        super().configure(task)
        data_dir = self.workflow_args.get("data_dir")
        self.data_dir: Optional[Path] = Path(data_dir) if data_dir else None

    async def after_failure(self, run_index: int, exp: Experience, first: Attempt) -> Experience:
        if first.success:  # won, but with broken replies: nothing to learn from, as in 0.6
            return masked_placeholder(exp, {"format_valid": 0.0})
        second = await self.reflect(run_index, first)
        improved = second.reward > first.reward
        keep = second.format_valid and (
            improved or (second.steps < first.steps and second.reward >= 1)
        )
        info: dict[str, Any] = {
            "first_reward": first.reward,
            "first_steps": first.steps,
            "second_reward": second.reward,
            "second_steps": second.steps,
            "second_success": 1.0 if second.reward >= 1 else 0.0,
            "improvement": 1.0 if improved else 0.0,
            "format_valid": 1.0 if second.format_valid else 0.0,
        }
        self._save(run_index, first, second, keep)
        if not keep:
            return masked_placeholder(exp, info)
        kept = await self.process_messages_to_experience_async(
            second.messages,
            second.reward,
            info={**info, "kept_for_sft": True, "success": info["second_success"]},
            truncate_status=second.truncate_status,
        )
        kept.eid = exp.eid
        return kept

    async def reflect(self, run_index: int, first: Attempt) -> Attempt:
        """Play again with the first attempt and :func:`attempt_feedback` in front of the model.

        The returned conversation is the second attempt alone (system prompt, observations,
        replies): what the model should learn to produce without the first attempt's help.
        """
        env = await self._acquire_env(run_index)
        env.stop_on_repeats = False  # 0.6's second attempt has no loop guard
        healthy = False
        try:
            opening = await self._env_call(self.reset_env, env, run_index)
            feedback = attempt_feedback(first.reward, first.steps, first.done, self.max_steps)
            context = [*first.messages]
            episode = Episode(run_index=run_index, messages=context)
            shown = self.format_observation(opening, episode)
            guidance = REFLECTION_GUIDANCE.format(feedback=feedback)
            context.append({"role": "user", "content": f"{guidance}\n\n{shown}"})
            start = len(context)
            await self._play(env, episode)
            healthy = True
        finally:
            await self._release_env(env, healthy)
        messages = [{"role": "system", "content": self.system_prompt}]
        messages += [{"role": "user", "content": shown}, *episode.messages[start:]]
        return Attempt(
            messages=messages,
            reward=self.episode_reward(episode),
            steps=episode.steps,
            done=episode.done,
            success=self.episode_success(episode),
            format_valid=raft_format_valid(messages),
            truncate_status=episode.truncate_status,
        )

    def _save(self, run_index: int, first: Attempt, second: Attempt, kept: bool) -> None:
        """Write both attempts to ``data_dir`` (when set) for inspection."""
        if self.data_dir is None:
            return
        folder = self.data_dir / ("sft_data" if kept else "non_sft_data")
        folder.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now().strftime("%Y%m%d_%H%M%S_%f")
        record = {
            "game_file": self.game_file,
            "run": run_index,
            "kept_for_sft": kept,
            "first_attempt": _attempt_record(first),
            "second_attempt": _attempt_record(second),
        }
        path = folder / f"{stamp}_run{run_index}.json"
        path.write_text(json.dumps(record, ensure_ascii=False, indent=2), encoding="utf-8")


def _attempt_record(attempt: Attempt) -> dict[str, Any]:
    return {
        "trajectory": attempt.messages,
        "reward": attempt.reward,
        "steps": attempt.steps,
        "success": attempt.success,
        "format_valid": attempt.format_valid,
    }
