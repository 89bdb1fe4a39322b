"""Sample strategies: how the trainer draws one training batch from its buffers.

A strategy receives the trainer's readers by name (``{"experience_buffer": reader,
"sft_dataset": reader, ...}``, each satisfying :class:`trinity.common.protocols.ExperienceReader`)
plus its own arguments, and answers :meth:`SampleStrategy.sample` once per train step with
``(experiences, metrics)``. The trainer collates the experiences
(:func:`~trinity.common.experience.collate_experiences`); strategies that add batch fields do
so through ``Experience.custom_fields`` so collation picks them up.

Built-ins:

* ``default``: one batch from the main buffer;
* ``warmup``: SFT data for the first ``sft_warmup_steps`` steps, then ``default``
  (Trinity-RFT's older guide configures OPMD with it; with 0 warm-up steps it is ``default``);
* ``staleness_control``: ``default`` that never returns an experience generated more than
  ``max_staleness`` model versions before the current one; stale ones are dropped, counted in
  the metrics, and replaced by further reads;
* ``mix``: expert (SFT) rows and RL rows in one batch at ``expert_data_ratio``, expert rows
  flagged for the ``mix`` policy loss.

Readers cannot be built from arguments alone, so strategies are constructed with
:func:`build_sample_strategy` (or directly), not with ``build_component``.

Trinity-RFT 0.6 builds a strategy from the run's ``BufferConfig`` instead
(``SAMPLE_STRATEGY.get(name)(buffer_config=config.buffer, **args)``) and unpacks three values
from ``await strategy.sample(step)``. Both work here: given ``buffer_config``, a strategy builds
its readers from ``trainer_input`` (``experience_buffer`` and the ``auxiliary_buffers``) through
the buffer's reader factory, takes ``train_batch_size`` from it, and ``sample`` returns
``(experiences, metrics, representative_samples)``, as Trinity-RFT's does; a strategy given
readers returns ``(experiences, metrics)``.
"""

from __future__ import annotations

import inspect
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Optional, Union

import torch

from trinity.algorithm.args import (
    Field,
    NonNegFloat,
    NonNegInt,
    PosInt,
    Probability,
    SampleStrategyArgs,
)
from trinity.common.experience import CustomField, Experience
from trinity.common.protocols import ExperienceReader
from trinity.utils.log import get_logger
from trinity.utils.registry import Registry

__all__ = [
    "DEFAULT_EXPERIENCE_BUFFER_NAME",
    "EXPERT_CUSTOM_FIELDS",
    "SAMPLE_STRATEGY",
    "DefaultSampleStrategy",
    "SampleResult",
    "MixSampleStrategy",
    "SampleStrategy",
    "StaleDataError",
    "StalenessControlSampleStrategy",
    "WarmupSampleStrategy",
    "build_sample_strategy",
    "experience_version",
    "model_version_metrics",
    "readers_from_buffer_config",
    "representative_samples",
]

logger = get_logger(__name__)

#: Registry of sample strategies (``algorithm.sample_strategy``).
SAMPLE_STRATEGY: Registry[type[SampleStrategy]] = Registry("sample_strategy")

#: Name of the trainer's main experience buffer (``buffer.trainer_input.experience_buffer``);
#: the same value as ``trinity.common.config.DEFAULT_EXPERIENCE_BUFFER_NAME``.
DEFAULT_EXPERIENCE_BUFFER_NAME = "experience_buffer"

#: Batch fields the ``mix`` strategy adds: ``expert_mask`` (Trinity-RFT's name, read by its mix
#: loss) and ``is_expert_mask`` (this package's name) are both ``bool [B]``; ``step`` is
#: ``int32 [B]``.
EXPERT_CUSTOM_FIELDS: tuple[CustomField, ...] = (
    CustomField(source_field="is_expert", destination_field="expert_mask", data_type=torch.bool),
    CustomField(source_field="is_expert", destination_field="is_expert_mask", data_type=torch.bool),
    CustomField(source_field="step", destination_field="step", data_type=torch.int32),
)


#: What ``sample`` returns: ``(experiences, metrics)``, or Trinity-RFT's
#: ``(experiences, metrics, representative samples)`` for a strategy built from a buffer config.
SampleResult = Union[
    tuple[list[Experience], dict[str, float]],
    tuple[list[Experience], dict[str, float], list[dict[str, Any]]],
]


class StaleDataError(RuntimeError):
    """Raised when no experience fresh enough could be read for a batch."""


def experience_version(exp: Experience) -> Optional[int]:
    """The model version that produced ``exp``: ``exp.model_version``, else
    ``exp.info["model_version"]``, where Trinity-RFT code records it."""
    if exp.model_version is not None:
        return exp.model_version
    value = (exp.info or {}).get("model_version")
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def model_version_metrics(exps: Sequence[Experience], prefix: str = "sample") -> dict[str, float]:
    """``{prefix}/model_version/{mean,min,max}`` over experiences that recorded a version
    (see :func:`experience_version`)."""
    versions = [v for v in map(experience_version, exps) if v is not None]
    if not versions:
        return {}
    return {
        f"{prefix}/model_version/mean": float(sum(versions)) / len(versions),
        f"{prefix}/model_version/min": float(min(versions)),
        f"{prefix}/model_version/max": float(max(versions)),
    }


def _accepts_kwarg(func: Any, name: str) -> bool:
    """Whether ``func`` can be called with keyword ``name`` (explicitly or via ``**kwargs``)."""
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


async def _read(
    reader: ExperienceReader, batch_size: Optional[int], **hints: Any
) -> list[Experience]:
    """``reader.read_async(batch_size)``, passing each hint only if the reader takes it."""
    kwargs = {k: v for k, v in hints.items() if _accepts_kwarg(reader.read_async, k)}
    return list(await reader.read_async(batch_size, **kwargs))


def _is_buffer_config(value: Any) -> bool:
    """A Trinity-RFT ``BufferConfig`` (what its strategies take) rather than readers."""
    return hasattr(value, "trainer_input") and not isinstance(value, Mapping)


def readers_from_buffer_config(buffer_config: Any) -> dict[str, ExperienceReader]:
    """The readers of a ``BufferConfig``'s ``trainer_input``: ``experience_buffer`` and each
    auxiliary buffer by its name, built by the buffer's reader factory
    (:func:`trinity.common.storage.build_reader`) as Trinity-RFT's strategies build theirs."""
    from trinity.common.storage import build_reader

    trainer_input = buffer_config.trainer_input
    configs: dict[str, Any] = dict(getattr(trainer_input, "auxiliary_buffers", None) or {})
    main = getattr(trainer_input, "experience_buffer", None)
    if main is not None:
        configs[DEFAULT_EXPERIENCE_BUFFER_NAME] = main
    if not configs:
        raise ValueError(
            "buffer_config.trainer_input has no experience_buffer and no auxiliary_buffers: "
            "a sample strategy has nothing to read"
        )
    return {name: build_reader(config) for name, config in configs.items()}


def representative_samples(exps: Sequence[Experience]) -> list[dict[str, Any]]:
    """What Trinity-RFT logs of a batch: the lowest- and highest-reward samples (prompt,
    response, reward), or one sample when no reward is set; ``[]`` for an empty batch."""
    rewarded = [e for e in exps if e.reward is not None]
    if not rewarded:
        return [{"prompt": exps[0].prompt_text, "response": exps[0].response_text}] if exps else []
    picks = [min(rewarded, key=lambda e: e.reward), max(rewarded, key=lambda e: e.reward)]
    return [
        {"prompt": e.prompt_text, "response": e.response_text, "reward": e.reward} for e in picks
    ]


class SampleStrategy(ABC):
    """Base class of sample strategies.

    Args:
        readers: the trainer's readers by buffer name. ``experience_buffer`` is the main one;
            with a single reader, that reader is the main one whatever its name. A
            Trinity-RFT ``BufferConfig`` given here is taken as ``buffer_config``.
        train_batch_size: experiences per train step (``buffer.train_batch_size``); ``None``
            lets each reader use its own batch size. ``batch_size`` is accepted as an alias.
        experience_buffer_name: which reader is the main one.
        buffer_config: Trinity-RFT's constructor argument, instead of ``readers``: the readers
            are built from its ``trainer_input`` (:func:`readers_from_buffer_config`),
            ``train_batch_size`` defaults to its own, and :meth:`sample` returns Trinity-RFT's
            three values (see the module docstring).
        **kwargs: strategy arguments (see each strategy's :meth:`default_args`).
    """

    def __init__(
        self,
        readers: Optional[Mapping[str, ExperienceReader]] = None,
        train_batch_size: Optional[int] = None,
        experience_buffer_name: str = DEFAULT_EXPERIENCE_BUFFER_NAME,
        *,
        buffer_config: Any = None,
        **kwargs: Any,
    ) -> None:
        if buffer_config is None and _is_buffer_config(readers):
            buffer_config, readers = readers, None
        #: Trinity-RFT's result shape: ``sample`` returns three values
        self.returns_representative_samples = buffer_config is not None and readers is None
        if readers is None:
            if buffer_config is None:
                raise TypeError(
                    f"{type(self).__name__} needs readers (a mapping of buffer name to reader) "
                    "or buffer_config (Trinity-RFT's BufferConfig)"
                )
            readers = readers_from_buffer_config(buffer_config)
        if train_batch_size is None:
            train_batch_size = kwargs.pop("batch_size", None)
        if train_batch_size is None and buffer_config is not None:
            train_batch_size = getattr(buffer_config, "train_batch_size", None) or None
        if train_batch_size is not None and train_batch_size < 1:
            raise ValueError(f"train_batch_size must be >= 1, got {train_batch_size}")
        self.readers: dict[str, ExperienceReader] = dict(readers)
        self.train_batch_size = train_batch_size
        self.experience_buffer_name = experience_buffer_name
        for key, value in kwargs.items():
            setattr(self, key, value)

    def get_reader(self, name: Optional[str] = None) -> ExperienceReader:
        """The reader called ``name`` (default: the main one); a clear error if missing."""
        key = name or self.experience_buffer_name
        if key in self.readers:
            return self.readers[key]
        if name is None and len(self.readers) == 1:
            return next(iter(self.readers.values()))
        raise KeyError(
            f"{type(self).__name__} needs a reader named {key!r}; it was given "
            f"{sorted(self.readers) or 'none'} (buffer.trainer_input.experience_buffer / "
            "auxiliary_buffers)"
        )

    def _require_reader(self, name: str, who: str) -> None:
        """Refuse at construction a strategy (``who``) that will read an auxiliary buffer
        ``name`` the run does not configure, rather than at its first sample."""
        if name not in self.readers:
            raise ValueError(
                f"{who} needs a reader named {name!r} (buffer.trainer_input.auxiliary_buffers); "
                f"readers given: {sorted(self.readers)}"
            )

    @abstractmethod
    async def sample(self, step: int, current_model_version: Optional[int] = None) -> SampleResult:
        """Draw the batch of train step ``step``.

        Args:
            step: the train step about to run (1-based, as Trinity-RFT's trainer counts).
            current_model_version: version of the policy being trained; strategies that
                care (staleness control) default it to ``step``, as Trinity-RFT does.

        Returns:
            The experiences of the batch and ``{name: float}`` metrics for the monitor (and,
            for a strategy built from a ``buffer_config``, Trinity-RFT's third value: a few
            representative samples to log).
        """

    @classmethod
    def default_args(cls) -> dict[str, Any]:
        """Arguments used where the config gives none."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """Read positions of the readers that have one (see ``StatefulReader``)."""
        return {
            name: reader.state_dict()  # type: ignore[attr-defined]
            for name, reader in self.readers.items()
            if callable(getattr(reader, "state_dict", None))
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore positions saved by :meth:`state_dict`."""
        for name, state in (state_dict or {}).items():
            reader = self.readers.get(name)
            if state and reader is not None and callable(getattr(reader, "load_state_dict", None)):
                reader.load_state_dict(state)  # type: ignore[attr-defined]

    def warmup_state(self, step: int) -> tuple[bool, bool]:
        """(step is a warm-up step, warm-up ends at this step); no warm-up by default."""
        return False, False

    def _result(self, exps: list[Experience], metrics: dict[str, float]) -> Any:
        """``(exps, metrics)``, or Trinity-RFT's ``(exps, metrics, representative samples)``
        for a strategy built from a ``buffer_config``."""
        if self.returns_representative_samples:
            return exps, metrics, representative_samples(exps)
        return exps, metrics


@SAMPLE_STRATEGY.register_module("default")
class DefaultSampleStrategy(SampleStrategy):
    """One batch from the main experience buffer."""

    class Args(SampleStrategyArgs):
        """``sample_strategy_args`` of ``default``."""

    async def sample(self, step: int, current_model_version: Optional[int] = None) -> SampleResult:
        start = time.perf_counter()
        exps = await _read(self.get_reader(), self.train_batch_size)
        metrics = {"time/read_experience": time.perf_counter() - start}
        metrics.update(model_version_metrics(exps))
        return self._result(exps, metrics)


@SAMPLE_STRATEGY.register_module("warmup")
class WarmupSampleStrategy(DefaultSampleStrategy):
    """SFT batches for steps ``1..sft_warmup_steps``, then the main buffer.

    Args:
        sft_warmup_steps: number of warm-up steps (0: behaves as ``default``).
        sft_dataset_name: reader name of the SFT data.
    """

    class Args(SampleStrategyArgs):
        """``sample_strategy_args`` of ``warmup``."""

        sft_warmup_steps: NonNegInt = Field(0, description="Steps trained on SFT data first.")
        sft_dataset_name: str = Field("sft_dataset", description="Auxiliary buffer of SFT data.")

    def __init__(
        self,
        readers: Optional[Mapping[str, ExperienceReader]] = None,
        sft_warmup_steps: int = 0,
        sft_dataset_name: str = "sft_dataset",
        **kwargs: Any,
    ) -> None:
        super().__init__(readers, **kwargs)
        if sft_warmup_steps < 0:
            raise ValueError(f"sft_warmup_steps must be >= 0, got {sft_warmup_steps}")
        self.sft_warmup_steps = sft_warmup_steps
        self.sft_dataset_name = sft_dataset_name
        if sft_warmup_steps > 0:
            self._require_reader(
                sft_dataset_name,
                f"sample strategy 'warmup' with sft_warmup_steps={sft_warmup_steps}",
            )

    async def sample(self, step: int, current_model_version: Optional[int] = None) -> SampleResult:
        in_warmup, _ = self.warmup_state(step)
        if not in_warmup:
            return await super().sample(step, current_model_version)
        start = time.perf_counter()
        exps = await _read(self.get_reader(self.sft_dataset_name), self.train_batch_size)
        metrics = {"time/read_experience": time.perf_counter() - start, "sample/warmup": 1.0}
        return self._result(exps, metrics)

    def warmup_state(self, step: int) -> tuple[bool, bool]:
        return step <= self.sft_warmup_steps, step == self.sft_warmup_steps

    @classmethod
    def default_args(cls) -> dict[str, Any]:
        return {"sft_warmup_steps": 0, "sft_dataset_name": "sft_dataset"}


@SAMPLE_STRATEGY.register_module("staleness_control")
class StalenessControlSampleStrategy(DefaultSampleStrategy):
    """``default``, but never an experience more than ``max_staleness`` versions old.

    The staleness of an experience is ``current_model_version - experience.model_version``;
    it is kept when ``<= max_staleness`` (so ``max_staleness=0`` is strictly on-policy).
    Stale experiences are dropped — they were consumed from the reader — and the batch is
    refilled by further reads until it has ``train_batch_size`` experiences (or as many as the
    first read returned when no batch size is set), the reader is exhausted, or
    ``max_read_attempts`` reads were made; a batch short of its size is returned rather than
    one with stale data, and no fresh experience at all raises :class:`StaleDataError`.

    Readers whose ``read_async`` takes ``min_model_version`` get it as a hint, so a
    version-aware buffer can skip stale data itself; the filter here is applied regardless.

    With ``stale="correct"`` nothing is dropped: experiences beyond ``max_staleness`` are
    kept (counted in ``sample/stale_corrected``) and trained with
    ``algorithm.rollout_correction``'s importance weights between the rollout's log-probs (the
    old weights that generated them) and the trainer's, which is what that section is for.
    :func:`~trinity.algorithm.resolve.resolve_algorithm` fills ``stale`` (``correct`` when
    the run sets ``rollout_correction``, else ``drop``) and refuses ``correct`` without it.

    Args:
        max_staleness: the largest allowed staleness; ``None`` means unlimited (Trinity-RFT's
            default), which makes this strategy ``default`` plus metrics.
        drop_unversioned: drop experiences with no recorded ``model_version`` (offline data)
            instead of keeping them.
        max_read_attempts: bound on reads per batch.
        stale: ``drop`` or ``correct`` (keep, for rollout correction) what is beyond
            ``max_staleness``.

    Metrics: ``sample/stale_dropped`` (experiences dropped this step),
    ``sample/stale_corrected`` (kept beyond ``max_staleness`` for rollout correction),
    ``sample/stale_dropped_total`` (since construction), ``sample/unversioned``,
    ``sample/read_attempts``, ``sample/staleness/{mean,max}`` of the returned batch, and the
    ``sample/model_version/*`` metrics.
    """

    class Args(SampleStrategyArgs):
        """``sample_strategy_args`` of ``staleness_control``."""

        max_staleness: Optional[NonNegFloat] = Field(
            None, description="Drop experiences more than this many versions old."
        )
        drop_unversioned: bool = Field(False, description="Drop experiences without a version.")
        max_read_attempts: PosInt = Field(64, description="Reads before giving up.")
        stale: Optional[Literal["drop", "correct"]] = Field(
            None,
            description="Beyond max_staleness: drop, or correct (keep for "
            "algorithm.rollout_correction's IS weights); null: correct when "
            "rollout_correction is set, else drop.",
        )

    def __init__(
        self,
        readers: Optional[Mapping[str, ExperienceReader]] = None,
        max_staleness: Optional[Union[int, float]] = None,
        drop_unversioned: bool = False,
        max_read_attempts: int = 64,
        stale: Optional[str] = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(readers, **kwargs)
        if max_staleness is not None and (math.isnan(max_staleness) or max_staleness < 0):
            raise ValueError(f"max_staleness must be >= 0 or None, got {max_staleness}")
        if max_read_attempts < 1:
            raise ValueError(f"max_read_attempts must be >= 1, got {max_read_attempts}")
        if stale not in (None, "drop", "correct"):
            raise ValueError(f"stale must be 'drop' or 'correct', got {stale!r}")
        self.max_staleness = max_staleness
        self.drop_unversioned = drop_unversioned
        self.max_read_attempts = max_read_attempts
        #: what is beyond ``max_staleness``: dropped, or kept for rollout correction
        self.correct_stale = stale == "correct"
        self.stale_dropped_total = 0

    def _is_fresh(self, exp: Experience, current: int) -> bool:
        version = experience_version(exp)
        if version is None:
            return not self.drop_unversioned
        return self._within(version, current)

    def _within(self, version: int, current: int) -> bool:
        return self.max_staleness is None or current - version <= self.max_staleness

    def _kept(self, exp: Experience, current: int) -> bool:
        if self.correct_stale and experience_version(exp) is not None:
            return True  # stale or not: the rollout-correction weights take care of it
        return self._is_fresh(exp, current)

    async def sample(self, step: int, current_model_version: Optional[int] = None) -> SampleResult:
        current = step if current_model_version is None else current_model_version
        hints: dict[str, Any] = {}
        bounded = self.max_staleness is not None and not math.isinf(self.max_staleness)
        if bounded and not self.correct_stale:
            hints["min_model_version"] = max(current - int(self.max_staleness), 0)
        reader = self.get_reader()
        start = time.perf_counter()
        target = self.train_batch_size
        kept: list[Experience] = []
        dropped = attempts = 0
        while attempts < self.max_read_attempts and (target is None or len(kept) < target):
            want = None if target is None else target - len(kept)
            try:
                batch = await _read(reader, want, **hints)
            except (StopAsyncIteration, StopIteration):
                if kept:
                    break
                raise
            attempts += 1
            if target is None:
                target = len(batch)
            fresh = [e for e in batch if self._kept(e, current)]
            dropped += len(batch) - len(fresh)
            # counted at once, so drops before an exhausted reader's exception are not lost
            self.stale_dropped_total += len(batch) - len(fresh)
            kept.extend(fresh)
            if not batch:  # a reader that returns nothing will not return more next time
                break
        if dropped:
            logger.info(
                "step %d: dropped %d experiences older than %s versions (current version %d)",
                step,
                dropped,
                self.max_staleness,
                current,
            )
        if not kept:
            raise StaleDataError(
                f"step {step}: no experience within max_staleness={self.max_staleness} of "
                f"model version {current} after {attempts} reads ({dropped} stale dropped)"
            )
        if target is not None and len(kept) < target:
            logger.warning(
                "step %d: batch has %d of %d experiences after dropping %d stale ones",
                step,
                len(kept),
                target,
                dropped,
            )
        versions = [experience_version(e) for e in kept]
        staleness = [current - v for v in versions if v is not None]
        metrics: dict[str, float] = {
            "time/read_experience": time.perf_counter() - start,
            "sample/stale_dropped": float(dropped),
            "sample/stale_corrected": float(
                sum(v is not None and not self._within(v, current) for v in versions)
            ),
            "sample/stale_dropped_total": float(self.stale_dropped_total),
            "sample/unversioned": float(sum(v is None for v in versions)),
            "sample/read_attempts": float(attempts),
        }
        if staleness:
            metrics["sample/staleness/mean"] = float(sum(staleness)) / len(staleness)
            metrics["sample/staleness/max"] = float(max(staleness))
        metrics.update(model_version_metrics(kept))
        return self._result(kept, metrics)

    @classmethod
    def default_args(cls) -> dict[str, Any]:
        return {
            "max_staleness": None,
            "drop_unversioned": False,
            "max_read_attempts": 64,
            "stale": None,
        }


#: Per-token fields of a rollout that expert rows lack (``mix`` zero-fills them).
_ROLLOUT_FIELDS = ("logprobs", "advantages", "returns")


@SAMPLE_STRATEGY.register_module("mix")
class MixSampleStrategy(SampleStrategy):
    """Expert (SFT) rows and RL rows in one batch, expert rows flagged.

    Of ``train_batch_size`` rows, ``ceil(expert_data_ratio * train_batch_size)`` come from the
    reader ``sft_dataset_name`` and the rest from the main buffer. Every row gets
    ``info["is_expert"]`` (bool) and ``info["step"]``, and the custom fields
    :data:`EXPERT_CUSTOM_FIELDS`, so the collated batch carries ``expert_mask`` /
    ``is_expert_mask`` for the ``mix`` policy loss. Expert rows lack rollout data; they get
    ``reward`` 0 and zero ``logprobs`` / ``advantages`` / ``returns`` where the RL rows have
    those fields (collation needs a field on all rows or none).

    Args:
        expert_data_ratio: share of expert rows, in ``[0, 1]``.
        sft_dataset_name: reader name of the expert data.
    """

    class Args(SampleStrategyArgs):
        """``sample_strategy_args`` of ``mix``."""

        expert_data_ratio: Probability = Field(0.5, description="Share of expert rows.")
        sft_dataset_name: str = Field("sft_dataset", description="Auxiliary buffer of experts.")

    def __init__(
        self,
        readers: Optional[Mapping[str, ExperienceReader]] = None,
        expert_data_ratio: float = 0.5,
        sft_dataset_name: str = "sft_dataset",
        **kwargs: Any,
    ) -> None:
        super().__init__(readers, **kwargs)
        if not 0.0 <= expert_data_ratio <= 1.0:
            raise ValueError(f"expert_data_ratio must be in [0, 1], got {expert_data_ratio}")
        if self.train_batch_size is None:
            raise ValueError(
                "sample strategy 'mix' needs train_batch_size (buffer.train_batch_size) to "
                "split each batch between expert and RL data"
            )
        self._require_reader(sft_dataset_name, "sample strategy 'mix'")
        self.expert_data_ratio = expert_data_ratio
        self.sft_dataset_name = sft_dataset_name
        self.expert_batch_size = math.ceil(expert_data_ratio * self.train_batch_size)
        self.usual_batch_size = self.train_batch_size - self.expert_batch_size

    @staticmethod
    def _mark(exp: Experience, is_expert: bool, step: int) -> None:
        if exp.info is None:
            exp.info = {}
        exp.info["is_expert"] = is_expert
        exp.info["step"] = step
        have = {cf.destination_field for cf in exp.custom_fields}
        exp.custom_fields = list(exp.custom_fields) + [
            cf for cf in EXPERT_CUSTOM_FIELDS if cf.destination_field not in have
        ]

    async def sample(self, step: int, current_model_version: Optional[int] = None) -> SampleResult:
        start = time.perf_counter()
        usual: list[Experience] = []
        if self.usual_batch_size:
            usual = await _read(self.get_reader(), self.usual_batch_size)
        expert: list[Experience] = []
        if self.expert_batch_size:
            expert = await _read(self.get_reader(self.sft_dataset_name), self.expert_batch_size)
        for exp in usual:
            self._mark(exp, False, step)
        # the per-token rollout fields the RL rows carry (advantages and returns when the
        # explorer computed them), zero on the expert rows: collation needs all rows or none
        fill = [
            name
            for name in _ROLLOUT_FIELDS
            if (not usual and name != "returns") or any(getattr(e, name) is not None for e in usual)
        ]
        for exp in expert:
            self._mark(exp, True, step)
            n_resp = exp.response_length
            if exp.reward is None:
                exp.reward = 0.0
            for name in fill:
                if getattr(exp, name) is None:
                    setattr(exp, name, torch.zeros(n_resp, dtype=torch.float32))
        metrics = {
            "time/read_experience": time.perf_counter() - start,
            "sample/expert_count": float(len(expert)),
            "sample/usual_count": float(len(usual)),
        }
        metrics.update(model_version_metrics(usual))
        return self._result(usual + expert, metrics)

    @classmethod
    def default_args(cls) -> dict[str, Any]:
        return {"expert_data_ratio": 0.5, "sft_dataset_name": "sft_dataset"}


def _takes_buffer_config(cls: type) -> bool:
    """Whether ``cls`` was written for Trinity-RFT: its constructor's first argument is
    ``buffer_config`` (this package's strategies take ``readers``)."""
    try:
        params = list(inspect.signature(cls.__init__).parameters)
    except (TypeError, ValueError):
        return False
    return len(params) > 1 and params[1] == "buffer_config"


def build_sample_strategy(
    strategy: Union[str, type[SampleStrategy]],
    readers: Mapping[str, ExperienceReader],
    args: Optional[Mapping[str, Any]] = None,
    *,
    buffer_config: Any = None,
    **context: Any,
) -> SampleStrategy:
    """Instantiate a strategy: ``default_args()`` overridden by ``args``, plus ``context``.

    ``context`` carries run settings that are not strategy arguments but that strategies
    need, e.g. ``train_batch_size=config.buffer.train_batch_size``. A strategy written for
    Trinity-RFT (``__init__(self, buffer_config, **kwargs)``) is given ``buffer_config`` (the
    run's ``config.buffer``) instead of ``readers`` and builds its own readers from it.
    """
    cls = SAMPLE_STRATEGY[strategy] if isinstance(strategy, str) else strategy
    merged: dict[str, Any] = dict(cls.default_args() or {})
    merged.update(args or {})
    merged.update(context)
    if buffer_config is not None and _takes_buffer_config(cls):
        return cls(buffer_config, **merged)
    return cls(readers, **merged)
