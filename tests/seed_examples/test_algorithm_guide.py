"""The algorithm development guide's OPMD example, run as written.

The guide's blocks are cut out of the guide texts at test time (``seed_guides.py``) and run
verbatim after the imports the guide leaves out. They register under the names the built-ins
use ("opmd" in ``ADVANTAGE_FN``, ``POLICY_LOSS_FN`` and ``ALGORITHM_TYPE``): user code replaces
a built-in of its name, as in Trinity-RFT, and the built-in is back once the test has
unregistered the guide's classes.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from trinity.algorithm.advantage_fn import ADVANTAGE_FN, GroupAdvantage
from trinity.algorithm.algorithm import ALGORITHM_TYPE, AlgorithmType
from trinity.algorithm.policy_loss_fn import POLICY_LOSS_FN, PolicyLossFn
from trinity.algorithm.resolve import resolve_algorithm
from trinity.algorithm.utils import build_component
from trinity.common.config import load_config
from trinity.common.experience import EID, Experience

SNIPPETS = Path(__file__).parent / "snippets"  # the guide's YAML
REGISTRIES = (ADVANTAGE_FN, POLICY_LOSS_FN, ALGORITHM_TYPE)


@pytest.fixture
def guide(load_snippet):
    """``guide.load(name)`` runs the guide's blocks; their registrations are undone after."""
    return SimpleNamespace(load=load_snippet)


def _exp(task: int, run: int, reward: float, mask: list[int]) -> Experience:
    return Experience(
        eid=EID(batch=0, task=task, run=run),
        tokens=torch.arange(2 + len(mask)),
        prompt_length=2,
        reward=reward,
        action_mask=torch.tensor(mask, dtype=torch.bool),
        logprobs=torch.zeros(len(mask)),
    )


def _experiences() -> list[Experience]:
    # three task groups: 3 runs, a singleton, 2 runs; masks with environment tokens (0)
    return [
        _exp(0, 0, 1.0, [1, 1, 0]),
        _exp(1, 0, 2.0, [1, 1]),
        _exp(0, 1, 0.0, [1, 0, 1]),
        _exp(2, 0, 0.3, [1]),
        _exp(0, 2, 0.5, [1, 1, 1]),
        _exp(2, 1, 0.7, [0, 1]),
    ]


def _logavgexp(rewards: list[float], tau: float) -> float:
    return tau * (math.log(sum(math.exp(r / tau) for r in rewards)) - math.log(len(rewards)))


def _check_opmd_advantages(exps: list[Experience], baseline) -> list[float]:
    groups: dict = {}
    for e in exps:
        groups.setdefault(e.eid.task, []).append(e.reward)
    baselines = []
    for task, rewards in groups.items():
        b = 0.0 if len(rewards) == 1 else baseline(rewards)
        baselines.append(b)
        for e in exps:
            if e.eid.task == task:
                expected = (e.reward - b) * e.action_mask.float()
                torch.testing.assert_close(e.advantages, expected)
                torch.testing.assert_close(e.returns, expected)
    return baselines


@pytest.mark.parametrize(
    ("args", "baseline"),
    [
        ({}, lambda rs: sum(rs) / len(rs)),
        ({"opmd_baseline": "logavgexp", "tau": 0.99}, lambda rs: _logavgexp(rs, 0.99)),
    ],
    ids=["mean", "logavgexp"],
)
def test_snippet_advantage_fn_computes_opmd_group_baselines(guide, args, baseline):
    module = guide.load("opmd_advantage_003")
    cls = ADVANTAGE_FN.get("opmd")
    assert cls is module.OPMDGroupAdvantage
    assert issubclass(cls, GroupAdvantage) and cls.compute_in_trainer() is False

    fn = build_component(cls, args)
    exps, metrics = fn(_experiences())

    assert len(exps) == 6
    baselines = _check_opmd_advantages(exps, baseline)
    # the guide's metric, gathered over the groups by GroupAdvantage.__call__ (Trinity-RFT's
    # group_advantages/<key>/mean|max|min)
    mean = sum(baselines) / len(baselines)
    assert metrics["group_advantages/group_baseline/mean"] == pytest.approx(mean, rel=1e-6)
    assert metrics["group_advantages/group_baseline/max"] == pytest.approx(max(baselines), rel=1e-6)


def test_snippet_advantage_matches_builtin(guide):
    from trinity.algorithm.advantage_fn.opmd import OPMDGroupAdvantage as Builtin

    module = guide.load("opmd_advantage_003")
    # the guide's class took the name; the built-in waits behind it
    assert ADVANTAGE_FN.get("opmd") is module.OPMDGroupAdvantage
    assert ADVANTAGE_FN.overridden["opmd"] is Builtin

    for args in ({}, {"opmd_baseline": "logavgexp", "tau": 0.5}):
        ours, _ = build_component(module.OPMDGroupAdvantage, args)(_experiences())
        # the built-in zeroes one-member groups by default; the guide uses baseline 0 there
        theirs, _ = build_component(Builtin, {**args, "zero_singletons": False})(_experiences())
        by_uid = {(e.eid.task, e.eid.run): e.advantages for e in theirs}
        for e in ours:
            torch.testing.assert_close(e.advantages, by_uid[(e.eid.task, e.eid.run)])


def _loss_inputs():
    logprob = torch.tensor([[-0.5, -1.0, -2.0], [-0.1, -0.3, 0.0]])
    advantages = torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0]])
    action_mask = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    return logprob, action_mask, advantages


def test_snippet_policy_loss_000_masked_mean(guide):
    module = guide.load("opmd_policy_loss_000")
    cls = POLICY_LOSS_FN.get("opmd")
    assert cls is module.OPMDPolicyLossFn and issubclass(cls, PolicyLossFn)

    fn = build_component(cls, {"tau": 0.99})
    # logprob is passed to every loss separately; the signature's other tensors are selected
    assert fn.select_keys == ["action_mask", "advantages"]

    logprob, action_mask, advantages = _loss_inputs()
    loss, metrics = fn(logprob=logprob, action_mask=action_mask, advantages=advantages)
    # tokens: (0.5, 1.0) for row 0 (third masked out), (-0.2, -0.6, 0.0) for row 1
    expected = (0.5 + 1.0 - 0.2 - 0.6 + 0.0) / 5 / (1.0 + 0.99)
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    assert metrics == {"opmd_loss": pytest.approx(expected, rel=1e-6)}

    # the trainer's path: exactly the selected batch fields
    batch = {"action_mask": action_mask, "advantages": advantages, "old_logprob": logprob}
    loss2, _ = fn.compute(logprob, batch)
    assert loss2.item() == pytest.approx(expected, rel=1e-6)


def test_snippet_policy_loss_003_masked_loss_with_loss_agg_mode(guide):
    module = guide.load("opmd_policy_loss_003")
    cls = POLICY_LOSS_FN.get("opmd")
    assert cls is module.OPMDPolicyLossFn

    logprob, action_mask, advantages = _loss_inputs()

    # default_args carry loss_agg_mode, which __init__ does not take: build_component sets it
    fn = build_component(cls, {"tau": 0.99})
    assert fn.select_keys == ["action_mask", "advantages"]
    assert fn.tau == 0.99 and fn.loss_agg_mode == "token-mean"
    loss, metrics = fn(logprob=logprob, action_mask=action_mask, advantages=advantages)
    token_mean = (0.5 + 1.0 - 0.2 - 0.6 + 0.0) / 5 / 1.99
    assert loss.item() == pytest.approx(token_mean, rel=1e-6)
    assert metrics["opmd_loss"] == pytest.approx(token_mean, rel=1e-6)

    fn = build_component(cls, {"tau": 1.0, "loss_agg_mode": "seq-mean-token-mean"})
    assert fn.loss_agg_mode == "seq-mean-token-mean"
    loss, _ = fn(logprob=logprob, action_mask=action_mask, advantages=advantages)
    seq_mean = ((0.5 + 1.0) / 2 + (-0.2 - 0.6 + 0.0) / 3) / 2 / 2.0
    assert loss.item() == pytest.approx(seq_mean, rel=1e-6)

    fn = build_component(cls, {"loss_agg_mode": "seq-mean-token-sum"})
    loss, _ = fn(logprob=logprob, action_mask=action_mask, advantages=advantages)
    assert loss.item() == pytest.approx(((0.5 + 1.0) + (-0.2 - 0.6)) / 2 / 2.0, rel=1e-6)


def test_snippet_algorithm_registers(guide):
    module = guide.load("opmd_algorithm")
    cls = ALGORITHM_TYPE.get("opmd")
    assert cls is module.OPMDAlgorithm and issubclass(cls, AlgorithmType)
    assert cls.name() == "opmd"
    assert cls.flags() == {
        "use_critic": False,
        "use_reference": True,
        "compute_advantage_in_trainer": False,
        "can_balance_batch": True,
        "schema": "experience",
    }
    assert cls.use_advantage is False  # the older guide's name reads the same flag


def _load_all(guide):
    adv = guide.load("opmd_advantage_003").OPMDGroupAdvantage
    loss = guide.load("opmd_policy_loss_003").OPMDPolicyLossFn
    algo = guide.load("opmd_algorithm").OPMDAlgorithm
    return adv, loss, algo


def test_step3_yaml_resolves_to_the_snippets_with_overrides(guide):
    adv, loss, algo = _load_all(guide)
    config = load_config(SNIPPETS / "guide_algorithm_step3.yaml")

    resolved = resolve_algorithm(config.algorithm)

    assert resolved.algorithm is algo
    assert resolved.classes["advantage_fn"] is adv
    assert resolved.classes["policy_loss_fn"] is loss
    assert resolved.repeat_times == 8
    assert resolved.advantage_fn_args == {"opmd_baseline": "logavgexp", "tau": 0.99}
    assert resolved.policy_loss_fn_args == {"tau": 0.99, "loss_agg_mode": "token-mean"}
    # the rest is the snippet's default_config
    assert resolved.sample_strategy == "warmup"
    assert (resolved.kl_penalty_fn, resolved.kl_loss_fn) == ("none", "k2")
    assert resolved.entropy_loss_fn == "default"
    assert resolved.use_reference and not resolved.use_critic
    assert resolved.warnings == ()

    adv_fn = resolved.build_advantage_fn()
    loss_fn = resolved.build_policy_loss_fn()
    assert isinstance(adv_fn, adv) and adv_fn.opmd_baseline == "logavgexp" and adv_fn.tau == 0.99
    assert isinstance(loss_fn, loss) and loss_fn.tau == 0.99
    exps, _ = adv_fn(_experiences())
    _check_opmd_advantages(exps, lambda rs: _logavgexp(rs, 0.99))


def test_default_yaml_resolves_to_the_snippet_defaults(guide):
    _, _, algo = _load_all(guide)
    resolved = resolve_algorithm(load_config(SNIPPETS / "guide_algorithm.yaml"))
    assert resolved.algorithm is algo
    assert resolved.repeat_times == 2
    assert resolved.advantage_fn_args == {"opmd_baseline": "mean", "tau": 1.0}
    assert resolved.policy_loss_fn_args == {"tau": 1.0, "loss_agg_mode": "token-mean"}


def test_builtins_are_back_after_the_guide_tests():
    # runs after the fixture-using tests in file order: the guide's classes must not leak
    from trinity.algorithm.advantage_fn.opmd import OPMDGroupAdvantage
    from trinity.algorithm.algorithm import OPMDAlgorithm
    from trinity.algorithm.policy_loss_fn.opmd import OPMDPolicyLossFn

    assert ADVANTAGE_FN.get("opmd") is OPMDGroupAdvantage
    assert POLICY_LOSS_FN.get("opmd") is OPMDPolicyLossFn
    assert ALGORITHM_TYPE.get("opmd") is OPMDAlgorithm
