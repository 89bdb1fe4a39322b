"""The tool-based text adventure: seeded layouts, game rules, episodes through the agent loop."""

from __future__ import annotations

import pytest

from trinity.common.models.testing import FakeModelWrapper, format_tool_call
from trinity.common.workflows import Task, run_task
from trinity.workflows.common import MissingTaskFieldError
from trinity.workflows.envs.text_game import TextGame, TextGameWorkflow
from trinity.workflows.tools import ToolError

END = "<|end|>"


def play(game: TextGame, calls) -> list[str]:
    tools = {t.name: t for t in game.tools()}
    return [tools[name](**args) for name, args in calls]


def test_layout_is_determined_by_the_seed():
    a, b = TextGame(seed=7, size=3), TextGame(seed=7, size=3)
    assert (a.exits, a.items, a.start, a.key_room, a.chest_room) == (
        b.exits,
        b.items,
        b.start,
        b.key_room,
        b.chest_room,
    )
    layouts = {
        (tuple(sorted((r, tuple(sorted(e.items()))) for r, e in g.exits.items())), g.key_room)
        for g in (TextGame(seed=s, size=3) for s in range(10))
    }
    assert len(layouts) > 5  # different seeds, different houses


@pytest.mark.parametrize("size", [2, 3, 4])
def test_every_layout_is_a_connected_maze_and_its_solution_wins(size):
    for seed in range(25):
        game = TextGame(seed=seed, size=size)
        rooms = size * size
        edges = sum(len(e) for e in game.exits.values()) // 2
        assert edges == rooms - 1  # a spanning tree: all rooms connected, one way between two
        assert game.key_room != game.start and game.chest_room != game.key_room
        assert sum(items.count("key") for items in game.items.values()) == 1
        outputs = play(game, game.solution())
        assert game.won and outputs[-1].endswith("You win!")
        assert game.progress() == 1.0


def test_game_rules_and_feedback():
    game = TextGame(seed=3, size=3)
    walls = sorted(set(("north", "south", "east", "west")) - set(game.exits[game.start]))
    assert walls, "a maze room always has a wall"
    assert game.move(walls[0]).startswith(f"You cannot go {walls[0]} from the {game.start}.")
    assert game.location == game.start and game.moves == 0
    with pytest.raises(ToolError, match="unknown direction 'up'"):
        game.move("up")
    assert game.take("key") == "There is no key here."
    assert game.use("key") == "You do not have a key."
    assert game.inventory() == "You carry nothing."
    # walk to the key with abbreviations and articles
    for direction in game.path(game.start, game.key_room):
        game.move(direction[0].upper())
    assert "key" in game.look()
    assert game.take("the Key") == "You take the key."
    assert game.inventory() == "You carry: key." and game.progress() == 0.5
    assert game.use("key") == "There is nothing to unlock here."  # the chest is elsewhere
    with pytest.raises(ValueError, match=r"size must be an int in \[2, 4\], got 9"):
        TextGame(seed=1, size=9)


def scripted_player(seed: int, size: int = 3, one_reply: bool = False):
    """Plays the known winning plan, one tool call per reply (or all calls in one reply)."""
    plan = TextGame(seed, size).solution()

    def policy(messages, sample_index):
        if one_reply:
            return "".join(format_tool_call(name, args) for name, args in plan)
        turn = sum(m["role"] == "assistant" for m in messages)
        name, args = plan[turn]
        return format_tool_call(name, args)

    return policy, plan


def game_task(seed: int = 5, **kwargs) -> Task:
    return Task(workflow="text_game_workflow", raw_task={"seed": seed}, **kwargs)


def test_scripted_player_wins_with_reward_one():
    policy, plan = scripted_player(seed=5)
    model = FakeModelWrapper(responses=policy)
    exps = run_task(game_task(5, repeat_times=2), model)

    assert len(exps) == 2 * len(plan)
    assert sorted({e.eid.run for e in exps}) == [0, 1]
    assert all(e.reward == 1.0 for e in exps)
    first_run = sorted((e for e in exps if e.eid.run == 0), key=lambda e: e.eid.step)
    assert [e.eid.step for e in first_run] == list(range(len(plan)))
    for exp, (name, args) in zip(first_run, plan, strict=True):
        assert (
            model.tokenizer.decode(exp.tokens[exp.prompt_length :])
            == format_tool_call(name, args) + END
        )
    info = first_run[0].info
    assert info["stop_reason"] == "env_done" and info["success"] == 1.0
    assert info["num_tool_calls"] == len(plan) and info["num_tool_errors"] == 0
    assert first_run[0].metrics["game_reward"] == 1.0
    # the model saw the game's answers: the last prompt has the key being taken
    last_prompt = model.tokenizer.decode(first_run[-1].tokens[: first_run[-1].prompt_length])
    assert "<|tool|>You take the key." + END in last_prompt
    assert "Find the key and open the chest." in last_prompt


def test_several_calls_in_one_reply_run_in_order():
    policy, plan = scripted_player(seed=11, one_reply=True)
    model = FakeModelWrapper(responses=policy)
    exps = run_task(game_task(11), model)
    assert len(exps) == 1 and exps[0].reward == 1.0
    assert exps[0].info["num_tool_calls"] == len(plan)


def test_wandering_player_fails_with_reward_zero():
    model = FakeModelWrapper(responses=format_tool_call("look", {}))
    exps = run_task(game_task(5, workflow_args={"max_turns": 4}), model)
    assert len(exps) == 4
    assert all(e.reward == 0.0 for e in exps)
    assert exps[0].info["stop_reason"] == "max_turns" and exps[0].info["success"] == 0.0


def test_progress_reward_shapes_failures_when_enabled():
    game = TextGame(seed=5)
    plan = [("move", {"direction": d}) for d in game.path(game.start, game.key_room)]
    plan.append(("take", {"item": "key"}))

    def policy(messages, sample_index):
        turn = sum(m["role"] == "assistant" for m in messages)
        return format_tool_call(*plan[turn]) if turn < len(plan) else "I have the key. Done."

    model = FakeModelWrapper(responses=policy)
    exps = run_task(game_task(5, workflow_args={"progress_reward": 0.2}), model)
    assert exps[-1].info["stop_reason"] == "final_answer"
    assert exps[-1].info["progress"] == 0.5
    assert all(e.reward == pytest.approx(0.1) for e in exps)


def test_whole_trajectory_mode_ends_on_the_assistant_turn():
    policy, plan = scripted_player(seed=2)
    model = FakeModelWrapper(responses=policy)
    exps = run_task(game_task(2, workflow_args={"trajectory_mode": "whole"}), model)
    assert len(exps) == 1 and exps[0].reward == 1.0
    exp = exps[0]
    assert exp.messages[-1]["role"] == "assistant"
    assert sum(m["role"] == "assistant" for m in exp.messages) == len(plan)
    masked_in = exp.tokens[exp.prompt_length :][exp.action_mask].tolist()
    assert model.tokenizer.decode(masked_in) == "".join(
        format_tool_call(n, a) + END for n, a in plan
    )


def test_bad_rows_are_refused():
    model = FakeModelWrapper()
    with pytest.raises(MissingTaskFieldError, match="'seed'"):
        Task(workflow="text_game_workflow", raw_task={"size": 3}).to_workflow(model)
    with pytest.raises(ValueError, match="text_game_workflow: bad task row: text game size"):
        Task(workflow="text_game_workflow", raw_task={"seed": 1, "size": 1}).to_workflow(model)
    with pytest.raises(ValueError, match=r"progress_reward must be in \[0, 1\), got 2"):
        game_task(workflow_args={"progress_reward": 2}).to_workflow(model)
    assert isinstance(game_task().to_workflow(model), TextGameWorkflow)
