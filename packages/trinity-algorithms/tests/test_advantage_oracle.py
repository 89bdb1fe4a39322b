"""The group advantages against a plain per-group oracle.

Each built-in group advantage has one implementation, vectorized over every group of a step
(``trinity.algorithm.advantage_fn._vectorized``). The per-group loops below are the readable
reference it replaced (Trinity-RFT's algorithms, one group at a time, written with ``torch`` on
one group's rewards) and live only here: the vectorized path (the step, and one group through
``calculate_group_advantage``) must give the same advantages, returns, order and metrics, on
fixed cases and on hypothesis-drawn steps.
"""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Callable
from typing import Any, Optional

import pytest
import torch
from torch import Tensor

from trinity.algorithm.advantage_fn import ADVANTAGE_FN, GroupAdvantage
from trinity.algorithm.advantage_fn.advantage_fn import gather_group_metrics
from trinity.common.experience import EID, Experience, group_by

# the registered classes, under the names configs use
GRPOGroupedAdvantage = ADVANTAGE_FN.get("grpo")
OPMDGroupAdvantage = ADVANTAGE_FN.get("opmd")
RLOOAdvantageFn = ADVANTAGE_FN.get("rloo")
ASYMREGroupAdvantage = ADVANTAGE_FN.get("asymre")
REINFORCEGroupAdvantage = ADVANTAGE_FN.get("reinforce")
StepWiseGRPOAdvantageFn = ADVANTAGE_FN.get("step_wise_grpo")

F64 = torch.float64
Metrics = dict[str, float]

# ------------------------------------------------------------------------------ the oracle


def _rewards(exps: list[Experience]) -> Tensor:
    return torch.tensor([e.reward for e in exps], dtype=F64)


def _write(exps: list[Experience], scores: Tensor) -> None:
    for e, score in zip(exps, scores.float(), strict=True):
        e.advantages = score * e.action_mask
        e.returns = e.advantages.clone()


def _grpo_scores(
    fn: Any, rewards: Tensor, mean: Tensor, std: Tensor, precomputed_std: Optional[Tensor]
) -> Tensor:
    """GRPO scores of one group: one member scores ``r / (1 + eps)`` (or 0), a constant group
    exactly 0 (not ``0 / (0 + eps)``: no NaN with ``epsilon=0``)."""
    n = rewards.numel()
    if n == 1 and fn.zero_singletons:
        return torch.zeros(1, dtype=F64)
    if n == 1:
        mean, std = torch.zeros((), dtype=F64), torch.ones((), dtype=F64)
    if n > 1 and bool(rewards.max() == rewards.min()):
        return torch.zeros_like(rewards)
    scores = rewards - mean
    if fn.std_cal_level == "batch" and precomputed_std is not None:
        return scores / (precomputed_std.to(F64) + fn.epsilon)
    if fn.std_cal_level != "none":
        return scores / (std + fn.epsilon)
    return scores


def _mean_logprob(e: Experience) -> float:
    return float(e.logprobs.float().mean()) if e.logprobs.numel() else 0.0


def _grpo(fn: GRPOGroupedAdvantage, exps: list, std: Optional[Tensor]) -> tuple[list, Metrics]:
    rewards, n = _rewards(exps), len(exps)
    if n > 1 and fn.rank_penalty is not None:
        lp = torch.tensor([_mean_logprob(e) for e in exps], dtype=F64)
        ranks = torch.argsort(torch.argsort(lp, stable=True), stable=True).to(F64) / n
        rewards = rewards * (1 - ranks * fn.rank_penalty)
    mean = rewards.mean()
    group_std = rewards.std() if n > 1 else torch.tensor(0.0, dtype=F64)
    skip = fn.std_threshold is not None and (n == 1 or bool(group_std <= fn.std_threshold))
    metrics = {
        "reward_mean": 0.0 if n == 1 else float(mean),
        "reward_std": 1.0 if n == 1 else float(group_std),
        "filtered_count": float(n) if skip else 0.0,
    }
    if skip:
        return [], metrics
    _write(exps, _grpo_scores(fn, rewards, mean, group_std, std))
    return exps, metrics


def _rloo(fn: RLOOAdvantageFn, exps: list, std: None) -> tuple[list, Metrics]:
    rewards, n = _rewards(exps), len(exps)
    if n == 1:
        scores = torch.zeros(1, dtype=F64) if fn.zero_singletons else rewards
    elif bool(rewards.max() == rewards.min()):
        scores = torch.zeros_like(rewards)
    else:
        scores = (rewards - rewards.mean()) * (n / (n - 1))
    _write(exps, scores)
    group_std = float(rewards.std()) if n > 1 else 0.0
    return exps, {"reward_mean": float(rewards.mean()), "reward_std": group_std}


def _opmd(fn: OPMDGroupAdvantage, exps: list, std: None) -> tuple[list, Metrics]:
    rewards, n = _rewards(exps), len(exps)
    if n == 1:
        baseline = rewards[0] if fn.zero_singletons else torch.tensor(0.0, dtype=F64)
    elif bool(rewards.max() == rewards.min()):
        baseline = rewards[0]
    elif fn.opmd_baseline == "mean":
        baseline = rewards.mean()
    else:
        baseline = fn.tau * (torch.logsumexp(rewards / fn.tau, dim=-1) - math.log(n))
    _write(exps, rewards - baseline)
    return exps, {"group_baseline": float(baseline)}


def _asymre(fn: ASYMREGroupAdvantage, exps: list, std: None) -> tuple[list, Metrics]:
    rewards, n = _rewards(exps), len(exps)
    if n == 1:
        scores = torch.zeros(1, dtype=F64) if fn.zero_singletons else rewards
    elif bool(rewards.max() == rewards.min()):
        scores = torch.full_like(rewards, -fn.baseline_shift)
    else:
        scores = rewards - (rewards.mean() + fn.baseline_shift)
    _write(exps, scores)
    baseline = float((rewards - scores).mean())
    return exps, {"group_baseline": baseline, "reward_mean": float(rewards.mean())}


def _reinforce(fn: REINFORCEGroupAdvantage, exps: list, std: None) -> tuple[list, Metrics]:
    rewards = _rewards(exps)
    _write(exps, rewards)
    return exps, {"reward_mean": float(rewards.mean())}


def _step_wise(
    fn: StepWiseGRPOAdvantageFn, exps: list, std: Optional[Tensor]
) -> tuple[list, Metrics]:
    runs = group_by(exps, id_type="run")
    rewards = _rewards([steps[-1] for steps in runs.values()])  # a run's return: its last step's
    n = rewards.numel()
    mean = rewards.mean()
    group_std = rewards.std() if n > 1 else torch.tensor(0.0, dtype=F64)
    skip = fn.std_threshold is not None and (n == 1 or bool(group_std <= fn.std_threshold))
    metrics = {
        "reward_mean": float(mean),
        "reward_std": float(group_std),
        "skipped_count_per_group": float(len(exps)) if skip else 0.0,
    }
    if skip:
        return [], metrics
    out: list[Experience] = []
    scores = _grpo_scores(fn, rewards, mean, group_std, std)
    for steps, score in zip(runs.values(), scores, strict=True):
        _write(steps, (score / len(steps) if fn.enable_step_norm else score).expand(len(steps)))
        out.extend(steps)
    return out, metrics


_ORACLES: dict[type, Callable[..., tuple[list, Metrics]]] = {
    GRPOGroupedAdvantage: _grpo,
    RLOOAdvantageFn: _rloo,
    OPMDGroupAdvantage: _opmd,
    ASYMREGroupAdvantage: _asymre,
    REINFORCEGroupAdvantage: _reinforce,
    StepWiseGRPOAdvantageFn: _step_wise,
}


def oracle(fn: Any, exps: list[Experience], precomputed_std: Optional[Tensor] = None):
    """Group by group, as ``GroupAdvantage.__call__`` does: (kept experiences, metrics)."""
    out: list[Experience] = []
    per_group = []
    for group in group_by(exps, id_type="task").values():
        done, metrics = _ORACLES[type(fn)](fn, group, precomputed_std)
        out.extend(done)
        per_group.append(metrics)
    return out, gather_group_metrics(per_group)


# ------------------------------------------------------------------------------ comparing


def make_step(rows: list[tuple], shuffle_seed: Optional[int] = None) -> list[Experience]:
    """Experiences from ``(task, run, step, reward, mask bits, logprobs)`` rows (prompt: 2 tokens)."""
    made = [
        Experience(
            eid=EID(batch=0, task=task, run=run, step=step),
            tokens=torch.arange(2 + len(bits)),
            prompt_length=2,
            reward=reward,
            action_mask=torch.tensor(bits, dtype=torch.bool),
            logprobs=torch.tensor(lps, dtype=torch.float32),
        )
        for task, run, step, reward, bits, lps in rows
    ]
    if shuffle_seed is not None:  # interleave tasks and runs, each run's steps kept in order
        random.Random(shuffle_seed).shuffle(made)
        made.sort(key=lambda e: e.eid.step)
    return made


def seeded_rows(runs_per_task: list[list[int]], seed: int) -> list[tuple]:
    """Rows of a step: ``runs_per_task[t][r]`` steps in run ``r`` of task ``t``; the return is
    on each run's last step (``None`` before), drawn from a seeded torch generator."""
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for task, runs in enumerate(runs_per_task):
        for run, n_steps in enumerate(runs):
            ret = float(torch.randn((), generator=gen, dtype=F64))
            for step in range(n_steps):
                length = int(torch.randint(0, 9, (), generator=gen))
                bits = (torch.rand(length, generator=gen) > 0.2).tolist()
                lps = (-torch.rand(length, generator=gen)).tolist()
                rows.append((task, run, step, ret if step == n_steps - 1 else None, bits, lps))
    return rows


def assert_same_experiences(actual: list[Experience], expected: list[Experience]) -> None:
    assert [e.eid.uid for e in actual] == [e.eid.uid for e in expected]
    for x, y in zip(actual, expected, strict=True):
        assert x.advantages.dtype == torch.float32
        torch.testing.assert_close(x.advantages, y.advantages, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(x.returns, y.returns, atol=1e-5, rtol=1e-5)


def assert_same_metrics(actual: Metrics, expected: Metrics) -> None:
    assert set(expected) <= set(actual)
    for key, value in expected.items():
        assert actual[key] == pytest.approx(value, rel=1e-6, abs=1e-9), key
    assert all(isinstance(v, float) for v in actual.values())


def assert_agrees(fn: Any, exps: list[Experience]) -> None:
    """The whole step (``__call__``) and group by group (``GroupAdvantage.__call__``, i.e.
    ``calculate_group_advantage`` per group) against the oracle."""
    expected, m_expected = oracle(fn, copy.deepcopy(exps))
    got, m_got = fn(copy.deepcopy(exps))
    assert_same_experiences(got, expected)
    assert_same_metrics(m_got, m_expected)
    got, m_got = GroupAdvantage.__call__(fn, copy.deepcopy(exps))
    assert_same_experiences(got, expected)
    assert_same_metrics(m_got, m_expected)


def with_singletons(fn: Any, zero_singletons: bool) -> Any:
    fn = copy.copy(fn)
    fn.zero_singletons = zero_singletons
    return fn


GROUP_FNS = [
    GRPOGroupedAdvantage(),
    GRPOGroupedAdvantage(std_cal_level="none"),
    GRPOGroupedAdvantage(norm_adv_by_std_in_grpo=False, epsilon=0.0),
    GRPOGroupedAdvantage(std_threshold=0.3),
    GRPOGroupedAdvantage(rank_penalty=0.5),
    OPMDGroupAdvantage(),
    OPMDGroupAdvantage(opmd_baseline="logavgexp", tau=0.7),
    RLOOAdvantageFn(),
    ASYMREGroupAdvantage(),
    ASYMREGroupAdvantage(baseline_shift=0.2),
    REINFORCEGroupAdvantage(),
]
STEP_WISE_FNS = [
    StepWiseGRPOAdvantageFn(),
    StepWiseGRPOAdvantageFn(enable_step_norm=True),
    StepWiseGRPOAdvantageFn(std_cal_level="none"),
    StepWiseGRPOAdvantageFn(std_threshold=0.5),
    StepWiseGRPOAdvantageFn(epsilon=0.0),
]


def _name(fn: Any) -> str:
    return type(fn).__name__


# ------------------------------------------------------------------------------ fixed cases


@pytest.mark.parametrize("fn", GROUP_FNS, ids=_name)
@pytest.mark.parametrize("sizes", [[4, 4, 4], [1, 2, 3, 5, 8], [16], [1], [2] * 50])
@pytest.mark.parametrize("zero_singletons", [True, False])
def test_group_advantages_match_the_oracle(fn, sizes, zero_singletons):
    rows = seeded_rows([[1] * size for size in sizes], seed=sum(sizes))
    assert_agrees(with_singletons(fn, zero_singletons), make_step(rows, shuffle_seed=len(sizes)))


@pytest.mark.parametrize("fn", STEP_WISE_FNS, ids=lambda f: str(vars(f)))
@pytest.mark.parametrize("zero_singletons", [True, False])
def test_step_wise_matches_the_oracle(fn, zero_singletons):
    rows = seeded_rows([[3, 1, 4], [2, 2], [5], [1, 1, 1, 2]], seed=7)
    assert_agrees(with_singletons(fn, zero_singletons), make_step(rows, shuffle_seed=1))


@pytest.mark.parametrize(
    ("fn", "runs_per_task"),
    [
        (GRPOGroupedAdvantage(std_cal_level="batch"), [[1] * 3, [1] * 4, [1], [1] * 5]),
        (StepWiseGRPOAdvantageFn(std_cal_level="batch"), [[2, 2, 2], [1, 3], [1]]),
    ],
    ids=["grpo", "step_wise_grpo"],
)
def test_batch_std_matches_the_oracle_given_the_step_std(fn, runs_per_task):
    """The mean per group, the std over the whole step: the oracle (and one group through
    ``calculate_group_advantage``) is given that std as ``precomputed_std``."""
    exps = make_step(seeded_rows(runs_per_task, seed=8), shuffle_seed=3)
    step_std = _rewards([e for e in exps if e.reward is not None]).std()  # one return per run
    expected, _ = oracle(fn, copy.deepcopy(exps), step_std)
    got, _ = fn(copy.deepcopy(exps))
    assert_same_experiences(got, expected)
    one_by_one: list[Experience] = []
    for gid, group in fn.group_experiences(copy.deepcopy(exps)).items():
        one_by_one += fn.calculate_group_advantage(gid, group, precomputed_std=step_std)[0]
    assert_same_experiences(one_by_one, expected)


# ------------------------------------------------------------------------------ properties
# hypothesis is a dev dependency of the workspace, not of this package: without it only these
# two tests skip (the fixed cases above still run).


def _steps_strategy(multi_step: bool) -> Any:
    """Rows of a random step: 1-6 tasks of 1-6 single-step runs, or 1-4 tasks of 1-4 runs of
    1-4 steps (the return on each run's last step), rewards from a grid with many ties."""
    st = pytest.importorskip("hypothesis.strategies")
    reward = st.one_of(
        st.sampled_from([0.0, 1.0, 0.5, -1.0]),  # ties and constant groups
        # a grid of 1/40: spreads that neither underflow (a std of 0 with epsilon=0) nor cancel
        # to a few ulps, where two correct float64 evaluation orders legitimately disagree
        st.integers(-4000, 4000).map(lambda k: k / 40),
    )
    tokens = st.integers(0, 6).flatmap(
        lambda n: st.tuples(
            st.lists(st.booleans(), min_size=n, max_size=n),
            st.lists(st.floats(-5.0, 0.0, width=32), min_size=n, max_size=n),
        )
    )
    steps_per_run = st.integers(1, 4) if multi_step else st.just(1)
    runs_per_task = st.lists(
        st.lists(steps_per_run, min_size=1, max_size=4 if multi_step else 6),
        min_size=1,
        max_size=4 if multi_step else 6,
    )

    @st.composite
    def rows(draw: Any) -> list[tuple]:
        out = []
        for task, runs in enumerate(draw(runs_per_task)):
            for run, n_steps in enumerate(runs):
                ret = draw(reward)
                out += [
                    (task, run, s, ret if s == n_steps - 1 else None, *draw(tokens))
                    for s in range(n_steps)
                ]
        return out

    return rows()


def _check_property(fn: Any, multi_step: bool) -> None:
    """``assert_agrees`` on 30 drawn steps (shuffled, with and without ``zero_singletons``)."""
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies

    @hypothesis.settings(
        max_examples=30,
        deadline=None,
        database=None,  # nothing written to the working tree
        suppress_health_check=[hypothesis.HealthCheck.too_slow],
    )
    @hypothesis.given(
        rows=_steps_strategy(multi_step), seed=st.integers(0, 2**16), zero_singletons=st.booleans()
    )
    def check(rows: list[tuple], seed: int, zero_singletons: bool) -> None:
        assert_agrees(with_singletons(fn, zero_singletons), make_step(rows, shuffle_seed=seed))

    check()


@pytest.mark.parametrize("fn", GROUP_FNS, ids=_name)
def test_property_group_advantages_match_the_oracle(fn):
    _check_property(fn, multi_step=False)


@pytest.mark.parametrize("fn", STEP_WISE_FNS, ids=lambda f: str(vars(f)))
def test_property_step_wise_matches_the_oracle(fn):
    _check_property(fn, multi_step=True)
