"""FrozenLake (gymnasium's ``FrozenLake-v1``) played by the model through text.

Every episode runs a real ``gymnasium.make("FrozenLake-v1", desc=..., is_slippery=...)``
environment. The model sees the grid as text and answers one move per turn; the whole episode
becomes one experience whose reward is gymnasium's (1 for reaching the goal, 0 otherwise).

Protocol (also stated in the system prompt):

* Observation: the grid, one row per line, cells separated by spaces — ``S`` start, ``F``
  frozen, ``H`` hole, ``G`` goal, ``P`` the player (drawn over the cell it stands on) — the
  player's row/column (1-based, row 1 at the top), what the last move did and the moves left.
* Action: one of ``Left``, ``Down``, ``Right``, ``Up`` (any case), written as a fenced block
  ```` ```Up``` ````, an ``<answer>Up</answer>`` / ``<action>Up</action>`` tag, or as the whole
  reply. With several fenced blocks or tags, the last one counts (the model may reason first).
  Anything else is an invalid action: the model is told so, the turn counts as a step and the
  environment does not move.

Task fields (the row's value, else ``workflow_args``): ``desc`` (an explicit map: a list of row
strings or one newline-separated string over ``SFHG``), else ``map_name`` (``"4x4"`` /
``"8x8"``), else a random map from ``size`` (default 4), ``p`` (probability of a frozen cell,
default 0.8) and ``seed`` (default 42) through gymnasium's ``generate_random_map``, which
guarantees a path from S to G; ``is_slippery`` (default False). ``seed`` also seeds the
environment (``seed + run index``), which matters only on slippery ice.

Workflow arguments: ``max_steps`` (model turns per episode, default 10) and the ones of
:class:`~trinity.workflows.envs.base.TextEnvWorkflow`.
"""

from __future__ import annotations

import re
from typing import Any, Optional

import gymnasium
from gymnasium.envs.toy_text.frozen_lake import MAPS, generate_random_map

from trinity.common.workflows import WORKFLOWS, Task
from trinity.workflows.envs.base import EnvStep, Episode, TextEnvWorkflow, as_bool

__all__ = ["FrozenLakeWorkflow", "ACTIONS", "parse_move", "render_grid"]

#: Move names → gymnasium FrozenLake action ids (0 Left, 1 Down, 2 Right, 3 Up).
ACTIONS: dict[str, int] = {"Left": 0, "Down": 1, "Right": 2, "Up": 3}
_BY_LOWER = {name.lower(): name for name in ACTIONS}
_DELTAS = {"Left": (0, -1), "Down": (1, 0), "Right": (0, 1), "Up": (-1, 0)}
_CELLS = set("SFHG")

# fenced blocks (```Up``` or ```\nUp\n```, an optional language word on its own line) and tags
_CANDIDATES = re.compile(
    r"```[ \t]*(?:[A-Za-z]*[ \t]*\n)?(?P<fence>.*?)```"
    r"|<(?P<tag>answer|action)>(?P<tagged>.*?)</(?P=tag)>",
    re.S | re.I,
)

SYSTEM_PROMPT = """You are walking on a frozen lake drawn as a grid of letters:
S = start, F = frozen ice (safe), H = hole, G = goal, P = you.
Row 1 is the top row and column 1 the leftmost column. Reach G without stepping into an H: \
stepping into a hole ends the game. Walking off the edge of the grid leaves you where you are.{slippery}

Each turn, answer with exactly one move: Left, Down, Right or Up, written in a fenced block, \
for example ```Up```. You may think first; only your last ``` ``` block counts. \
You have at most {max_steps} moves."""

SLIPPERY_NOTE = (
    "\nThe ice is slippery: a move goes the intended way only part of the time and otherwise "
    "slides you sideways (perpendicular to it)."
)


def parse_move(text: str) -> Optional[str]:
    """The move a reply names (``"Left"``/``"Down"``/``"Right"``/``"Up"``), or ``None``.

    The last fenced block or ``<answer>``/``<action>`` tag decides; without any, the whole
    reply must be the move (surrounding whitespace and a final period are ignored).
    """
    text = text or ""
    last = None
    for match in _CANDIDATES.finditer(text):
        last = match
    if last is not None:
        candidate = last.group("fence") if last.group("fence") is not None else last.group("tagged")
    else:
        candidate = text
    word = candidate.strip().rstrip(".!").strip().strip("`*'\"").strip()
    return _BY_LOWER.get(word.lower())


def render_grid(desc: list[str], row: int, col: int) -> str:
    """The map as text, ``P`` drawn at ``(row, col)``."""
    lines = []
    for r, line in enumerate(desc):
        cells = ["P" if (r, c) == (row, col) else ch for c, ch in enumerate(line)]
        lines.append(" ".join(cells))
    return "\n".join(lines)


def _normalize_desc(value: Any, who: str) -> list[str]:
    """A map given as rows (str or list of chars) or one newline-separated string, validated."""
    if isinstance(value, str):
        rows = [line.strip() for line in value.strip().splitlines()]
    elif isinstance(value, (list, tuple)):
        rows = []
        for row in value:
            if isinstance(row, bytes):
                row = row.decode()
            elif isinstance(row, (list, tuple)):
                row = "".join(c.decode() if isinstance(c, bytes) else str(c) for c in row)
            if not isinstance(row, str):
                raise ValueError(f"{who}: desc rows must be strings, got {row!r}")
            rows.append(row.strip())
    else:
        raise ValueError(
            f"{who}: desc must be a list of row strings (e.g. ['SFFF', 'FHFH', 'FFFH', 'HFFG']) "
            f"or one newline-separated string, got {type(value).__name__}"
        )
    rows = [r.replace(" ", "").upper() for r in rows if r]
    if not rows or len({len(r) for r in rows}) != 1:
        raise ValueError(f"{who}: desc must be a non-empty rectangle of cells, got {rows!r}")
    bad = sorted({c for r in rows for c in r} - _CELLS)
    if bad:
        raise ValueError(f"{who}: desc may only contain S, F, H, G; found {bad} in {rows!r}")
    starts = sum(r.count("S") for r in rows)
    if starts != 1 or not any("G" in r for r in rows):
        raise ValueError(
            f"{who}: desc needs exactly one S and at least one G, got {starts} S in {rows!r}"
        )
    return rows


@WORKFLOWS.register_module("frozen_lake_workflow")
class FrozenLakeWorkflow(TextEnvWorkflow):
    """Walk gymnasium's FrozenLake from S to G by text moves (see the module docstring).

    ``repeat_times`` episodes of the same map run concurrently (each its own gymnasium
    environment), one experience each, with ``eid.run`` set. Info/metrics per experience:
    ``success``, ``steps`` (model turns), ``env_steps``, ``invalid_actions``, ``env_reward``,
    ``env_done`` and ``terminate_reason`` (``goal``, ``hole``, ``time_limit``, ``max_steps``,
    ``context_limit``).
    """

    default_max_steps = 10
    blocking_env = False  # gymnasium's FrozenLake steps in microseconds

    def configure(self, task: Task) -> None:
        who = self.workflow_name
        self.seed = self._int_setting("seed", 42, minimum=0)
        self.is_slippery = as_bool(self.setting("is_slippery", False), "is_slippery", who)
        desc = self.setting("desc")
        map_name = self.setting("map_name")
        if desc is not None:
            self.desc = _normalize_desc(desc, who)
        elif map_name is not None:
            if map_name not in MAPS:
                raise ValueError(
                    f"{who}: unknown map_name {map_name!r}; allowed: {sorted(MAPS)} "
                    "(or give desc, or size/p/seed for a random map)"
                )
            self.desc = list(MAPS[map_name])
        else:
            size = self._int_setting("size", 4, minimum=2)
            p = self.setting("p", 0.8)
            if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1:
                raise ValueError(
                    f"{who}: p (probability of a frozen cell) must be in (0, 1], got {p!r}"
                )
            self.desc = list(generate_random_map(size=size, p=float(p), seed=self.seed))

    def _int_setting(self, key: str, default: int, minimum: Optional[int]) -> int:
        value = self.setting(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise ValueError(f"{self.workflow_name}: {key} must be an integer, got {value!r}")
        if minimum is not None and value < minimum:
            raise ValueError(f"{self.workflow_name}: {key} must be >= {minimum}, got {value!r}")
        return value

    def build_system_prompt(self) -> str:
        return SYSTEM_PROMPT.format(
            slippery=SLIPPERY_NOTE if self.is_slippery else "", max_steps=self.max_steps
        )

    # ------------------------------------------------------------------ environment
    def create_env(self, run_index: int) -> Any:
        return gymnasium.make("FrozenLake-v1", desc=self.desc, is_slippery=self.is_slippery)

    def reset_env(self, env: Any, run_index: int) -> str:
        env.reset(seed=self.seed + run_index)
        return self._describe(env, "")

    def step_env(self, env: Any, action: str) -> EnvStep:
        before = self._position(env)
        _, reward, terminated, truncated, _ = env.step(ACTIONS[action])
        after = self._position(env)
        cell = self.desc[after[0]][after[1]]
        if after == before:
            note = f"You tried to move {action} but stayed where you are."
        elif (after[0] - before[0], after[1] - before[1]) == _DELTAS[action]:
            note = f"You moved {action}."
        else:
            note = f"You tried to move {action} but slid to another cell."
        reason = ""
        if terminated:
            reason = "goal" if cell == "G" else "hole"
        elif truncated:
            reason = "time_limit"
        return EnvStep(
            observation=self._describe(env, note),
            reward=float(reward),
            done=bool(terminated or truncated),
            success=bool(terminated and cell == "G"),
            info={"terminate_reason": reason, "terminated": terminated, "truncated": truncated},
        )

    @staticmethod
    def _position(env: Any) -> tuple[int, int]:
        base = env.unwrapped
        state = int(base.s)
        return state // base.ncol, state % base.ncol

    def _describe(self, env: Any, note: str) -> str:
        row, col = self._position(env)
        text = f"{note}\n" if note else ""
        return (
            text
            + f"{render_grid(self.desc, row, col)}\nYou are at row {row + 1}, column {col + 1}."
        )

    # ------------------------------------------------------------------ model side
    def parse_action(self, response_text: str) -> Optional[str]:
        return parse_move(response_text)

    def invalid_action_feedback(self, env: Any, response_text: str, episode: Episode) -> str:
        return (
            "Invalid action: answer with exactly one of Left, Down, Right, Up in a fenced "
            "block, e.g. ```Up```. You did not move.\n" + self._describe(env, "")
        )

    def format_observation(self, observation: str, episode: Episode) -> str:
        left = self.max_steps - episode.steps
        return f"{observation}\nMoves left: {left}. Your move?"

    def episode_info(self, episode: Episode) -> dict[str, Any]:
        # strings and booleans stay in info only (metrics are numeric)
        return {"map": "\n".join(self.desc), "is_slippery": self.is_slippery}
