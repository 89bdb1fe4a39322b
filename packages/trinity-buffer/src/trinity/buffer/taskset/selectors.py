"""Task selectors: which rows of a task set the next batch is made of.

A selector turns "give me ``n`` tasks" into row indices. Every built-in one is a pure function
of ``(seed, current_index, its own learned state)``, where ``current_index`` counts the tasks
drawn so far, so a checkpointed ``state_dict()`` restores the exact same future batches after
a restart — a resumed run sees what an uninterrupted run would have seen.

Built-ins (``buffer.explorer_input.taskset.data_selector.selector_type``):

* ``sequential`` — rows ``0, 1, ..., N-1, 0, 1, ...`` (batches may straddle epochs);
* ``shuffle`` — a fresh permutation per epoch, seeded by ``seed + epoch`` (Trinity-RFT 0.6's
  seeding, so the same seed gives Trinity-RFT's order), read in order; epochs are reshuffled
  deterministically, so epoch ``e`` is the same in every run;
* ``random`` — every batch drawn independently and uniformly (with replacement across
  batches: a task may come back before others were seen; distinct within a batch when the
  batch is not larger than the task set), seeded by ``seed + current_index`` (Trinity-RFT's);
* ``offline_easy2hard`` — a curriculum: rows sorted once by ``feature_keys`` (higher value =
  easier; among equal features the later row first, as Trinity-RFT orders them), served
  easy → hard every epoch;
* ``difficulty_based`` (alias ``diff_based``) — adaptive: keeps a Beta posterior of each
  task's pass rate, seeded from per-task features and updated by :meth:`feedback` with
  observed pass rates, and prefers tasks whose pass rate is close to ``target_reward``.

Custom selectors register with ``@TASK_SELECTORS.register_module("name")`` and implement
:class:`TaskSelector`'s four methods (Trinity-RFT's ``BaseSelector`` contract).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional, Union

import numpy as np

from trinity.common.config import DataSelectorConfig
from trinity.utils.log import get_logger
from trinity.utils.registry import Registry

__all__ = [
    "TASK_SELECTORS",
    "SELECTORS",
    "TaskSelector",
    "BaseSelector",
    "SequentialSelector",
    "ShuffleSelector",
    "RandomSelector",
    "OfflineEasy2HardSelector",
    "DifficultyBasedSelector",
    "build_selector",
]

TASK_SELECTORS: Registry[type[TaskSelector]] = Registry("task_selectors")
#: Trinity-RFT's name of the registry.
SELECTORS = TASK_SELECTORS


class TaskSelector:
    """Base class: picks row indices of a task set.

    ``data_source`` is the loaded task set (:class:`~trinity.buffer.taskset.TasksetData`):
    ``len(data_source)`` rows, ``data_source.dataset[key]`` a column (features for adaptive
    selectors). ``config`` is the task set's :class:`DataSelectorConfig`.
    """

    def __init__(self, data_source: Any, config: Optional[DataSelectorConfig] = None) -> None:
        self.data_source = data_source
        self.config = config or DataSelectorConfig()
        self.dataset_size = len(data_source)
        if self.dataset_size == 0:
            raise ValueError("A task selector needs a non-empty task set.")
        self.seed = int(self.config.seed)
        self.current_index = 0  # tasks drawn so far

    def get_indices(
        self, batch_size: int, return_extra_info: bool = False
    ) -> Union[list[int], tuple[list[int], dict[str, Any]]]:
        """The indices of the next ``batch_size`` tasks (and debug info when asked)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        indices = [int(i) for i in self._select(batch_size)]
        info = self._extra_info(indices) if return_extra_info else {}
        self.current_index += batch_size
        return (indices, info) if return_extra_info else indices

    def _select(self, batch_size: int) -> list[int]:
        raise NotImplementedError

    def _extra_info(self, indices: list[int]) -> dict[str, Any]:
        return {"indices": list(indices)}

    def feedback(self, indices: list[int], values: list[float]) -> None:
        """Per-task feedback (e.g. mean reward = pass rate); ignored by static selectors."""

    def update(self, indices: list[int], values: list[float]) -> None:
        """Older Trinity-RFT name of :meth:`feedback`."""
        self.feedback(indices, values)

    def state_dict(self) -> dict[str, Any]:
        """JSON-able state; enough to reproduce every future batch."""
        return {"current_index": self.current_index}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.current_index = int(state_dict.get("current_index", 0))

    @property
    def epoch(self) -> int:
        return self.current_index // self.dataset_size


#: Trinity-RFT's name of the base class.
BaseSelector = TaskSelector


def _cyclic(order_at: Callable[[int], Any], start: int, batch_size: int) -> list[int]:
    """``batch_size`` items from position ``start`` of an epoch-after-epoch sequence.

    ``order_at(pos)`` is the order of the epoch that position ``pos`` falls in; a batch may
    straddle two epochs (no task is dropped at an epoch boundary).
    """
    out: list[int] = []
    pos = start
    while len(out) < batch_size:
        epoch_order = order_at(pos)
        n = len(epoch_order)
        i = pos % n
        take = min(batch_size - len(out), n - i)
        out.extend(int(x) for x in epoch_order[i : i + take])
        pos += take
    return out


@TASK_SELECTORS.register_module("sequential")
class SequentialSelector(TaskSelector):
    """Rows in file order, wrapping around at the end of each epoch."""

    def _select(self, batch_size: int) -> list[int]:
        n = self.dataset_size
        return [(self.current_index + k) % n for k in range(batch_size)]


@TASK_SELECTORS.register_module("shuffle")
class ShuffleSelector(TaskSelector):
    """A permutation per epoch, seeded by ``seed + epoch``: reproducible and resumable.

    Deriving each epoch's order from the epoch number (rather than from a running RNG) is
    what lets a restarted run rebuild the order of the epoch it stopped in.
    """

    def __init__(self, data_source: Any, config: Optional[DataSelectorConfig] = None) -> None:
        super().__init__(data_source, config)
        self._cache: tuple[int, np.ndarray] = (-1, np.empty(0, dtype=np.int64))

    def order_of_epoch(self, epoch: int) -> np.ndarray:
        if self._cache[0] != epoch:
            rng = np.random.default_rng(self.seed + epoch)  # Trinity-RFT 0.6's seeding
            self._cache = (epoch, rng.permutation(self.dataset_size))
        return self._cache[1]

    def _select(self, batch_size: int) -> list[int]:
        n = self.dataset_size
        return _cyclic(lambda pos: self.order_of_epoch(pos // n), self.current_index, batch_size)


@TASK_SELECTORS.register_module("random")
class RandomSelector(TaskSelector):
    """Independent uniform batches (replacement across batches), seeded per position."""

    def _select(self, batch_size: int) -> list[int]:
        rng = np.random.default_rng(self.seed + self.current_index)  # Trinity-RFT 0.6's
        replace = batch_size > self.dataset_size
        return rng.choice(self.dataset_size, size=batch_size, replace=replace).tolist()


def _features(data_source: Any, keys: list[str], selector: str) -> np.ndarray:
    """``[N, len(keys)]`` float matrix of feature columns (clear error for a bad key)."""
    columns = []
    for key in keys:
        try:
            values = data_source.dataset[key]
        except KeyError:
            values = None
        if values is None or all(v is None for v in values):
            present = getattr(data_source, "columns", None)
            raise ValueError(
                f"{selector} selector: feature key {key!r} is not a column of the task set"
                + (f" (columns: {sorted(present)})" if present else "")
            )
        try:
            arr = np.asarray([np.nan if v is None else float(v) for v in values], dtype=float)
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"{selector} selector: feature {key!r} must be numeric ({exc})"
            ) from exc
        columns.append(arr)
    return np.stack(columns, axis=1)


@TASK_SELECTORS.register_module("offline_easy2hard")
class OfflineEasy2HardSelector(TaskSelector):
    """Curriculum: rows sorted by ``feature_keys`` (descending: high = easy), cycled."""

    def __init__(self, data_source: Any, config: Optional[DataSelectorConfig] = None) -> None:
        super().__init__(data_source, config)
        if not self.config.feature_keys:
            raise ValueError("offline_easy2hard selector needs data_selector.feature_keys")
        self.features = _features(data_source, list(self.config.feature_keys), "offline_easy2hard")
        feats = np.nan_to_num(self.features, nan=-np.inf)
        # lexsort sorts by the last key first; negate for descending; on ties the later row
        # first (Trinity-RFT sorts (features, index) rows ascending and reverses them)
        keys = [-np.arange(self.dataset_size)] + [
            -feats[:, j] for j in reversed(range(feats.shape[1]))
        ]
        self.sorted_index = np.lexsort(keys)

    def _select(self, batch_size: int) -> list[int]:
        return _cyclic(lambda pos: self.sorted_index, self.current_index, batch_size)

    def _extra_info(self, indices: list[int]) -> dict[str, Any]:
        return {"indices": indices, "features": self.features[indices].tolist()}


@TASK_SELECTORS.register_module("difficulty_based")
class DifficultyBasedSelector(TaskSelector):
    """Adaptive selection of tasks near a target pass rate (Trinity-RFT's difficulty selector).

    Each task ``i`` has a Beta(``alpha_i``, ``beta_i``) belief about its pass rate. Feedback
    ``(indices, values)`` with observed pass rates (mean reward in [0, 1] over the task's
    rollouts) updates it::

        alpha <- (1 - lamb) * alpha + lamb + (1 - rho) * m * s + rho * m * p~
        beta  <- (1 - lamb) * beta  + lamb + (1 - rho) * m * (1 - s) + rho * m * (1 - p~)

    where ``s`` is the observed pass rate (0 pseudo-counts for unobserved tasks), ``m`` the
    number of rollouts a value summarises, ``lamb`` forgets old evidence (the policy
    improves, so old pass rates go stale) and ``p~`` a predicted pass rate that lets
    unobserved tasks move too:

    * two ``feature_keys`` ``[a, b]`` (pass rates of two reference models, as in
      Trinity-RFT): ``p~ = clip(a + c * (b - a), 0, 1)``, with the policy's "capability" ``c``
      estimated from the feedback (a running average);
    * one feature key: the feature itself is the prior pass rate, shifted by the mean error
      observed on fed-back tasks;
    * no feature key: the mean observed pass rate.

    Observed tasks use ``p~ = s``. Scores are ``-|target_reward - E[pass rate]|`` (or of a
    Beta sample with ``do_sample``, NumPy seeded by ``seed + current_index``); ``tau == 0``
    takes the top scores (``torch.topk``), ``tau > 0`` samples without replacement from
    ``softmax(score / tau)`` (``torch.multinomial`` seeded by ``seed + current_index``): the
    same draws as Trinity-RFT 0.6, so a seeded run picks the same tasks.

    ``kwargs``: ``m`` (16), ``lamb`` (0.2), ``rho`` (0.2), ``target_reward`` (1.0, as in
    Trinity-RFT; 0.5 focuses on the most informative tasks), ``tau`` (1.0), ``do_sample``
    (False), ``adaptive_rho`` (False: halve ``rho`` when predictions are off by >= 0.25),
    ``prior_strength`` (ours; 0: every belief starts at Beta(1, 1), as in Trinity-RFT; > 0:
    the first feature gives that many pseudo-counts before any feedback, so the first
    batches already prefer tasks near the target).

    The state (``alphas``, ``betas``, capability, ``rho``) is part of :meth:`state_dict`,
    so a resumed run keeps what it learned.
    """

    def __init__(self, data_source: Any, config: Optional[DataSelectorConfig] = None) -> None:
        super().__init__(data_source, config)
        kw = dict(self.config.kwargs or {})
        self.m = float(kw.get("m", 16))
        self.lamb = float(kw.get("lamb", 0.2))
        self.rho = float(kw.get("rho", 0.2))
        self.target_reward = float(kw.get("target_reward", 1.0))
        self.tau = float(kw.get("tau", 1.0))
        self.do_sample = bool(kw.get("do_sample", False))
        self.adaptive_rho = bool(kw.get("adaptive_rho", False))
        prior_strength = float(kw.get("prior_strength", 0.0))
        keys = list(self.config.feature_keys)
        if len(keys) > 2:
            raise ValueError(
                f"difficulty_based selector takes at most 2 feature_keys (pass rates), got {keys}"
            )
        self.features: Optional[np.ndarray] = (
            np.clip(_features(data_source, keys, "difficulty_based"), 0.0, 1.0) if keys else None
        )
        self.capability: Optional[float] = None  # c (two features) or bias (one feature)
        self.observed_mean: Optional[float] = None
        n = self.dataset_size
        self.alphas = np.ones(n, dtype=float)
        self.betas = np.ones(n, dtype=float)
        if self.features is not None:
            prior = np.nan_to_num(self.features[:, 0], nan=0.5)
            self.alphas += prior_strength * prior
            self.betas += prior_strength * (1.0 - prior)

    # ------------------------------------------------------------------ estimation
    def predicted_prior(self) -> np.ndarray:
        """``p~`` for every task (before observed values override it)."""
        n = self.dataset_size
        if self.features is None:
            return np.full(n, 0.5 if self.observed_mean is None else self.observed_mean)
        a = np.nan_to_num(self.features[:, 0], nan=0.5)
        if self.features.shape[1] == 1:
            return np.clip(a + (self.capability or 0.0), 0.0, 1.0)
        b = np.nan_to_num(self.features[:, 1], nan=0.5)
        return np.clip(a + (self.capability or 0.0) * (b - a), 0.0, 1.0)

    def feedback(self, indices: list[int], values: list[float]) -> None:
        if len(indices) != len(values):
            raise ValueError(f"{len(indices)} indices but {len(values)} feedback values")
        if not len(indices):
            return
        idx = np.asarray(indices, dtype=np.int64)
        s = np.clip(np.asarray(values, dtype=float), 0.0, 1.0)
        observed = float(s.mean())
        self.observed_mean = (
            observed if self.observed_mean is None else 0.9 * self.observed_mean + 0.1 * observed
        )
        if self.features is not None:
            a = np.nan_to_num(self.features[idx, 0], nan=0.5)
            if self.features.shape[1] == 1:
                estimate = float(np.mean(s - a))
            else:
                b = np.nan_to_num(self.features[idx, 1], nan=0.5)
                estimate = float((observed - a.mean()) / (b.mean() - a.mean() + 1e-6))
            self.capability = (
                estimate if self.capability is None else 0.9 * self.capability + 0.1 * estimate
            )
        p_tilde = self.predicted_prior()
        if self.adaptive_rho and float(np.mean(np.abs(p_tilde[idx] - s))) >= 0.25:
            self.rho *= 0.5
        p_tilde[idx] = s
        s_bar = np.zeros(self.dataset_size)
        f_bar = np.zeros(self.dataset_size)
        np.add.at(s_bar, idx, s * self.m)
        np.add.at(f_bar, idx, (1.0 - s) * self.m)
        keep = 1.0 - self.lamb
        self.alphas = (
            keep * self.alphas + self.lamb + (1 - self.rho) * s_bar + self.rho * p_tilde * self.m
        )
        self.betas = (
            keep * self.betas
            + self.lamb
            + (1 - self.rho) * f_bar
            + self.rho * (1.0 - p_tilde) * self.m
        )

    def predict_pass_rate(self, rng: Optional[np.random.Generator] = None) -> np.ndarray:
        if self.do_sample:
            rng = rng or np.random.default_rng(self.seed + self.current_index)
            return rng.beta(self.alphas, self.betas)
        return self.alphas / (self.alphas + self.betas)

    def scores(self) -> np.ndarray:
        return -np.abs(self.target_reward - self.predict_pass_rate())

    # ------------------------------------------------------------------ selection
    def _select(self, batch_size: int) -> list[int]:
        n = self.dataset_size
        scores = self.scores()
        if batch_size > n:  # more than there are tasks: repeat whole rounds
            head = self._select_distinct(scores, n)
            return (head * (batch_size // n + 1))[:batch_size]
        return self._select_distinct(scores, batch_size)

    def _select_distinct(self, scores: np.ndarray, k: int) -> list[int]:
        import torch  # Trinity-RFT's draws (torch's generator), so seeded runs pick the same

        t = torch.from_numpy(np.asarray(scores, dtype=np.float64))
        if self.tau <= 0:
            return torch.topk(t, k).indices.tolist()
        logits = t / self.tau
        probs = torch.softmax(logits - logits.max(), dim=0)
        if int(torch.count_nonzero(probs)) < k:  # underflow at tiny tau: fall back to greedy
            return torch.topk(t, k).indices.tolist()
        gen = torch.Generator()
        gen.manual_seed(self.seed + self.current_index)
        return torch.multinomial(probs, k, replacement=False, generator=gen).tolist()

    def _extra_info(self, indices: list[int]) -> dict[str, Any]:
        a, b = self.alphas[indices], self.betas[indices]
        return {
            "indices": indices,
            "alphas": a.tolist(),
            "betas": b.tolist(),
            "predicted_pass_rate": (a / (a + b)).tolist(),
        }

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {
            "current_index": self.current_index,
            "alphas": self.alphas.tolist(),
            "betas": self.betas.tolist(),
            "capability": self.capability,
            "observed_mean": self.observed_mean,
            "rho": self.rho,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        if "alphas" in state_dict and "betas" in state_dict:
            alphas = np.asarray(state_dict["alphas"], dtype=float)
            betas = np.asarray(state_dict["betas"], dtype=float)
            if alphas.shape != (self.dataset_size,) or betas.shape != (self.dataset_size,):
                get_logger(__name__).warning(
                    "difficulty_based selector: saved state covers %d tasks but the task set "
                    "has %d; starting the difficulty estimates afresh.",
                    alphas.shape[0],
                    self.dataset_size,
                )
            else:
                self.alphas, self.betas = alphas, betas
        self.capability = state_dict.get("capability", self.capability)
        self.observed_mean = state_dict.get("observed_mean", self.observed_mean)
        self.rho = float(state_dict.get("rho", self.rho))


TASK_SELECTORS.register_module("diff_based", DifficultyBasedSelector)


def build_selector(data_source: Any, config: Optional[DataSelectorConfig] = None) -> TaskSelector:
    """The selector ``config.selector_type`` names (``sequential`` when unset)."""
    config = config or DataSelectorConfig()
    name = config.selector_type or "sequential"
    cls = TASK_SELECTORS[name]
    return cls(data_source, config)
