"""A small deterministic text adventure played through tool calls.

The house is a ``size`` x ``size`` grid of rooms joined by a random maze (a spanning tree, so
every room is reachable and the way is unique); a key lies in one room, a locked chest stands in
another. The agent wins by taking the key, walking to the chest and using the key. Everything is
drawn from the task row's ``seed``, so all runs of a task (a GRPO group) play the same house.

Tools (bound to one episode's game): ``look()``, ``move(direction)``, ``take(item)``,
``use(item)``, ``inventory()``. Walking into a wall or taking an absent item is an ordinary
observation (the game answers); a direction that is not north/south/east/west is a tool error.

:class:`TextGameWorkflow` (``text_game_workflow``) plays it with the agent loop of
:class:`~trinity.workflows.agent.AgentWorkflow` (same turns, experiences and ``workflow_args``);
the episode ends as soon as the chest opens.

Reward: 1 when the chest is open. Otherwise ``workflow_args.progress_reward`` (default 0, i.e. a
binary reward) times the progress: 0.5 for holding the key, 1.0 for holding it in the chest's
room. Info/metrics: ``success``, ``progress``, ``moves``.
"""

from __future__ import annotations

import random
from collections import deque
from typing import Any, Optional

from trinity.common.workflows import WORKFLOWS, Task
from trinity.workflows.agent import AgentEpisode, AgentWorkflow, opening_messages
from trinity.workflows.common import require_keys
from trinity.workflows.rewards.base import RewardResult
from trinity.workflows.tools import Tool, ToolError, ToolSet

__all__ = ["TextGame", "TextGameWorkflow", "TEXT_GAME_SYSTEM_PROMPT"]

ROOM_NAMES = (
    "hall",
    "kitchen",
    "library",
    "cellar",
    "garden",
    "study",
    "attic",
    "pantry",
    "gallery",
    "armory",
    "chapel",
    "vault",
    "workshop",
    "conservatory",
    "ballroom",
    "nursery",
)
DISTRACTORS = ("lamp", "book", "apple", "rope", "coin", "candle", "map", "shovel")
DIRECTIONS: dict[str, tuple[int, int]] = {
    "north": (-1, 0),
    "south": (1, 0),
    "east": (0, 1),
    "west": (0, -1),
}
_ABBREVIATIONS = {"n": "north", "s": "south", "e": "east", "w": "west"}
MIN_SIZE, MAX_SIZE = 2, 4

TEXT_GAME_SYSTEM_PROMPT = (
    "You are playing a text adventure in a house of rooms connected to the north, south, east "
    "and west. Your goal: find the key, take it, go to the room with the locked chest and use "
    "the key there to open the chest. Act only through the tools look, move, take, use and "
    "inventory; you may call several tools in one reply. The game ends when the chest is open."
)


class TextGame:
    """One playable house, fully determined by ``(seed, size, num_distractors)``.

    Args:
        seed: layout seed.
        size: the house is ``size`` x ``size`` rooms, 2 to 4.
        num_distractors: useless items scattered around (the model must learn to ignore them).
    """

    def __init__(self, seed: int, size: int = 3, num_distractors: int = 2) -> None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"text game seed must be an int, got {seed!r}")
        if isinstance(size, bool) or not isinstance(size, int) or not MIN_SIZE <= size <= MAX_SIZE:
            raise ValueError(
                f"text game size must be an int in [{MIN_SIZE}, {MAX_SIZE}], got {size!r}"
            )
        if not 0 <= num_distractors <= len(DISTRACTORS):
            raise ValueError(
                f"num_distractors must be in [0, {len(DISTRACTORS)}], got {num_distractors!r}"
            )
        rng = random.Random(f"text-game/{seed}/{size}/{num_distractors}")
        self.seed, self.size = seed, size
        cells = [(r, c) for r in range(size) for c in range(size)]
        names = rng.sample(ROOM_NAMES, len(cells))
        self.room_at = dict(zip(cells, names, strict=True))
        self.exits: dict[str, dict[str, str]] = {name: {} for name in names}
        self._carve_maze(rng, cells)
        self.start = rng.choice(names)
        self.key_room = rng.choice([n for n in names if n != self.start])
        self.chest_room = rng.choice([n for n in names if n != self.key_room])
        self.items: dict[str, list[str]] = {name: [] for name in names}
        self.items[self.key_room].append("key")
        for item in rng.sample(DISTRACTORS, num_distractors):
            self.items[rng.choice(names)].append(item)
        # state
        self.location = self.start
        self.inventory_items: list[str] = []
        self.chest_open = False
        self.moves = 0

    def _carve_maze(self, rng: random.Random, cells: list[tuple[int, int]]) -> None:
        """Randomized depth-first search: a spanning tree of the grid (every room reachable)."""
        visited = {cells[0]}
        stack = [cells[0]]
        while stack:
            r, c = stack[-1]
            options = [
                (d, (r + dr, c + dc))
                for d, (dr, dc) in DIRECTIONS.items()
                if (r + dr, c + dc) in self.room_at and (r + dr, c + dc) not in visited
            ]
            if not options:
                stack.pop()
                continue
            direction, nxt = rng.choice(options)
            here, there = self.room_at[(r, c)], self.room_at[nxt]
            self.exits[here][direction] = there
            dr, dc = DIRECTIONS[direction]
            back = next(d for d, v in DIRECTIONS.items() if v == (-dr, -dc))
            self.exits[there][back] = here
            visited.add(nxt)
            stack.append(nxt)

    # ------------------------------------------------------------------ state
    @property
    def won(self) -> bool:
        return self.chest_open

    def progress(self) -> float:
        """0 → 0.5 (holding the key) → 1.0 (holding it in the chest's room, or chest open)."""
        if self.chest_open:
            return 1.0
        if "key" in self.inventory_items:
            return 1.0 if self.location == self.chest_room else 0.5
        return 0.0

    # ------------------------------------------------------------------ tools
    def look(self) -> str:
        """Describe the current room: the items in it, the chest, and the exits."""
        parts = [f"You are in the {self.location}."]
        items = self.items[self.location]
        parts.append(f"You see: {', '.join(items)}." if items else "You see no items.")
        if self.location == self.chest_room:
            parts.append(
                "There is an open chest here."
                if self.chest_open
                else "There is a locked chest here."
            )
        parts.append(f"Exits: {', '.join(sorted(self.exits[self.location]))}.")
        return " ".join(parts)

    def move(self, direction: str) -> str:
        """Walk to the neighbouring room.

        Args:
            direction: one of "north", "south", "east", "west".
        """
        key = str(direction).strip().lower()
        key = _ABBREVIATIONS.get(key, key)
        if key not in DIRECTIONS:
            raise ToolError(f"unknown direction {direction!r}; use north, south, east or west")
        target = self.exits[self.location].get(key)
        if target is None:
            exits = ", ".join(sorted(self.exits[self.location]))
            return f"You cannot go {key} from the {self.location}. Exits: {exits}."
        self.location = target
        self.moves += 1
        return self.look()

    def take(self, item: str) -> str:
        """Pick up an item in the current room.

        Args:
            item: the item's name, e.g. "key".
        """
        name = _item_name(item)
        if name == "chest" and self.location == self.chest_room:
            return "The chest is far too heavy to carry."
        if name not in self.items[self.location]:
            return f"There is no {name} here."
        self.items[self.location].remove(name)
        self.inventory_items.append(name)
        return f"You take the {name}."

    def use(self, item: str) -> str:
        """Use an item from your inventory here (the key opens the chest in the chest's room).

        Args:
            item: the item's name, e.g. "key".
        """
        name = _item_name(item)
        if name not in self.inventory_items:
            return f"You do not have a {name}."
        if name == "key" and self.location == self.chest_room:
            if self.chest_open:
                return "The chest is already open."
            self.chest_open = True
            return "You unlock the chest with the key and open it. You win!"
        if name == "key":
            return "There is nothing to unlock here."
        return f"Nothing happens when you use the {name}."

    def inventory(self) -> str:
        """List the items you carry."""
        if not self.inventory_items:
            return "You carry nothing."
        return f"You carry: {', '.join(self.inventory_items)}."

    def tools(self) -> list[Tool]:
        """The five tools, bound to this game."""
        return [
            Tool.from_function(fn, run_in_thread=False)
            for fn in (self.look, self.move, self.take, self.use, self.inventory)
        ]

    # ------------------------------------------------------------------ solution
    def path(self, source: str, target: str) -> list[str]:
        """Directions of the shortest walk from ``source`` to ``target`` (breadth-first)."""
        previous: dict[str, Optional[tuple[str, str]]] = {source: None}
        queue = deque([source])
        while queue:
            room = queue.popleft()
            if room == target:
                break
            for direction, nxt in sorted(self.exits[room].items()):
                if nxt not in previous:
                    previous[nxt] = (room, direction)
                    queue.append(nxt)
        steps: list[str] = []
        room = target
        while previous[room] is not None:
            room, direction = previous[room]  # type: ignore[misc]
            steps.append(direction)
        return steps[::-1]

    def solution(self) -> list[tuple[str, dict[str, Any]]]:
        """A shortest winning sequence of tool calls from the start, ``[(name, arguments)]``."""
        calls: list[tuple[str, dict[str, Any]]] = [
            ("move", {"direction": d}) for d in self.path(self.start, self.key_room)
        ]
        calls.append(("take", {"item": "key"}))
        calls += [("move", {"direction": d}) for d in self.path(self.key_room, self.chest_room)]
        calls.append(("use", {"item": "key"}))
        return calls


def _item_name(item: Any) -> str:
    name = str(item).strip().lower()
    for article in ("the ", "a ", "an "):
        if name.startswith(article):
            name = name[len(article) :]
    return name


@WORKFLOWS.register_module("text_game_workflow")
class TextGameWorkflow(AgentWorkflow):
    """Play :class:`TextGame` with tools; reward 1 for opening the chest (see the module docs).

    Task row: ``seed`` (int, required), optionally ``size`` (2-4, default
    ``workflow_args.size`` or 3) and ``num_distractors`` (default 2). A row prompt
    (``format.prompt_key``), when present, replaces the default instructions in the user message.

    ``workflow_args``: those of :class:`~trinity.workflows.agent.AgentWorkflow` (``max_turns``
    default 20, ``trajectory_mode``, ``tool_timeout``, ...) plus ``progress_reward`` (default 0)
    and ``size``. The task's reward function is not used: the game decides.
    """

    default_system_prompt = TEXT_GAME_SYSTEM_PROMPT
    default_max_turns = 20
    default_reward_fn = None

    def prepare(self, task: Task) -> None:
        who = self.workflow_name
        require_keys(self.raw_task, {"seed": "the text game row format"}, who)
        self.seed = self.raw_task["seed"]
        self.size = self.raw_task.get("size", self.workflow_args.get("size", 3))
        self.num_distractors = self.raw_task.get("num_distractors", 2)
        progress_reward = self.workflow_args.get("progress_reward", 0.0)
        if (
            isinstance(progress_reward, bool)
            or not isinstance(progress_reward, (int, float))
            or not (0.0 <= progress_reward < 1.0)
        ):
            raise ValueError(
                f"{who}: workflow_args.progress_reward must be in [0, 1), got {progress_reward!r}"
            )
        self.progress_reward = float(progress_reward)
        try:
            game = TextGame(self.seed, self.size, self.num_distractors)
        except ValueError as exc:
            raise ValueError(f"{who}: bad task row: {exc}") from exc
        self.truth = None
        self.reward_fn = None
        self.tools = game.tools()
        self.tool_schemas = [t.schema for t in self.tools]
        row = self.raw_task
        fmt = task.format_args
        has_prompt = (
            fmt.prompt_key and isinstance(row.get(fmt.prompt_key), str) and row[fmt.prompt_key]
        )
        if has_prompt:
            self.initial_messages = opening_messages(task, self.system_prompt, who)
            self.initial_messages[-1]["content"] += "\n\n" + game.look()
        else:
            self.initial_messages = [{"role": "user", "content": self.opening(game)}]
            if self.system_prompt:
                self.initial_messages.insert(0, {"role": "system", "content": self.system_prompt})
        self.task_desc = self.initial_messages[-1]["content"]

    @staticmethod
    def opening(game: TextGame) -> str:
        """The first user message: the goal and what the player sees."""
        return "Find the key and open the chest.\n\n" + game.look()

    def new_episode(self, index: int) -> AgentEpisode:
        game = TextGame(self.seed, self.size, self.num_distractors)
        toolset = ToolSet(
            game.tools(), timeout=self.tool_timeout, max_output_chars=self.max_tool_output_chars
        )
        return AgentEpisode(
            index=index,
            messages=[dict(m) for m in self.initial_messages],
            toolset=toolset,
            state=game,
        )

    def episode_done(self, episode: AgentEpisode) -> bool:
        return bool(episode.state.won)

    async def score_episode(self, episode: AgentEpisode) -> RewardResult:
        game: TextGame = episode.state
        value = 1.0 if game.won else self.progress_reward * game.progress()
        return RewardResult(value, {"game_reward": value})

    def episode_info(self, episode: AgentEpisode) -> dict[str, Any]:
        game: TextGame = episode.state
        return {
            **super().episode_info(episode),
            "success": 1.0 if game.won else 0.0,
            "progress": game.progress(),
            "moves": game.moves,
        }
