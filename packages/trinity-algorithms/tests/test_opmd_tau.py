"""OPMD's ``tau`` (the ``opmd`` policy loss of the opmd and asymre algorithm types) may be 0:
the loss is divided by ``1 + tau``, and Trinity-RFT's AsymRE examples write ``tau: 0``."""

from __future__ import annotations

import pytest
import torch

from trinity.algorithm import resolve_algorithm
from trinity.common.config import ConfigError


@pytest.mark.parametrize("algorithm_type", ["asymre", "opmd"])
def test_tau_zero_is_accepted_and_leaves_the_loss_undivided(algorithm_type: str) -> None:
    resolved = resolve_algorithm(
        {"algorithm_type": algorithm_type, "policy_loss_fn_args": {"tau": 0}}
    )
    assert resolved.policy_loss_fn == "opmd" and resolved.args("policy_loss_fn")["tau"] == 0
    loss_fn = resolved.build_policy_loss_fn()
    logprob = torch.tensor([[-1.0, -2.0]])
    advantages = torch.tensor([[1.0, 1.0]])
    mask = torch.ones(1, 2)
    loss, _ = loss_fn(logprob=logprob, action_mask=mask, advantages=advantages)
    assert loss.item() == pytest.approx(1.5)  # token mean of -A * logprob, divided by 1 + 0


def test_negative_tau_is_still_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError) as info:
        resolve_algorithm({"algorithm_type": "asymre", "policy_loss_fn_args": {"tau": -0.5}})
    (issue,) = info.value.errors
    assert issue.path == "algorithm.policy_loss_fn_args.tau" and issue.value == -0.5
    assert ">= 0" in issue.message
