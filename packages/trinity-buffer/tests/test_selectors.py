"""Task selectors: order, seeding, resumability and difficulty feedback."""

from __future__ import annotations

import json

import numpy as np
import pytest

from trinity.buffer.taskset import (
    SELECTORS,
    TASK_SELECTORS,
    DifficultyBasedSelector,
    OfflineEasy2HardSelector,
    RandomSelector,
    SequentialSelector,
    ShuffleSelector,
    TasksetData,
    build_selector,
)
from trinity.common.config import DataSelectorConfig
from trinity.utils.registry import UnknownModuleError


def _data(n: int = 10, **features) -> TasksetData:
    rows = []
    for i in range(n):
        row = {"question": f"q{i}"}
        for key, values in features.items():
            row[key] = values[i]
        rows.append(row)
    return TasksetData.from_rows(rows)


def _cfg(selector_type: str, **kw) -> DataSelectorConfig:
    return DataSelectorConfig(selector_type=selector_type, **kw)


def _draw(selector, batch_size: int, times: int) -> list[list[int]]:
    return [selector.get_indices(batch_size) for _ in range(times)]


def test_registry_holds_the_builtins_under_both_names():
    assert SELECTORS is TASK_SELECTORS
    for name, cls in {
        "sequential": SequentialSelector,
        "shuffle": ShuffleSelector,
        "random": RandomSelector,
        "offline_easy2hard": OfflineEasy2HardSelector,
        "difficulty_based": DifficultyBasedSelector,
        "diff_based": DifficultyBasedSelector,
    }.items():
        assert TASK_SELECTORS.get(name) is cls
    with pytest.raises(UnknownModuleError):
        build_selector(_data(), _cfg("nope"))
    assert isinstance(
        build_selector(_data(), DataSelectorConfig(selector_type=None)), SequentialSelector
    )


def test_sequential_wraps_around():
    sel = build_selector(_data(5), _cfg("sequential"))
    assert _draw(sel, 2, 4) == [[0, 1], [2, 3], [4, 0], [1, 2]]
    assert sel.epoch == 1 and sel.current_index == 8


def test_shuffle_permutes_each_epoch_deterministically():
    n = 8
    sel = build_selector(_data(n), _cfg("shuffle", seed=5))
    draws = sum(_draw(sel, 4, 6), [])
    epochs = [draws[i * n : (i + 1) * n] for i in range(3)]
    for epoch in epochs:
        assert sorted(epoch) == list(range(n))
    assert epochs[0] != epochs[1] and epochs[1] != epochs[2]
    again = sum(_draw(build_selector(_data(n), _cfg("shuffle", seed=5)), 4, 6), [])
    assert again == draws
    other_seed = sum(_draw(build_selector(_data(n), _cfg("shuffle", seed=6)), 4, 6), [])
    assert other_seed != draws
    # batch sizes that straddle epochs give the same stream
    odd = sum(_draw(build_selector(_data(n), _cfg("shuffle", seed=5)), 3, 8), [])
    assert odd == draws


def test_random_is_seeded_distinct_within_a_batch_and_with_replacement_across_batches():
    n = 6
    sel = build_selector(_data(n), _cfg("random", seed=1))
    batches = _draw(sel, 4, 30)
    for batch in batches:
        assert len(set(batch)) == 4 and all(0 <= i < n for i in batch)
    assert batches == _draw(build_selector(_data(n), _cfg("random", seed=1)), 4, 30)
    assert batches != _draw(build_selector(_data(n), _cfg("random", seed=2)), 4, 30)
    # no epochs: the first 6 draws are not a permutation in general
    flat = sum(batches, [])
    assert any(len(set(flat[k : k + n])) < n for k in range(0, len(flat) - n, n))
    # a batch larger than the task set repeats tasks instead of failing
    assert len(sel.get_indices(2 * n)) == 2 * n


def test_offline_easy2hard_serves_high_feature_values_first():
    sel = build_selector(
        _data(5, score=[0.1, 0.9, 0.5, 0.9, 0.3]),
        _cfg("offline_easy2hard", feature_keys=["score"]),
    )
    # rows 1 and 3 tie: the later one first, as Trinity-RFT orders ties
    assert _draw(sel, 5, 2) == [[3, 1, 2, 4, 0]] * 2
    with pytest.raises(ValueError, match="feature_keys"):
        build_selector(_data(5), _cfg("offline_easy2hard"))
    with pytest.raises(ValueError, match="'nope' is not a column"):
        build_selector(_data(5), _cfg("offline_easy2hard", feature_keys=["nope"]))


def test_difficulty_based_prefers_tasks_near_the_target_pass_rate():
    pass_rates = [0.0, 0.2, 0.5, 0.8, 1.0]
    sel = build_selector(
        _data(5, pass_rate=pass_rates),
        _cfg(
            "difficulty_based",
            feature_keys=["pass_rate"],
            kwargs={"target_reward": 0.5, "tau": 0},
        ),
    )
    assert sel.get_indices(1) == [2]
    # feedback: task 2 turned out to be solved every time, task 0 half of the time; the
    # policy is better than the prior feature says (by +0.5 on average), so task 1 (prior
    # 0.2) is now predicted near the target too
    sel.feedback([2, 0], [1.0, 0.5])
    pr = sel.predict_pass_rate()
    assert pr[2] > 0.8 and abs(pr[0] - 0.5) < 0.1
    assert sel.capability == pytest.approx(0.5)
    assert sel.predicted_prior()[1] == pytest.approx(0.7)
    assert sel.get_indices(2) == sorted(range(5), key=lambda i: abs(0.5 - pr[i]))[:2]
    assert 2 not in sel.get_indices(2)


def test_difficulty_based_two_features_learn_a_capability():
    weak = np.linspace(0.0, 0.5, 10)
    strong = np.linspace(0.5, 1.0, 10)
    sel = DifficultyBasedSelector(
        _data(10, weak=weak.tolist(), strong=strong.tolist()),
        _cfg("difficulty_based", feature_keys=["weak", "strong"], kwargs={"tau": 0}),
    )
    # the policy does as well as the strong reference model on tasks 0 and 1
    sel.feedback([0, 1], strong[[0, 1]].tolist())
    assert sel.capability == pytest.approx(1.0, abs=1e-3)
    prior = sel.predicted_prior()
    assert prior == pytest.approx(strong, abs=1e-3)


def test_difficulty_based_sampling_is_seeded_and_state_round_trips():
    def make():
        return build_selector(
            _data(20, pass_rate=np.linspace(0, 1, 20).tolist()),
            _cfg(
                "difficulty_based",
                seed=4,
                feature_keys=["pass_rate"],
                kwargs={"target_reward": 0.7, "tau": 0.1, "do_sample": True},
            ),
        )

    a = make()
    first = a.get_indices(5)
    a.feedback(first, [0.3, 0.6, 0.9, 1.0, 0.0])
    state = json.loads(json.dumps(a.state_dict()))
    expected = _draw(a, 5, 3)

    b = make()
    b.load_state_dict(state)
    assert _draw(b, 5, 3) == expected
    for batch in expected:
        assert len(set(batch)) == 5
    assert make().get_indices(5) == first


def test_difficulty_based_rejects_bad_features():
    with pytest.raises(ValueError, match="at most 2 feature_keys"):
        build_selector(
            _data(3, a=[0, 0, 0], b=[0, 0, 0], c=[0, 0, 0]),
            _cfg("difficulty_based", feature_keys=["a", "b", "c"]),
        )
    with pytest.raises(ValueError, match="must be numeric"):
        build_selector(_data(3, a=["x", "y", "z"]), _cfg("difficulty_based", feature_keys=["a"]))


@pytest.mark.parametrize("name", ["sequential", "shuffle", "random"])
def test_state_dict_restores_the_exact_future(name):
    a = build_selector(_data(7), _cfg(name, seed=9))
    _draw(a, 3, 4)
    state = json.loads(json.dumps(a.state_dict()))
    expected = _draw(a, 3, 5)
    b = build_selector(_data(7), _cfg(name, seed=9))
    b.load_state_dict(state)
    assert _draw(b, 3, 5) == expected


def test_extra_info_and_update_alias():
    sel = build_selector(
        _data(4, pass_rate=[0.1, 0.2, 0.3, 0.4]),
        _cfg("difficulty_based", feature_keys=["pass_rate"]),
    )
    indices, info = sel.get_indices(2, return_extra_info=True)
    assert info["indices"] == indices and len(info["predicted_pass_rate"]) == 2
    sel.update(indices, [1.0, 1.0])  # Trinity-RFT's older method name
    assert sel.observed_mean == 1.0
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        sel.get_indices(0)
