"""The multi-turn arithmetic task: one Experience per turn, the episode's reward on each, the
conversation (the model's own earlier answers) carried into later turns."""

from __future__ import annotations

from typing import Any

import pytest

from trinity.common.models.testing import FakeModelWrapper
from trinity.common.workflows import Task, run_task
from trinity.workflows.common import MissingTaskFieldError


def _task(row: dict[str, Any], repeat_times: int = 2) -> Task:
    return Task(workflow="arithmetic_multi_turn_workflow", raw_task=row, repeat_times=repeat_times)


def test_turns_carry_the_episode_reward_and_context():
    seen: list[list[dict]] = []

    def reply(messages: list[dict], sample_index: int = 0) -> str:
        seen.append(messages)
        # run 0 (sample 0 of the first call, then the first turn-2 call) always right;
        # the other run right on the first question only
        question = messages[-1]["content"]
        a, b = question.rstrip("=").split("+")
        wrong = len(messages) > 1 and messages[1]["content"] == "9"
        return "9" if (sample_index == 1 or wrong) else str(int(a) + int(b))

    exps = run_task(_task({"questions": ["2+4=", "1+3="]}), FakeModelWrapper(responses=reply))
    assert [(e.eid.run, e.eid.step) for e in exps] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [e.reward for e in exps] == [1.0, 1.0, 0.0, 0.0]
    # the second turn saw the first question and the model's own first answer
    second = [m for m in seen if len(m) == 3]
    assert sorted(m[1]["content"] for m in second) == ["6", "9"]
    assert all(m[2] == {"role": "user", "content": "1+3="} for m in second)


def test_a_row_without_questions_is_refused():
    with pytest.raises(MissingTaskFieldError, match="questions"):
        run_task(_task({"question": "2+4="}), FakeModelWrapper(responses="6"))


def test_turns_carry_gigpos_state_hash_and_step_reward():
    """GiGPO's inputs: turns that acted from the same conversation share ``env_state_hash``
    (every run's first turn; second turns after the same first answer), and each turn's
    ``step_reward`` is its share of the episode reward."""

    def reply(messages: list[dict], sample_index: int = 0) -> str:
        # first turn: runs 0 and 1 answer right, run 2 wrong; second turn: right after a right
        # first answer, wrong after the wrong one
        if len(messages) == 1:
            return "9" if sample_index == 2 else "6"
        return "4" if messages[1]["content"] == "6" else "9"

    exps = run_task(
        _task({"questions": ["2+4=", "1+3="]}, repeat_times=3), FakeModelWrapper(responses=reply)
    )
    by = {(e.eid.run, e.eid.step): e for e in exps}
    hashes = {key: e.info["env_state_hash"] for key, e in by.items()}
    assert hashes[0, 0] == hashes[1, 0] == hashes[2, 0]  # the same first question
    assert hashes[0, 1] == hashes[1, 1]  # the same first answer ("6"), the same second state
    assert hashes[2, 1] != hashes[0, 1] and hashes[0, 1] != hashes[0, 0]
    assert all(isinstance(h, str) and len(h) == 64 for h in hashes.values())
    assert [by[r, t].info["step_reward"] for r in range(3) for t in range(2)] == [
        0.5,
        0.5,
        0.5,
        0.5,
        0.0,
        0.0,
    ]
    # the step rewards sum to the episode reward every turn carries
    for r in range(3):
        assert by[r, 0].info["step_reward"] + by[r, 1].info["step_reward"] == by[r, 0].reward
