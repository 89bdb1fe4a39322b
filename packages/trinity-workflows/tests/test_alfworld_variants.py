"""Trinity-RFT 0.6's other ALFWorld workflows: step-wise, RAFT and RAFT with reflection.

ALFWorld needs game data and TextWorld, which are not installed here, so these tests play the
same test double of ``textworld`` / ``alfworld`` as test_env_adapters.py (its ``alfworld``
fixture: a one-room game won by taking the apple and moving it to the fridge; unknown commands
answer "Nothing happens."). The scripted model answers from the latest observation, so every
run of a task plays the same game the same way.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import test_env_adapters  # noqa: E402 - the ALFWorld test double lives there

from trinity.common.models.testing import FakeModelWrapper  # noqa: E402
from trinity.common.workflows import Task, run_task  # noqa: E402
from trinity.common.workflows.step_wise_workflow import HistoryDisabledError  # noqa: E402
from trinity.workflows.envs.alfworld_raft import (  # noqa: E402
    RAFT_SYSTEM_PROMPT,
    attempt_feedback,
    parse_raft_response,
    raft_format_valid,
)
from trinity.workflows.envs.alfworld_step_wise import UNFINISHED_REWARD  # noqa: E402

#: the double's fixture (a fresh game per test; the list of environments it made)
alfworld_double = test_env_adapters.alfworld

GAME = {"game_file": "/data/json_2.1.1/train/a/game.tw-pddl"}
TAKE, MOVE = "take apple 1 from table 1", "move apple 1 to fridge 1"


def last_user(messages: list[dict]) -> str:
    return next(m["content"] for m in reversed(messages) if m["role"] == "user")


def tagged(action: str, experience: str = "I know the room.", think: str = "Next step.") -> str:
    return f"<experience>{experience}</experience><think>{think}</think><action>{action}</action>"


def winner(messages: list[dict], sample_index: int) -> str:
    """Wins from any observation: take the apple, then move it to the fridge."""
    seen = last_user(messages)
    return tagged(MOVE if "You pick up the apple" in seen else TAKE)


def task(name: str, row: dict | None = None, repeat_times: int = 1, **args) -> Task:
    return Task(
        workflow=name, raw_task=dict(row or GAME), repeat_times=repeat_times, workflow_args=args
    )


def masked_text(model: FakeModelWrapper, exp) -> str:
    response = exp.tokens[exp.prompt_length :]
    return model.tokenizer.decode(response[exp.action_mask.bool()])


# ====================================================================== step-wise
def test_step_wise_won_game_one_experience_per_step_with_the_final_reward(alfworld_double):
    model = FakeModelWrapper(
        lambda m, i: (
            f"<think>go</think><action>{MOVE if 'pick up' in last_user(m) else TAKE}</action>"
        ),
        enable_history=True,
    )
    exps = run_task(task("step_wise_alfworld_workflow"), model)
    assert [e.eid.step for e in exps] == [0, 1]
    assert [e.reward for e in exps] == [1.0, 1.0]  # the final reward, propagated
    assert all(e.metrics["actual_env_steps"] == 2.0 for e in exps)
    assert all(e.metrics["success"] == 1.0 for e in exps)
    assert [e.info["step_reward"] for e in exps] == [0.0, 1.0]
    # GiGPO's anchor: the observation the model saw before acting, hashed
    first_obs = exps[0].prompt_text.split("Observation:\n", 1)[1]
    assert "Welcome to TextWorld" in first_obs
    shown = "Observation:\n-= Welcome to TextWorld, ALFRED! =-\nYour task is to: put an apple in fridge."
    assert exps[0].info["env_state_hash"] == hashlib.sha256(shown.encode()).hexdigest()
    assert exps[0].info["env_state_hash"] != exps[1].info["env_state_hash"]
    # each step's experience is that model call as sampled: its prompt holds the history
    assert TAKE in exps[1].prompt_text and exps[1].response_text.endswith(f"{MOVE}</action>")
    assert "Admissible commands" not in exps[0].prompt_text  # 0.6 does not list them
    [env] = alfworld_double
    assert env.commands == [TAKE, MOVE] and env.closed


def test_step_wise_unfinished_episode_gets_minus_a_tenth(alfworld_double):
    model = FakeModelWrapper("<action>look</action>", enable_history=True)
    exps = run_task(task("step_wise_alfworld_workflow", max_env_steps=3), model)
    assert [e.eid.step for e in exps] == [0, 1, 2]
    assert {e.reward for e in exps} == {UNFINISHED_REWARD}
    assert {e.metrics["actual_env_steps"] for e in exps} == {3.0}
    assert all(e.info["step_reward"] == 0.0 for e in exps)


def test_step_wise_invalid_reply_counts_a_step_without_touching_the_game(alfworld_double):
    replies = iter(["I am not sure.", f"<action>{TAKE}</action>", f"<action>{MOVE}</action>"])
    model = FakeModelWrapper(lambda m, i: next(replies), enable_history=True)
    exps = run_task(task("step_wise_alfworld_workflow"), model)
    assert len(exps) == 3 and [e.reward for e in exps] == [1.0] * 3
    assert alfworld_double[0].commands == [TAKE, MOVE]
    assert "no command found" in exps[1].prompt_text
    assert exps[0].metrics["invalid_actions"] == 1.0


def test_step_wise_repeats_are_separate_runs_and_read_the_prompt_column(alfworld_double):
    model = FakeModelWrapper(winner, enable_history=True)
    row = {"prompt": "/data/b/game.tw-pddl"}  # 0.6 data sets: the game file is task_desc
    exps = run_task(
        task("step_wise_alfworld_workflow", row, repeat_times=2),
        model,
        concurrent_mode="asynchronous",
    )
    assert sorted((e.eid.run, e.eid.step) for e in exps) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert {env.registration["gamefile"] for env in alfworld_double} == {"/data/b/game.tw-pddl"}
    assert len(alfworld_double) == 2 and all(env.closed for env in alfworld_double)


def test_step_wise_needs_the_model_history(alfworld_double):
    with pytest.raises(HistoryDisabledError, match="enable_history"):
        task("step_wise_alfworld_workflow").to_workflow(FakeModelWrapper("x"))


# ====================================================================== RAFT
def test_raft_keeps_a_won_game_in_format(alfworld_double):
    model = FakeModelWrapper(winner)
    exps = run_task(task("RAFT_alfworld_workflow", repeat_times=2), model)
    assert [e.eid.run for e in exps] == [0, 1]
    for exp in exps:
        assert exp.reward == 1.0 and exp.info["kept_for_sft"] is True
        assert exp.metrics["kept_for_sft"] == 1.0 and exp.info["steps"] == 2
        assert exp.messages[0]["content"] == RAFT_SYSTEM_PROMPT
        replies = [m["content"] for m in exp.messages if m["role"] == "assistant"]
        assert masked_text(model, exp) == "".join(r + "<|end|>" for r in replies)


def _assert_placeholder(exp, **info) -> None:
    assert exp.reward == 0.0 and exp.info["kept_for_sft"] is False
    assert exp.response_length == 1 and not bool(exp.action_mask.any())
    for key, value in info.items():
        assert exp.info[key] == value, key


def test_raft_drops_a_won_game_with_a_broken_reply(alfworld_double):
    replies = iter([f"<action>{TAKE}</action>", tagged(TAKE), tagged(MOVE)])
    model = FakeModelWrapper(lambda m, i: next(replies))
    [exp] = run_task(task("RAFT_alfworld_workflow"), model)
    _assert_placeholder(exp, success=1.0, format_valid=0.0)
    assert exp.metrics["success"] == 1.0  # the monitor still sees the win
    assert alfworld_double[0].commands == [
        TAKE,
        MOVE,
    ]  # the reply without the three parts did nothing


def test_raft_three_identical_commands_end_the_attempt(alfworld_double):
    model = FakeModelWrapper(tagged("open drawer 1"))
    [exp] = run_task(task("RAFT_alfworld_workflow"), model)
    _assert_placeholder(exp, terminate_reason="repeated_action", success=0.0)
    assert alfworld_double[0].commands == ["open drawer 1"] * 2  # the third never reached the game
    assert exp.info["steps"] == 3


def test_raft_evaluation_returns_the_trajectory_unfiltered(alfworld_double):
    model = FakeModelWrapper(tagged("look", think="hmm"))
    eval_task = task("RAFT_alfworld_workflow", max_env_steps=2)
    eval_task.is_eval = True
    [exp] = run_task(eval_task, model)
    assert exp.reward == 0.0 and "kept_for_sft" not in exp.info
    assert bool(exp.action_mask.any()) and exp.info["steps"] == 2


def test_raft_response_parsing_and_format_check():
    text = "<experience> seen </experience> x <think>plan</think><action> look </action>"
    assert parse_raft_response(text) == {"experience": "seen", "think": "plan", "action": "look"}
    assert parse_raft_response("<think>a</think><action>b</action>")["action"] == ""
    good, bad = {"role": "assistant", "content": text}, {"role": "assistant", "content": "look"}
    assert raft_format_valid([{"role": "user", "content": "x"}, good])
    assert not raft_format_valid([good, bad])
    assert "all 50 steps" in attempt_feedback(0.0, 50, False, 50)
    assert "completed the task in 4 steps" in attempt_feedback(1.0, 4, True, 50)


# ====================================================================== RAFT with reflection
def reflecting(messages: list[dict], sample_index: int) -> str:
    """Wanders on a first attempt; wins once it has seen its previous attempt."""
    if not any("previous attempt" in str(m["content"]) for m in messages):
        turn = sum(m["role"] == "assistant" for m in messages)
        return tagged(["look", "inventory", "examine table 1"][turn % 3])
    return winner(messages, sample_index)


def test_reflect_keeps_an_improved_second_attempt_without_its_context(alfworld_double, tmp_path):
    model = FakeModelWrapper(reflecting)
    wf_task = task("RAFT_reflect_alfworld_workflow", max_env_steps=3, data_dir=str(tmp_path))
    [exp] = run_task(wf_task, model)
    assert exp.reward == 1.0 and exp.info["kept_for_sft"] is True
    assert exp.info["first_reward"] == 0.0 and exp.info["second_reward"] == 1.0
    assert exp.metrics["improvement"] == 1.0 and exp.info["second_steps"] == 2
    # the kept trajectory is the second attempt alone: no first attempt, no guidance
    roles = [m["role"] for m in exp.messages]
    assert roles == ["system", "user", "assistant", "user", "assistant"]
    text = json.dumps(exp.messages[1:])
    assert "previous attempt" not in text and "<action>inventory" not in text
    # the model did see them while playing
    second_call = model.calls_of("chat")[3].messages
    assert "previous attempt" in second_call[-1]["content"]
    assert "used all 3 steps" in second_call[-1]["content"]
    [saved] = (tmp_path / "sft_data").glob("*.json")
    record = json.loads(saved.read_text())
    assert record["kept_for_sft"] and record["first_attempt"]["steps"] == 3
    assert len(alfworld_double) == 2 and all(env.closed for env in alfworld_double)


def test_reflect_drops_a_second_attempt_that_does_not_improve(alfworld_double, tmp_path):
    model = FakeModelWrapper(lambda m, i: tagged(["look", "inventory"][i % 2]))
    wf_task = task("RAFT_reflect_alfworld_workflow", max_env_steps=2, data_dir=str(tmp_path))
    [exp] = run_task(wf_task, model)
    _assert_placeholder(exp, second_reward=0.0, improvement=0.0)
    assert list((tmp_path / "non_sft_data").glob("*.json"))
    assert not (tmp_path / "sft_data").exists()


def test_reflect_first_attempt_success_needs_no_second(alfworld_double):
    model = FakeModelWrapper(winner)
    [exp] = run_task(task("RAFT_reflect_alfworld_workflow"), model)
    assert exp.reward == 1.0 and exp.info["kept_for_sft"] is True
    assert len(model.calls_of("chat")) == 2 and len(alfworld_double) == 1


def test_masked_placeholder_keeps_one_token_of_the_prompt(alfworld_double):
    model = FakeModelWrapper(tagged("open drawer 1"))
    [exp] = run_task(task("RAFT_alfworld_workflow"), model)
    assert exp.tokens.shape[0] == exp.prompt_length + 1
    assert exp.action_mask.dtype == torch.bool and exp.messages is None
