"""``engine_type: transformers``: rollouts with plain Hugging Face ``generate``.

For machines without vLLM (or to debug against the reference implementation). Same interface
and outputs as the vLLM engine: token ids, per-token logprobs under the logprob convention of
:mod:`trinity.launcher.engines.base`, ``n`` samples, weight updates. It is slower (no paged
attention, no continuous batching): calls are serialised on one worker thread, because a
``transformers`` model is not safe to run from several threads at once.

Weights that arrive while a request generates (``sync_style: fully_async``) are taken by
abort-and-resume: the running ``generate`` stops after its current token (a stopping
criterion watches for a pending load), the load runs next on the worker thread, and each
unfinished sample goes on from its prompt and the tokens it has so far on the new weights. The
tokens sampled before keep the log-probs of the weights that sampled them, as with vLLM's
pause-and-recompute.

LoRA (``EngineSettings.lora``): an update that is an adapter (PEFT names) is checked against
the run's adapter and loaded with peft (``set_peft_model_state_dict``; the model is wrapped
with the run's ``LoraConfig`` on the first one, or with a continued adapter from the start);
full weights unload the adapter and replace the base.

A vision-language model (a directory with an image processor, e.g. the ``vlm`` tiny preset)
is loaded with ``AutoModelForImageTextToText`` and generates from image prompts: the image
processor's outputs go to ``generate`` beside the ids (``supports_images``).
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

import torch
from torch import Tensor

from trinity.launcher.engines.base import BaseRolloutEngine, EngineSettings, Sample
from trinity.utils.gc_heap import freeze_startup_heap

__all__ = ["TransformersEngine"]

_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float16": torch.float16,
    "fp16": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
}


class TransformersEngine(BaseRolloutEngine):
    """A causal LM loaded with ``AutoModelForCausalLM`` (a vision-language model with
    ``AutoModelForImageTextToText``) on CUDA when present, else CPU."""

    supports_images = True

    def __init__(self, settings: EngineSettings) -> None:
        super().__init__(settings)
        self.model: Any = None
        #: LoRA: the adapter an update must be (built on the first one)
        self._adapter_format: Any = None
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hf-engine")
        self._loaded = threading.Event()
        self._start_error: Optional[BaseException] = None
        self._start_task: Optional[asyncio.Future] = None
        #: set while new weights wait for the worker thread: a running generate stops early
        self._load_pending = threading.Event()
        #: a generate stopped for the pending load (its request stands paused until it)
        self._aborted_for_load = False
        #: a vision-language model's vision tokens: never sampled (they mark image inputs)
        self._suppress_tokens: Optional[list[int]] = None

    # ------------------------------------------------------------------ lifecycle
    def _load(self) -> None:
        from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

        from trinity.common.models.mm_utils import should_use_processor

        auto = AutoModelForCausalLM
        if should_use_processor(self.settings.model_path):
            from trinity.launcher.engines.mm_inputs import vision_token_ids

            auto = AutoModelForImageTextToText
            self._suppress_tokens = vision_token_ids(self.tokenizer) or None
        dtype = _DTYPES.get(str(self.settings.dtype).lower(), torch.float32)
        if self.device.type == "cpu" and dtype != torch.float32:
            dtype = torch.float32  # bf16 matmuls on CPU are slow and drift from the trainer
        model = auto.from_pretrained(
            self.settings.model_path,
            dtype=dtype,
            trust_remote_code=self.settings.trust_remote_code,
        )
        path = (self.settings.lora or {}).get("lora_adapter_path")
        if path:  # a continued adapter: served from the start (model version 0)
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, str(path))
        self.model = model.to(self.device).eval()

    async def start(self) -> None:
        if self._start_task is None:
            loop = asyncio.get_running_loop()
            self._start_task = loop.run_in_executor(self._executor, self._load)
            # loaded (or failed): later collections skip the start-up's objects
            self._start_task.add_done_callback(lambda _: freeze_startup_heap())
        await self._start_task

    async def ready(self) -> bool:
        await self.start()
        return True

    async def shutdown(self) -> None:
        self.model = None
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def _run(self, fn: Any, *args: Any) -> Any:
        await self.start()
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    # ------------------------------------------------------------------ primitives
    def _generate_sync(
        self,
        prompt_ids: list[int],
        params: dict[str, Any],
        multi_modal_inputs: Optional[dict[str, Tensor]] = None,
    ) -> list[Sample]:
        """``n`` samples of one prompt; a sample cut short by a pending weight load has
        ``finish_reason`` None (see :meth:`_resume`)."""
        from transformers import GenerationConfig, StoppingCriteria, StoppingCriteriaList

        pending = self._load_pending

        class _StopForLoad(StoppingCriteria):
            def __call__(self, input_ids: Tensor, scores: Tensor, **kwargs: Any) -> Tensor:
                return torch.full((input_ids.shape[0],), pending.is_set(), device=input_ids.device)

        n = int(params.get("n", 1))
        temperature = float(params.get("temperature", 1.0))
        greedy = temperature <= 0
        eos = [self.tokenizer.eos_token_id] if self.tokenizer.eos_token_id is not None else []
        eos += [int(t) for t in params.get("stop_token_ids") or []]
        top_k = int(params.get("top_k", -1))
        gen_config = GenerationConfig(
            max_new_tokens=int(params["max_tokens"]),
            min_new_tokens=int(params.get("min_tokens") or 0),
            do_sample=not greedy,
            temperature=None if greedy else temperature,
            top_p=None if greedy else float(params.get("top_p", 1.0)),
            top_k=None if greedy or top_k <= 0 else top_k,
            repetition_penalty=float(params.get("repetition_penalty", 1.0)),
            num_return_sequences=n,
            eos_token_id=None if params.get("ignore_eos") else (eos or None),
            suppress_tokens=self._suppress_tokens,
            pad_token_id=self.tokenizer.pad_token_id,
            return_dict_in_generate=True,
            output_logits=True,
        )
        seed = params.get("seed")
        generator_state = None
        if seed is not None:
            generator_state = torch.random.get_rng_state()
            torch.manual_seed(int(seed))
        try:
            with torch.no_grad():
                input_ids = torch.tensor([prompt_ids], device=self.device)
                images = {k: v.to(self.device) for k, v in (multi_modal_inputs or {}).items()}
                if images:  # the rotary positions over the image's grid (see mm_token_type_ids)
                    from trinity.launcher.engines.mm_inputs import mm_token_type_ids

                    image_token = int(self.model.config.image_token_id)
                    images["mm_token_type_ids"] = mm_token_type_ids(input_ids, image_token)
                out = self.model.generate(
                    input_ids=input_ids,
                    attention_mask=torch.ones_like(input_ids),
                    **images,
                    generation_config=gen_config,
                    stopping_criteria=StoppingCriteriaList([_StopForLoad()]),
                )
        finally:
            if generator_state is not None:
                torch.random.set_rng_state(generator_state)
        sequences = out.sequences[:, len(prompt_ids) :]  # [n, new_tokens]
        # raw logits per step -> logprobs at the sampling temperature (before top-k/top-p)
        logits = torch.stack(out.logits, dim=1).float()  # [n, new_tokens, vocab]
        scale = temperature if temperature > 0 else 1.0
        logprobs = torch.log_softmax(logits / scale, dim=-1)
        token_lp = logprobs.gather(-1, sequences.unsqueeze(-1)).squeeze(-1)  # [n, new_tokens]
        stops = set(eos) if not params.get("ignore_eos") else set()
        cut = sequences.shape[1] < int(params["max_tokens"]) and pending.is_set()
        samples = []
        for i in range(sequences.shape[0]):
            ids = sequences[i].tolist()
            finish = None if cut else "length"
            for j, t in enumerate(ids):
                if t in stops:
                    ids = ids[: j + 1]
                    finish = "stop"
                    break
            samples.append(Sample(ids, token_lp[i, : len(ids)].tolist(), finish))
        if any(s.finish_reason is None for s in samples):
            self._aborted_for_load = True
        return samples

    def _apply_stop_strings(self, samples: list[Sample], params: dict[str, Any]) -> list[Sample]:
        """End each sample at the first ``stop`` string, as vLLM does: generation stops at the
        token that completes it, that token is kept, and the text is cut before the stop
        string (after it with ``include_stop_str_in_output``)."""
        stop = params.get("stop")
        stops = [x for x in ([stop] if isinstance(stop, str) else list(stop or [])) if x]
        if not stops:
            return samples
        keep = bool(params.get("include_stop_str_in_output"))
        skip = bool(params.get("skip_special_tokens", True))
        out = []
        for s in samples:
            for j in range(1, len(s.token_ids) + 1):
                text = self.tokenizer.decode(s.token_ids[:j], skip_special_tokens=skip)
                hits = [(text.find(x), x) for x in stops if x in text]
                if hits:
                    at, hit = min(hits)
                    text = text[: at + len(hit)] if keep else text[:at]
                    s = Sample(s.token_ids[:j], s.logprobs[:j], "stop", text)
                    break
            out.append(s)
        return out

    def _score_sync(self, token_ids: list[int], temperature: float) -> Tensor:
        with torch.no_grad():
            ids = torch.tensor([token_ids], device=self.device)
            logits = self.model(input_ids=ids).logits[0, :-1].float()  # [seq-1, vocab]
            lp = torch.log_softmax(logits / temperature, dim=-1)
            return lp.gather(-1, ids[0, 1:].unsqueeze(-1)).squeeze(-1).cpu()

    async def _sample(
        self,
        prompt_ids: list[int],
        params: dict[str, Any],
        multi_modal_inputs: Optional[dict[str, Tensor]] = None,
    ) -> list[Sample]:
        mm = multi_modal_inputs
        samples = await self._run(self._generate_sync, prompt_ids, params, mm)
        if any(s.finish_reason is None for s in samples):
            samples = list(
                await asyncio.gather(*(self._resume(prompt_ids, s, params, mm) for s in samples))
            )
        return self._apply_stop_strings(samples, params)

    async def _resume(
        self,
        prompt_ids: list[int],
        sample: Sample,
        params: dict[str, Any],
        multi_modal_inputs: Optional[dict[str, Tensor]] = None,
    ) -> Sample:
        """Go on with a sample that a weight load cut short: from its prompt and tokens so
        far, on the weights loaded meanwhile (the load was queued on the worker thread before
        this call), until it stops or reaches ``max_tokens`` (or is cut again)."""
        limit, least = int(params["max_tokens"]), int(params.get("min_tokens") or 0)
        while sample.finish_reason is None:
            done = len(sample.token_ids)
            more = {
                **params,
                "n": 1,
                "max_tokens": limit - done,
                "min_tokens": max(0, least - done),
            }
            [tail] = await self._run(
                self._generate_sync, prompt_ids + sample.token_ids, more, multi_modal_inputs
            )
            sample = Sample(
                sample.token_ids + tail.token_ids,
                sample.logprobs + tail.logprobs,
                tail.finish_reason,
            )
        return sample

    async def _score(self, token_ids: list[int], temperature: float) -> Tensor:
        return await self._run(self._score_sync, token_ids, temperature)

    # ------------------------------------------------------------------ sleep (colocate)
    def _move_sync(self, device: torch.device) -> None:
        self.model.to(device)
        if self.device.type == "cuda":
            torch.cuda.empty_cache()  # give the freed blocks back for the trainer

    async def _sleep(self, level: int) -> None:
        """Move the model to host memory (both levels: a ``transformers`` model has no
        separate cache to drop). On a CPU-only machine this frees nothing: the model is in
        host memory already, and the call is only recorded."""
        await self._run(self._move_sync, torch.device("cpu"))

    async def _wake_up(self) -> None:
        await self._run(self._move_sync, self.device)

    # ------------------------------------------------------------------ weights
    def _load_sync(self, weights: dict[str, Tensor]) -> None:
        from trinity.launcher.lora_adapter import is_adapter_state

        if is_adapter_state(weights):
            self._load_adapter_sync(weights)
            return
        if hasattr(self.model, "peft_config"):  # full (merged) weights: no adapter from now on
            self.model = self.model.unload()
        state = self.model.state_dict()
        unknown = sorted(set(weights) - set(state))
        if unknown:
            raise KeyError(
                f"update_weights: {len(unknown)} tensor name(s) not in the model, e.g. {unknown[:3]}"
            )
        with torch.no_grad():
            for name, tensor in weights.items():
                state[name].copy_(tensor.to(state[name].dtype))

    def _load_adapter_sync(self, weights: dict[str, Tensor]) -> None:
        from peft import get_peft_model, set_peft_model_state_dict

        from trinity.launcher.lora_adapter import AdapterFormat

        if not self.settings.lora:
            raise ValueError(
                f"{self.settings.display_name}: got a LoRA adapter as new weights, but this "
                "engine serves full weights (explorer.rollout_model.enable_lora is off)"
            )
        if self._adapter_format is None:
            self._adapter_format = AdapterFormat(self.settings.lora, self.settings.display_name)
        self._adapter_format.check(weights)
        if not hasattr(self.model, "peft_config"):
            self.model = get_peft_model(self.model, self._adapter_format.lora_config).eval()
        with torch.no_grad():
            result = set_peft_model_state_dict(self.model, weights)
        unexpected = getattr(result, "unexpected_keys", None)
        if unexpected:
            raise KeyError(f"update_weights: adapter tensors peft did not load: {unexpected[:3]}")

    def _load_and_release(self, weights: dict[str, Tensor]) -> None:
        try:
            self._load_sync(weights)
        finally:  # on the worker thread, before the resumed requests run
            self._load_pending.clear()

    async def _load_weights(self, weights: dict[str, Tensor]) -> None:
        """Queue the load on the worker thread; a generate running there stops at its next
        token so the load does not wait for it (its request resumes on the new weights)."""
        await self.start()
        asked = time.perf_counter()
        self._load_pending.set()
        try:
            await self._run(self._load_and_release, weights)
        finally:
            if self._aborted_for_load:  # a request stood still from the ask to the load's end
                self._aborted_for_load = False
                self.paused_s += time.perf_counter() - asked
