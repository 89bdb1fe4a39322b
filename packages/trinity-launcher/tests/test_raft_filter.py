"""RAFT trains on the successful rollouts only: the operators its checked config gives the
experience pipeline drop the failed ones before the SFT loss sees them.

Before this held, RAFT ran the SFT loss on every rollout (the policy imitating its own samples,
wrong answers included) and did not learn the quickstart's task (``benchmarks/learning_matrix.py``).
"""

from __future__ import annotations

import torch

from trinity.algorithm import ALGORITHM_TYPE
from trinity.buffer.operators.experience_operator import build_operators
from trinity.common.config import load_config
from trinity.common.experience import Experience


def _raft_config(operators: list | None = None):
    data: dict = {"mode": "both", "algorithm": {"algorithm_type": "raft"}}
    if operators is not None:
        data["data_processor"] = {"experience_pipeline": {"operators": operators}}
    return load_config(data)


def _exps(rewards: list[float]) -> list[Experience]:
    return [Experience(tokens=torch.arange(4), prompt_length=2, reward=r) for r in rewards]


def test_raft_pipeline_keeps_only_successful_rollouts():
    config = _raft_config()
    warnings = ALGORITHM_TYPE.get("raft").check_config(config)
    operators = build_operators(config.data_processor.experience_pipeline.operators)
    exps = _exps([1.0, 0.0, 1.0, 0.5, 0.0])
    for op in operators:
        exps, _ = op.process(exps)
    assert [e.reward for e in exps] == [1.0, 1.0]
    assert len(warnings) == 1 and "reward_filter" in warnings[0]
    # checked again (the launcher and the Studio both check): nothing added twice
    assert ALGORITHM_TYPE.get("raft").check_config(config) == []
    assert len(config.data_processor.experience_pipeline.operators) == 1


def test_raft_keeps_the_users_reward_filter():
    config = _raft_config([{"name": "reward_filter", "args": {"threshold": 0.5}}])
    assert ALGORITHM_TYPE.get("raft").check_config(config) == []
    operators = build_operators(config.data_processor.experience_pipeline.operators)
    exps, _ = operators[0].process(_exps([1.0, 0.0, 0.5]))
    assert [e.reward for e in exps] == [1.0, 0.5]
