"""Trinity's vLLM plugin (entry point group ``vllm.general_plugins``): two patches for vLLM's
CPU backend, one that lets seeded requests run at all and one that takes ~2 s off the first
generation (and, in a run's processes on any platform, the log filter of :mod:`.vllm_logs`).

The bug (vLLM 0.32, CPU build). Every seeded request (``SamplingParams.seed``; Trinity seeds
every call, see :meth:`~trinity.launcher.engines.wrapper.EngineModelWrapper.seed_task`) owns a
``torch.Generator``. When the scheduler's token budget (``max_num_batched_tokens``, 2048 on
CPU) cuts a prompt into chunks, the model runner still samples a token for the partial chunk
and then throws it away; to undo the draw it rewinds the generator in
``GPUModelRunner._bookkeeping_sync``::

    gen.set_offset(gen.get_offset() - 4)

That is a Philox (CUDA) generator's offset. A CPU generator is a Mersenne Twister with no
offset: ``RuntimeError: CPU Generator does not use offset`` kills the worker, the EngineCore
dies and every later request fails with ``EngineDeadError``. Any seeded request whose prompt
is chunked triggers it, which is what ~100 concurrent chat requests (2048 tokens of prompts)
do.

The fix. Around ``_sample`` the generators of the rows whose sample will be discarded
(``discard_request_mask``) are saved with ``get_state()`` and put back with ``set_state()``
(both supported by CPU generators), and ``_bookkeeping_sync`` runs with those rows' CPU
generators out of its sight, so it does not try the offset rewind. The rewind is exact (the
whole Mersenne Twister state, not an estimated offset): a discarded draw leaves no trace, so a
seeded request draws the same tokens however its prompt was chunked, i.e. whatever else runs
in the batch. CUDA generators are left to vLLM's own rewind.

Why not avoid chunked prefill instead? With ``enable_chunked_prefill=False`` the budget must
hold a whole prompt (``max_num_batched_tokens >= max_model_len``), prefill batches stop mixing
with decodes and one long prompt stalls the whole batch: prefill throughput is lost on exactly
the machines that have least of it. The patch keeps vLLM's scheduling as it is and fixes the
one line that fails.

Why a plugin? vLLM spawns its EngineCore and worker processes (``spawn``, not ``fork``), so a
patch applied in the engine's own process would not reach the worker that samples. vLLM calls
every ``vllm.general_plugins`` entry point in each of its processes (the API process, the
EngineCore, each worker) before it builds the model runner. The patch is idempotent, applies
only on vLLM's CPU platform, and also covers a bare ``vllm`` used in the same environment.
``VLLM_PLUGINS`` (a comma-separated allow-list of plugin names) can turn it off.

The second patch (:func:`patch_cpu_eager_rank_count`). The sampler ranks each sampled token
among its row's logprobs with ``batched_count_greater_than``, a one-line ``(x >= values).sum(-1)``
wrapped in ``torch.compile`` with the platform's "simple" backend, inductor. On CPU the first
call traces it with dynamo and builds a C++ kernel: measured 1.8-2.4 s inside the first batch of
every engine (and of every restarted one), i.e. on the path to a run's first step, even with
``enforce_eager``. On CPU the sampler gets the same expression uncompiled: the same integer
counts, no compilation.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

__all__ = ["register", "patch_cpu_eager_rank_count", "patch_cpu_seeded_rewind"]

logger = logging.getLogger(__name__)

_MARK = "_trinity_cpu_seeded_rewind"


def register() -> None:
    """The ``vllm.general_plugins`` entry point: apply the patches this vLLM build needs, and
    in a Trinity run's processes demote vLLM's per-weight-update log lines
    (:mod:`.vllm_logs`)."""
    from trinity.launcher.engines.vllm_logs import demote_update_logs, in_a_run

    if in_a_run():
        demote_update_logs()
    try:
        from vllm.platforms import current_platform

        if not current_platform.is_cpu():
            return
    except Exception as exc:  # a vLLM without this API: nothing to patch for it
        logger.debug("trinity vLLM plugin: no platform information (%r)", exc)
        return
    patch_cpu_seeded_rewind()
    patch_cpu_eager_rank_count()


def count_greater_or_equal(x: Any, values: Any) -> Any:
    """``(x >= values).sum(-1)``: per row of ``x`` ``[B, V]``, the entries at least ``values``
    ``[B, 1]`` (vLLM's ``batched_count_greater_than``, uncompiled); returns ``[B]`` int64."""
    return (x >= values).sum(-1)


def patch_cpu_eager_rank_count() -> bool:
    """Give vLLM's sampler the uncompiled rank count (see the module docstring); True when
    in place, False when this vLLM has no such function (nothing is changed)."""
    try:
        from vllm.v1.sample import sampler
    except Exception as exc:  # another vLLM layout
        logger.debug("trinity vLLM plugin: no V1 sampler (%r)", exc)
        return False
    if getattr(sampler, "batched_count_greater_than", None) is None:
        return False
    sampler.batched_count_greater_than = count_greater_or_equal
    return True


def _discarded_cpu_generators(runner: Any) -> dict[int, Any]:
    """``{batch row: generator}`` of the rows whose sample this step discards and whose
    generator lives on the CPU (rows are those of ``runner.input_batch``)."""
    batch = getattr(runner, "input_batch", None)
    discard = getattr(runner, "discard_request_mask", None)
    if batch is None or discard is None:  # a runner without vLLM 0.32's bookkeeping
        return {}
    mask = discard.np[: batch.num_reqs]
    generators = batch.generators
    out = {}
    for row in mask.nonzero()[0].tolist():
        gen = generators.get(row)
        if gen is not None and gen.device.type == "cpu":
            out[row] = gen
    return out


def patch_cpu_seeded_rewind() -> bool:
    """Make vLLM's model runner rewind CPU generators by state (see the module docstring).

    Returns True when the patch is in place (now or from an earlier call), False when this
    vLLM has no such code path (then nothing is changed).
    """
    try:
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    except Exception as exc:  # another vLLM layout: nothing of ours to fix there
        logger.debug("trinity vLLM plugin: no V1 GPUModelRunner (%r)", exc)
        return False
    if getattr(GPUModelRunner, _MARK, False):
        return True
    sample = getattr(GPUModelRunner, "_sample", None)
    bookkeeping = getattr(GPUModelRunner, "_bookkeeping_sync", None)
    if sample is None or bookkeeping is None:
        logger.warning(
            "trinity vLLM plugin: this vLLM's model runner has no _sample/_bookkeeping_sync; "
            "seeded requests with chunked prompts may fail on CPU"
        )
        return False

    @functools.wraps(sample)
    def _sample(self: Any, *args: Any, **kwargs: Any) -> Any:
        saved = {
            row: (gen, gen.get_state()) for row, gen in _discarded_cpu_generators(self).items()
        }
        try:
            return sample(self, *args, **kwargs)
        finally:
            for gen, state in saved.values():
                gen.set_state(state)

    @functools.wraps(bookkeeping)
    def _bookkeeping_sync(self: Any, *args: Any, **kwargs: Any) -> Any:
        hidden = _discarded_cpu_generators(self)
        if not hidden:
            return bookkeeping(self, *args, **kwargs)
        generators = self.input_batch.generators
        for row in hidden:
            del generators[row]
        try:
            return bookkeeping(self, *args, **kwargs)
        finally:
            generators.update(hidden)

    GPUModelRunner._sample = _sample
    GPUModelRunner._bookkeeping_sync = _bookkeeping_sync
    setattr(GPUModelRunner, _MARK, True)
    logger.debug("trinity vLLM plugin: CPU generators of discarded samples rewind by state")
    return True
