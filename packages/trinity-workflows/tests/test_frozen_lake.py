"""frozen_lake_workflow on gymnasium's real FrozenLake-v1 (never mocked).

The model is FakeModelWrapper with a scripted policy that reads the map from the observation
text (so these tests also pin the observation protocol: a policy that cannot parse the map
cannot win), and the tokenizer is its byte-level FakeTokenizer, so action masks are checked
token for token.
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from importlib import metadata
from typing import Any, Optional

import pytest
import torch
from gymnasium.envs.toy_text.frozen_lake import MAPS, generate_random_map

from trinity.common.models.testing import FakeModelWrapper
from trinity.common.workflows import WORKFLOWS, Task, run_task, run_task_async
from trinity.workflows.envs.frozen_lake import FrozenLakeWorkflow, parse_move

_ROW = re.compile(r"^[SFHGP]( [SFHGP])*$")
_MOVES = {"Left": (0, -1), "Down": (1, 0), "Right": (0, 1), "Up": (-1, 0)}


# ---------------------------------------------------------------------- scripted policies
def read_grid(observation: str) -> tuple[list[list[str]], tuple[int, int]]:
    """The grid drawn in an observation and the player's (row, col)."""
    grid = [line.split(" ") for line in observation.splitlines() if _ROW.match(line.strip())]
    assert grid, f"no map in observation:\n{observation}"
    player = [(r, c) for r, row in enumerate(grid) for c, cell in enumerate(row) if cell == "P"]
    assert len(player) == 1, observation
    return grid, player[0]


def shortest_path(grid: list[list[str]], start: tuple[int, int]) -> list[str]:
    """BFS over non-hole cells from ``start`` to a G; the list of moves."""
    rows, cols = len(grid), len(grid[0])
    prev: dict[tuple[int, int], Optional[tuple[tuple[int, int], str]]] = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if grid[cell[0]][cell[1]] == "G":
            moves = []
            while prev[cell] is not None:
                cell, move = prev[cell][0], prev[cell][1]
                moves.append(move)
            return moves[::-1]
        for move, (dr, dc) in _MOVES.items():
            nxt = (cell[0] + dr, cell[1] + dc)
            if 0 <= nxt[0] < rows and 0 <= nxt[1] < cols and nxt not in prev:
                if grid[nxt[0]][nxt[1]] != "H":
                    prev[nxt] = (cell, move)
                    queue.append(nxt)
    raise AssertionError("no path to the goal")


def optimal_reply(messages: list[dict[str, Any]], sample_index: int = 0) -> str:
    grid, player = read_grid(messages[-1]["content"])
    move = shortest_path(grid, player)[0]
    return f"The goal is reachable; next I go {move}.\n```{move}```"


def make_task(row: dict[str, Any], repeat_times: int = 1, **workflow_args: Any) -> Task:
    return Task(
        workflow="frozen_lake_workflow",
        raw_task=row,
        repeat_times=repeat_times,
        workflow_args=workflow_args,
    )


def assistant_texts(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "assistant"]


# ---------------------------------------------------------------------- outcomes
@pytest.mark.parametrize(
    "row, expected_map",
    [
        ({"size": 4, "p": 0.8, "seed": 3}, generate_random_map(size=4, p=0.8, seed=3)),
        ({"size": 6, "p": 0.7, "seed": 11}, generate_random_map(size=6, p=0.7, seed=11)),
        ({"map_name": "8x8"}, MAPS["8x8"]),
        ({"desc": ["SFFH", "HHFF", "FFFH", "FHFG"]}, ["SFFH", "HHFF", "FFFH", "FHFG"]),
    ],
    ids=["random4", "random6", "8x8", "desc"],
)
def test_optimal_policy_reaches_the_goal(row, expected_map):
    """A BFS policy that reads the rendered map wins on gymnasium's map: reward 1, success."""
    model = FakeModelWrapper(responses=optimal_reply)
    [exp] = run_task(make_task(row, max_steps=30), model)
    grid, player = read_grid(exp.messages[1]["content"])
    path = shortest_path(grid, player)
    assert exp.info["map"] == "\n".join(expected_map)
    assert exp.reward == 1.0
    assert exp.info["success"] == 1.0 and exp.metrics["success"] == 1.0
    assert exp.info["terminate_reason"] == "goal"
    assert exp.info["steps"] == exp.info["env_steps"] == len(path)
    assert exp.info["invalid_actions"] == 0
    assert exp.truncate_status is None
    # the episode ends on the winning move: nothing after the last action
    assert exp.messages[-1]["role"] == "assistant"


def test_walking_into_a_hole_scores_zero():
    """gymnasium terminates in the hole with reward 0; the workflow reports a failure."""
    model = FakeModelWrapper(responses="```Right```")
    [exp] = run_task(make_task({"desc": ["SH", "FG"]}), model)
    assert exp.reward == 0.0
    assert exp.info["success"] == 0.0
    assert exp.info["terminate_reason"] == "hole"
    assert exp.info["env_done"] == 1
    assert exp.info["steps"] == 1
    assert assistant_texts(exp.messages) == ["```Right```"]


def test_invalid_actions_get_feedback_count_as_steps_and_do_not_move():
    """Unreadable replies are answered with feedback, cost a step and leave the player in place."""
    replies = iter(["I am not sure where to go.", "```Jump```", "Left and Right"])

    def policy(messages, sample_index):
        return next(replies, None) or optimal_reply(messages)

    model = FakeModelWrapper(responses=policy)
    desc = ["SFF", "FHF", "FFG"]
    [exp] = run_task(make_task({"desc": desc}, max_steps=10), model)
    users = [m["content"] for m in exp.messages if m["role"] == "user"]
    for feedback in users[1:4]:
        assert feedback.startswith("Invalid action")
        assert read_grid(feedback)[1] == (0, 0)  # still on the start cell
    assert exp.info["invalid_actions"] == 3 and exp.metrics["invalid_actions"] == 3.0
    assert exp.info["steps"] == 3 + 4 and exp.info["env_steps"] == 4
    assert exp.reward == 1.0


def test_max_steps_ends_the_episode_without_credit():
    """A policy bumping into the edge stops after max_steps model turns, reward 0."""
    model = FakeModelWrapper(responses="<answer>up</answer>")
    [exp] = run_task(make_task({"size": 4, "seed": 0}, max_steps=3), model)
    assert exp.reward == 0.0
    assert exp.info["terminate_reason"] == "max_steps"
    assert exp.info["steps"] == 3 and exp.info["env_done"] == 0
    assert len(assistant_texts(exp.messages)) == 3
    assert exp.messages[-1]["role"] == "assistant"
    assert "stayed where you are" in exp.messages[-2]["content"]


@pytest.mark.parametrize(
    "reply, move",
    [
        ("```Left```", "Left"),
        ("think...\n```\nup\n```", "Up"),
        ("```text\nDown\n```", "Down"),
        ("<answer>right</answer>", "Right"),
        ("<action> Down </action>", "Down"),
        ("  left. ", "Left"),
        ("```Up``` no wait ```Down```", "Down"),
        ("<answer>up</answer> then ```Right```", "Right"),
        ("```Right``` then <answer>up</answer>", "Up"),
        ("Left and Right", None),
        ("```Jump```", None),
        ("```Up``` no wait ```go down```", None),
        ("", None),
    ],
)
def test_action_protocol(reply, move):
    assert parse_move(reply) == move


# ---------------------------------------------------------------------- runs, ids, masks
class _YieldingModel(FakeModelWrapper):
    """Yields to the event loop on every request, as a served model does."""

    async def _chat(self, messages, **kwargs):
        await asyncio.sleep(0)
        return await super()._chat(messages, **kwargs)


def test_repeat_times_runs_concurrent_episodes_with_run_ids():
    """repeat_times=3 → 3 experiences, eid.run 0,1,2, all episodes started before any 2nd turn."""
    model = _YieldingModel(responses=optimal_reply)
    exps = run_task(make_task({"size": 4, "seed": 5}, repeat_times=3, max_steps=20), model)
    assert [e.eid.run for e in exps] == [0, 1, 2]
    assert [e.reward for e in exps] == [1.0, 1.0, 1.0]
    assert len({e.info["map"] for e in exps}) == 1  # same map for every run
    chats = model.calls_of("chat")
    assert [len(c.messages) for c in chats[:3]] == [2, 2, 2]  # interleaved, not one by one
    assert all(c.kwargs.get("n") == 1 for c in chats)


def test_action_mask_marks_exactly_the_model_tokens():
    """Decoding the masked-in tokens gives the assistant replies, each with the template's <|end|>."""
    replies = iter(["hmm", "```Down```", "```Right```"])
    model = FakeModelWrapper(responses=lambda messages, i: next(replies))
    [exp] = run_task(make_task({"desc": ["SH", "FF", "HG"]}, max_steps=3), model)
    tok = model.tokenizer
    response = exp.tokens[exp.prompt_length :]
    mask = exp.action_mask.bool()
    assert mask.shape == response.shape
    expected = "".join(text + "<|end|>" for text in assistant_texts(exp.messages))
    assert expected == "hmm<|end|>```Down```<|end|>```Right```<|end|>"
    assert tok.decode(response[mask]) == expected
    unmasked = tok.decode(response[~mask])
    assert "Invalid action" in unmasked and "<|user|>" in unmasked
    assert "hmm" not in unmasked
    assert tok.decode(exp.tokens[: exp.prompt_length]).startswith("<|system|>You are walking")
    assert exp.logprobs.shape == response.shape


def test_context_limit_stops_with_truncate_status():
    """The loop stops before the conversation outgrows max_model_len: truncated, no credit."""
    model = FakeModelWrapper(responses="```Up```", max_model_len=1100)
    [exp] = run_task(make_task({"size": 4, "seed": 0}, max_steps=50), model)
    assert exp.info["terminate_reason"] == "context_limit"
    assert exp.truncate_status == "response_truncated"
    assert exp.reward == 0.0
    assert exp.messages[-1]["role"] == "assistant"
    assert 1 < exp.info["steps"] < 50
    assert len(exp.tokens) <= 1100 - 1
    # every token the model produced is still in the experience (nothing was cut off)
    masked = model.tokenizer.decode(exp.tokens[exp.prompt_length :][exp.action_mask.bool()])
    assert masked.count("```Up```") == sum(
        1 for m in exp.messages if m["role"] == "assistant" and m["content"] == "```Up```"
    )


def test_first_observation_too_long_is_a_clear_error():
    model = FakeModelWrapper(responses="```Up```", max_model_len=100)
    with pytest.raises(ValueError, match="max_model_len=100"):
        run_task(make_task({"size": 4, "seed": 0}), model)


# ---------------------------------------------------------------------- API surface
def test_resolves_by_name_entry_point_and_guide_path():
    from trinity.common.workflows import FrozenLakeWorkflow as from_guide_path

    [ep] = [
        e
        for e in metadata.entry_points(group="trinity.workflows")
        if e.name == "frozen_lake_workflow"
    ]
    assert ep.load() is FrozenLakeWorkflow
    assert WORKFLOWS.get("frozen_lake_workflow") is FrozenLakeWorkflow
    assert from_guide_path is FrozenLakeWorkflow
    assert FrozenLakeWorkflow.can_repeat and FrozenLakeWorkflow.can_reset


def test_sync_run_and_async_run_async():
    model = FakeModelWrapper(responses=optimal_reply)
    workflow = make_task({"size": 5, "seed": 2}, max_steps=20).to_workflow(model)
    assert isinstance(workflow, FrozenLakeWorkflow)
    [sync_exp] = workflow.run()
    [async_exp] = asyncio.run(workflow.run_async())
    assert sync_exp.reward == async_exp.reward == 1.0
    assert sync_exp.messages == async_exp.messages


def test_reset_reuses_the_instance_for_another_map():
    model = FakeModelWrapper(responses=optimal_reply)
    first_task = make_task({"size": 4, "seed": 1}, max_steps=20)
    second_task = make_task({"desc": ["SFFF", "FFFF", "FFFG"]}, repeat_times=2, max_steps=20)
    first, workflow = asyncio.run(run_task_async(first_task, model))
    second, again = asyncio.run(run_task_async(second_task, model, workflow=workflow))
    assert again is workflow
    assert first[0].info["map"] == "\n".join(generate_random_map(size=4, seed=1))
    assert [e.info["map"] for e in second] == ["SFFF\nFFFF\nFFFG"] * 2
    assert [e.info["steps"] for e in second] == [5, 5]
    assert [e.eid.run for e in second] == [0, 1]


def test_workflow_args_fallbacks_and_slippery_prompt():
    """Row fields fall back to workflow_args; slippery ice is real gymnasium dynamics."""
    model = FakeModelWrapper(responses="```Right```")
    task = Task(
        workflow="frozen_lake_workflow",
        raw_task={},
        workflow_args={"desc": "SFFG", "is_slippery": "true", "seed": 7, "max_steps": 3},
        repeat_times=4,
    )
    exps = run_task(task, model)
    assert all(e.info["is_slippery"] is True for e in exps)
    assert "slippery" in exps[0].messages[0]["content"]
    # with seed + run index, a slippery rerun of the same task replays the same trajectories
    again = run_task(task, model)
    assert [e.messages for e in exps] == [e.messages for e in again]


@pytest.mark.parametrize(
    "row, args, message",
    [
        ({"desc": ["SFS", "FFG"]}, {}, "exactly one S"),
        ({"desc": ["SFX", "FFG"]}, {}, "only contain S, F, H, G"),
        ({"desc": ["SF", "FFG"]}, {}, "rectangle"),
        ({"map_name": "5x5"}, {}, "allowed: \\['4x4', '8x8'\\]"),
        ({"size": 1}, {}, "size must be >= 2"),
        ({"size": 4, "p": 0}, {}, "p \\(probability of a frozen cell\\)"),
        ({"size": 4, "seed": "x"}, {}, "seed must be an integer"),
        ({"size": 4}, {"max_steps": 0}, "max_steps must be a positive integer"),
        ({"size": 4, "is_slippery": "maybe"}, {}, "is_slippery must be true or false"),
    ],
)
def test_bad_settings_fail_when_the_workflow_is_built(row, args, message):
    with pytest.raises(ValueError, match=message):
        make_task(row, **args).to_workflow(FakeModelWrapper())


def test_experience_tensors_are_consistent():
    model = FakeModelWrapper(responses=optimal_reply)
    [exp] = run_task(make_task({"size": 4, "seed": 9}, max_steps=20), model)
    assert exp.tokens.dtype in (torch.long, torch.int32, torch.int64)
    assert exp.action_mask.sum().item() == sum(
        len(model.tokenizer.encode(t)) + 1 for t in assistant_texts(exp.messages)
    )
