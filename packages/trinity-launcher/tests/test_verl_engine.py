"""VerlTrainEngine: verl's FSDP2 engine with Trinity's losses, checked against plain PyTorch.

Every test runs the real engine (verl 0.9.1 on CPU/gloo through ``verl_compat``) on a tiny random
Qwen2 built in a temporary directory, and compares with the same model loaded by
``transformers`` and trained by hand: the same Trinity loss functions on HF log-probs, a plain
``torch.optim.AdamW`` step with the same hyper-parameters and gradient clipping.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

try:  # the engine needs verl (extra `trinity-launcher[verl]`); the package itself does not
    import verl  # noqa: F401
    import verl.utils.device  # noqa: F401
except Exception as exc:  # pragma: no cover - depends on the environment
    pytest.skip(
        f"verl is not importable ({exc!r}); install trinity-launcher[verl]",
        allow_module_level=True,
    )

from trinity.algorithm.entropy_loss_fn import entropy_from_logits
from trinity.algorithm.resolve import resolve_algorithm
from trinity.common.experience import Experience, Experiences, collate_experiences
from trinity.launcher.trainer import (
    SUPPORTED_VERL_VERSION,
    TrinityLoss,
    UnsupportedVerlVersion,
    VerlEngineSettings,
    VerlTrainEngine,
)
from trinity.launcher.trainer.verl_compat import check_verl_version

# in-process training: one torch thread (see conftest.one_thread)
pytestmark = pytest.mark.usefixtures("one_thread")

#: Where engines and references run: "cpu" (gloo) here and in CI; "cuda" runs the very same checks
#: on a GPU (NCCL), with fp32 compute so the parity tolerances hold.
DEVICE = os.environ.get("TRINITY_TEST_DEVICE", "cpu")
LR = 1e-3
BETAS = (0.9, 0.999)
WEIGHT_DECAY = 0.01
EPS = 1e-8
GRAD_CLIP = 1.0
# (prompt length, response length, environment-token positions masked out of action_mask)
SHAPES = [(3, 5, [2]), (6, 2, []), (4, 7, [1, 5]), (2, 1, []), (5, 4, [])]


# ------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def experiences(model_path) -> list[Experience]:
    """Five experiences with different prompt/response lengths and masked environment tokens
    inside some responses."""
    vocab = json.loads((Path(model_path) / "config.json").read_text())["vocab_size"]
    g = torch.Generator().manual_seed(0)
    out = []
    for prompt_len, response_len, masked in SHAPES:
        action_mask = torch.ones(response_len, dtype=torch.bool)
        action_mask[masked] = False
        out.append(
            Experience(
                tokens=torch.randint(0, vocab, (prompt_len + response_len,), generator=g),
                prompt_length=prompt_len,
                logprobs=-3.0 - 3.0 * torch.rand(response_len, generator=g),
                advantages=torch.randn(response_len, generator=g),
                action_mask=action_mask,
                reward=1.0,
            )
        )
    return out


@pytest.fixture(scope="module")
def batch(experiences) -> Experiences:
    """The five experiences collated: both paddings exercised."""
    return collate_experiences(experiences, pad_token_id=0)


def make_engine(model_path: str, **overrides) -> VerlTrainEngine:
    settings = dict(
        model_path=model_path,
        lr=LR,
        betas=BETAS,
        weight_decay=WEIGHT_DECAY,
        eps=EPS,
        grad_clip=GRAD_CLIP,
        micro_batch_size=2,
        device=DEVICE,
        dtype="float32",
    )
    settings.update(overrides)
    return VerlTrainEngine(VerlEngineSettings(**settings))


@pytest.fixture(scope="module")
def engine(model_path) -> VerlTrainEngine:
    """An engine that is never trained (read-only tests share it)."""
    return make_engine(model_path)


def hf_model(path: str):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float32, attn_implementation="sdpa"
    ).to(DEVICE)


def hf_response_logits(model, batch: Experiences, temperature: float = 1.0) -> torch.Tensor:
    """``[B, R, V]`` logits / T predicting each response token (plain padded HF forward; on
    the CPU, whichever device the model is on)."""
    logits = model(
        input_ids=batch.tokens.to(DEVICE),
        attention_mask=batch.attention_mask.long().to(DEVICE),
        position_ids=batch.position_ids.to(DEVICE),
    ).logits
    p = batch.prompt_length
    return logits[:, p - 1 : -1].float().cpu() / temperature


def hf_logprobs(model, batch: Experiences, temperature: float = 1.0) -> torch.Tensor:
    logits = hf_response_logits(model, batch, temperature)
    lp = torch.log_softmax(logits, dim=-1).gather(-1, batch.responses[..., None])[..., 0]
    return lp * batch.action_mask


def grpo_loss(**algorithm) -> TrinityLoss:
    """GRPO's recipe (PPO-clip policy loss, k2 KL loss) with a non-zero entropy bonus."""
    spec = {
        "algorithm_type": "grpo",
        "kl_loss_fn_args": {"kl_coef": 0.1},
        "entropy_loss_fn_args": {"entropy_coef": 0.01},
    }
    spec.update(algorithm)
    return TrinityLoss.from_algorithm(resolve_algorithm(spec))


def reference_ref_logprob(batch: Experiences) -> torch.Tensor:
    """A fixed stand-in for a reference model's log-probs (the KL term needs one)."""
    g = torch.Generator().manual_seed(1)
    return (-2.0 - torch.rand(batch.action_mask.shape, generator=g)) * batch.action_mask


def reference_step(model_path: str, batch: Experiences, loss: TrinityLoss, temperature: float):
    """One hand-written training step: HF forward, Trinity losses, AdamW, clipping."""
    model = hf_model(model_path)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    logits = hf_response_logits(model, batch, temperature)
    logprob = torch.log_softmax(logits, -1).gather(-1, batch.responses[..., None])[..., 0]
    mask = batch.action_mask
    fields = {"old_logprob": batch.logprobs, "action_mask": mask, "advantages": batch.advantages}
    ref = reference_ref_logprob(batch)
    pg_loss, _ = loss.policy_loss_fn.compute(logprob, fields)
    kl_loss, _ = loss.kl_loss_fn.calculate_kl_loss(
        logprob, ref, mask, loss.loss_agg_mode, old_logprob=batch.logprobs
    )
    bonus, _ = loss.entropy_loss_fn(
        entropy_from_logits(logits), mask, loss_agg_mode=loss.loss_agg_mode
    )
    total = pg_loss + kl_loss - bonus
    total.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
    torch.optim.AdamW(
        model.parameters(), lr=LR, betas=BETAS, weight_decay=WEIGHT_DECAY, eps=EPS
    ).step()
    after = {k: v.cpu() for k, v in model.state_dict().items()}
    before = {k: v.cpu() for k, v in before.items()}
    return before, after, float(total.detach()), float(grad_norm)


# ------------------------------------------------------------------------------- fast checks


def test_version_pin_and_settings_errors(monkeypatch):
    assert check_verl_version() == SUPPORTED_VERL_VERSION
    monkeypatch.setattr(verl, "__version__", "0.9.2")
    with pytest.raises(UnsupportedVerlVersion, match="supports verl 0.9.1 only"):
        check_verl_version()
    monkeypatch.undo()

    with pytest.raises(ValueError, match=r"lr_scheduler_type='linear'.*constant, cosine"):
        VerlEngineSettings(model_path="m", lr_scheduler_type="linear")
    with pytest.raises(ValueError, match=r"max_token_len_per_gpu=None.*use_dynamic_bsz"):
        VerlEngineSettings(model_path="m", use_dynamic_bsz=True)
    with pytest.raises(ValueError, match=r"dtype='float64'"):
        VerlEngineSettings(model_path="m", dtype="float64")
    with pytest.raises(ValueError, match=r"total_training_steps=-1.*cosine"):
        VerlEngineSettings(model_path="m", lr_scheduler_type="cosine")


def test_verl_root_log_handler_is_dropped(engine):
    """verl's import-time ``logging.basicConfig`` printed every trainer line a second time;
    after the engine is built no root handler has verl's format, and one the application set
    up itself is kept."""
    import logging

    from trinity.launcher.trainer.verl_compat import _VERL_ROOT_FORMAT, _drop_verl_root_handler

    root = logging.getLogger()
    formats = [getattr(h.formatter, "_fmt", None) for h in root.handlers]
    assert _VERL_ROOT_FORMAT not in formats
    mine, verls = logging.StreamHandler(), logging.StreamHandler()
    verls.setFormatter(logging.Formatter(_VERL_ROOT_FORMAT))
    root.addHandler(mine)
    root.addHandler(verls)
    try:
        _drop_verl_root_handler()
        assert mine in root.handlers and verls not in root.handlers
    finally:
        root.removeHandler(mine)
        root.removeHandler(verls)


def test_adam_runs_its_foreach_kernels_on_cpu(engine):
    """On CPU the optimizer is asked for foreach kernels (torch's default there is the
    per-tensor loop, one DTensor dispatch per op and parameter); a user's setting wins."""
    optimizer = engine.verl_engine.optimizer
    assert all(group["foreach"] is True for group in optimizer.param_groups)


def test_packed_sequences_attend_without_a_block_mask_on_cpu(engine):
    """Without flash-attn the engine loads the model with ``sdpa_packed`` (each packed sequence
    attends to itself, no ``T x T`` mask); the logprob and train-step checks below compare it
    with plain HF forwards."""
    assert engine.module.config._attn_implementation == "sdpa_packed"


def test_a_tiny_model_trains_on_one_cpu_thread(model_path):
    """``cpu_threads`` is derived from the model's width (1 up to hidden 128, else torch's
    default); a bad value is refused naming the field."""
    from trinity.common.config import Config
    from trinity.launcher.trainer.verl_settings import (
        SINGLE_THREAD_MAX_HIDDEN,
        cpu_threads_for,
    )

    hidden = json.loads((Path(model_path) / "config.json").read_text())["hidden_size"]
    assert hidden <= SINGLE_THREAD_MAX_HIDDEN and cpu_threads_for(model_path) == 1
    assert cpu_threads_for("/not/local") is None
    config = Config.model_validate({"model": {"model_path": model_path, "max_model_len": 18}})
    assert VerlEngineSettings.from_config(config).cpu_threads == 1
    assert VerlEngineSettings.from_config(config, cpu_threads=2).cpu_threads == 2
    with pytest.raises(ValueError, match=r"cpu_threads=0 is invalid; allowed: a positive"):
        VerlEngineSettings(model_path=model_path, cpu_threads=0)


def test_settings_from_trinity_config():
    from trinity.common.config import Config

    config = Config.model_validate(
        {
            "model": {"model_path": "/models/m", "max_model_len": 100},
            "algorithm": {
                "algorithm_type": "grpo",
                "optimizer": {"lr": 2e-6, "lr_scheduler_type": "cosine", "betas": [0.9, 0.95]},
            },
            "trainer": {
                "total_steps": 20,
                "grad_clip": 0.5,
                "trainer_config": {
                    "actor_rollout_ref": {
                        "actor": {"ppo_micro_batch_size_per_gpu": 4},
                        "model": {"enable_gradient_checkpointing": True},
                    }
                },
            },
        }
    )
    settings = VerlEngineSettings.from_config(config, seed=3)
    assert (settings.model_path, settings.lr, settings.betas) == ("/models/m", 2e-6, (0.9, 0.95))
    assert (settings.lr_scheduler_type, settings.total_training_steps) == ("cosine", 20)
    assert (settings.grad_clip, settings.micro_batch_size, settings.seed) == (0.5, 4, 3)
    assert settings.gradient_checkpointing and settings.use_dynamic_bsz
    assert settings.max_token_len_per_gpu == 200  # 2 * max_model_len, the config's own rule
    with pytest.raises(ValueError, match="trainer.max_token_len_per_gpu is unset"):
        VerlEngineSettings.from_config(Config.model_validate({"model": {"model_path": "/m"}}))


def test_derived_token_budget_fits_a_small_model(model_path):
    """Unset ``trainer.max_token_len_per_gpu``: Trinity-RFT's ``2 * max_model_len``, raised to
    the floor a small model's size allows (fewer, larger micro-batches); a value the user set
    is kept as written, and a model whose config is not local gets no floor."""
    from trinity.common.config import Config
    from trinity.launcher.trainer.verl_settings import (
        micro_batch_token_cap,
        micro_batch_token_floor,
    )

    floor = micro_batch_token_floor(model_path)
    cfg = json.loads((Path(model_path) / "config.json").read_text())
    per_token = 4 * (2 * cfg["vocab_size"] + 16 * cfg["num_hidden_layers"] * cfg["hidden_size"])
    # the default attention attends within each packed sequence: memory is the only bound
    assert floor == (256 << 20) // per_token
    # under a block mask the cap trades a micro-batch's fixed cost against attention's waste
    masked = micro_batch_token_floor(model_path, masked_attention=True)
    assert masked == min(floor, micro_batch_token_cap(cfg["hidden_size"])) < floor
    assert micro_batch_token_cap(64) == 1024 and micro_batch_token_cap(512) == 512
    assert micro_batch_token_cap(2048) == 256
    assert floor > 2 * 18  # the quickstart's 2 * max_model_len: dozens of micro-batches

    def budget(trainer: dict, path: str = model_path) -> int:
        config = Config.model_validate(
            {"model": {"model_path": path, "max_model_len": 18}, "trainer": trainer}
        )
        return VerlEngineSettings.from_config(config).max_token_len_per_gpu

    assert budget({}) == floor
    assert budget({"max_token_len_per_gpu": 36}) == 36  # the user's value, as written
    assert budget({}, path="/not/local") == 36
    assert budget({"ulysses_sequence_parallel_size": 2}) == floor // 2
    assert micro_batch_token_floor("/not/local") == 0
    config = Config.model_validate({"model": {"model_path": model_path, "max_model_len": 18}})
    explicit = VerlEngineSettings.from_config(config, attn_implementation="sdpa")
    assert explicit.max_token_len_per_gpu == masked


# ---------------------------------------------------------------------------- engine checks


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_equal_hf_forward(engine, model_path, batch, temperature):
    expected = hf_logprobs(hf_model(model_path), batch, temperature).detach()
    got = engine.compute_logprobs(batch, temperature=temperature)
    assert got.shape == batch.action_mask.shape
    assert torch.allclose(got, expected, atol=1e-5, rtol=0), (got - expected).abs().max()
    # masked positions (padding, environment tokens) are exactly zero
    assert torch.all(got[~batch.action_mask] == 0)


@pytest.mark.slow
def test_logprobs_with_dynamic_batch_and_entropy(model_path, batch):
    engine = make_engine(model_path, use_dynamic_bsz=True, max_token_len_per_gpu=12)
    model = hf_model(model_path)
    logprobs, entropy = engine.compute_logprobs(batch, temperature=0.7, return_entropy=True)
    with torch.no_grad():
        expected_entropy = entropy_from_logits(hf_response_logits(model, batch, 0.7))
    assert torch.allclose(logprobs, hf_logprobs(model, batch, 0.7).detach(), atol=1e-5, rtol=0)
    assert torch.allclose(entropy, expected_entropy * batch.action_mask, atol=1e-5, rtol=0)


@pytest.mark.slow
def test_state_dict_matches_hf_model(engine, model_path):
    expected = {k: v.cpu() for k, v in hf_model(model_path).state_dict().items()}
    got = engine.state_dict()
    assert sorted(got) == sorted(expected)  # tied lm_head.weight present, as in HF
    for name, tensor in expected.items():
        assert got[name].shape == tensor.shape, name
        assert got[name].device.type == "cpu" and got[name].dtype == torch.float32
        assert torch.equal(got[name], tensor), name


@pytest.mark.slow
@pytest.mark.parametrize(
    "batching",
    [
        {"micro_batch_size": 5},  # one micro-batch: the whole batch
        {"micro_batch_size": 2},  # 5 rows do not divide by 2: micro-batches of 1
        {"use_dynamic_bsz": True, "max_token_len_per_gpu": 12},  # packed by tokens
        {"micro_batch_size": 2, "gradient_checkpointing": True},
    ],
    ids=["whole-batch", "micro-batches", "dynamic-bsz", "grad-checkpointing"],
)
def test_train_step_equals_plain_torch(model_path, batch, batching):
    loss = grpo_loss()
    before, expected, expected_loss, expected_norm = reference_step(
        model_path, batch, loss, temperature=0.7
    )
    engine = make_engine(model_path, **batching)
    metrics = engine.train_step(
        batch, loss, temperature=0.7, extra={"ref_logprob": reference_ref_logprob(batch)}
    )
    got = engine.state_dict()

    # the loss and its gradient are exactly the reference's (AdamW's first step is nearly
    # invariant to the gradient's scale, so the gradient norm is the sharp check)
    assert metrics["actor/loss"] == pytest.approx(expected_loss, rel=1e-5)
    assert metrics["actor/grad_norm"] == pytest.approx(expected_norm, rel=1e-5)
    assert metrics["actor/lr"] == LR
    for key in ("actor/pg_loss", "actor/kl_loss", "actor/entropy_loss", "actor/pg_clipfrac"):
        assert key in metrics

    # the update: relative error of the whole update, and elementwise (AdamW divides by
    # |grad| + eps, so elements whose gradient is near eps amplify rounding; bound those by a
    # hundredth of the lr)
    num = sum(((got[k] - expected[k]) ** 2).sum() for k in expected).sqrt()
    den = sum(((expected[k] - before[k]) ** 2).sum() for k in expected).sqrt()
    assert float(num / den) < 1e-4
    for name in expected:
        diff = (got[name] - expected[name]).abs()
        assert torch.all(diff <= 1e-5 * expected[name].abs() + 1e-2 * LR), name


@pytest.mark.slow
def test_missing_reference_logprobs_is_named(engine, batch):
    with pytest.raises(KeyError, match=r"ref_logprob.*kl_loss_fn 'none'"):
        engine.train_step(batch, grpo_loss())


@pytest.mark.slow
def test_positive_advantages_raise_logprobs(model_path, batch):
    engine = make_engine(model_path, lr=1e-2, micro_batch_size=2)
    loss = grpo_loss(kl_loss_fn="none", entropy_loss_fn="none")
    mask = batch.action_mask
    advantages = torch.ones_like(batch.advantages) * mask

    def mean_logprob() -> float:
        return float((engine.compute_logprobs(batch) * mask).sum() / mask.sum())

    start = mean_logprob()
    for _ in range(5):
        old = engine.compute_logprobs(batch)  # on-policy: old = current
        engine.train_step(batch, loss, extra={"old_logprob": old, "advantages": advantages})
    end = mean_logprob()
    assert end > start + 0.1, (start, end)
    assert engine.global_step == 5


@pytest.mark.slow
def test_checkpoint_resume_is_exact(model_path, batch, tmp_path):
    schedule = dict(
        lr_scheduler_type="cosine", total_training_steps=10, lr_warmup_steps=2, min_lr_ratio=0.1
    )
    loss = grpo_loss()
    extra = {"ref_logprob": reference_ref_logprob(batch)}
    original = make_engine(model_path, **schedule)
    original.train_step(batch, loss, extra=extra)
    original.save_checkpoint(tmp_path / "ckpt", step=1)
    logprobs_at_save = original.compute_logprobs(batch)
    next_metrics = original.train_step(batch, loss, extra=extra)
    continued = original.state_dict()

    resumed = make_engine(model_path, **schedule)
    assert resumed.load_checkpoint(tmp_path / "ckpt") == 1
    assert torch.equal(resumed.compute_logprobs(batch), logprobs_at_save)
    resumed_metrics = resumed.train_step(batch, loss, extra=extra)
    assert resumed_metrics["actor/lr"] == next_metrics["actor/lr"]  # the schedule resumed too
    assert resumed_metrics["actor/grad_norm"] == next_metrics["actor/grad_norm"]
    after = resumed.state_dict()
    for name, tensor in continued.items():
        assert torch.equal(after[name], tensor), name
    assert resumed.global_step == original.global_step == 2

    with pytest.raises(FileNotFoundError, match="no checkpoint for world size 1"):
        resumed.load_checkpoint(tmp_path / "nowhere")


@pytest.mark.slow
def test_save_hf_loads_in_transformers(model_path, batch, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    engine = make_engine(model_path)
    engine.train_step(batch, grpo_loss(), extra={"ref_logprob": reference_ref_logprob(batch)})
    out = engine.save_hf(tmp_path / "hf")

    loaded = AutoModelForCausalLM.from_pretrained(out, attn_implementation="sdpa").to(DEVICE)
    assert loaded.dtype == torch.float32
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.encode("1 + 2") == engine.tokenizer.encode("1 + 2")
    # the trained weights, not the initial ones
    initial = hf_model(model_path).state_dict()
    trained = engine.state_dict()
    loaded_state = {k: v.cpu() for k, v in loaded.state_dict().items()}
    assert not torch.equal(loaded_state["model.norm.weight"], initial["model.norm.weight"].cpu())
    for name, tensor in loaded_state.items():
        assert torch.equal(tensor, trained[name]), name
    # logits of the loaded model equal the engine's own forward
    inputs = dict(
        input_ids=batch.tokens.to(DEVICE),
        attention_mask=batch.attention_mask.long().to(DEVICE),
        position_ids=batch.position_ids.to(DEVICE),
    )
    with torch.no_grad():
        expected = engine.module(**inputs).logits.cpu()
        got = loaded(**inputs).logits.cpu()
    valid = batch.attention_mask
    assert torch.allclose(got[valid], expected[valid], atol=1e-5, rtol=0)
    assert torch.allclose(
        hf_logprobs(loaded, batch).detach(), engine.compute_logprobs(batch), atol=1e-5, rtol=0
    )


# Run by each of two gloo ranks (a fresh interpreter per rank: verl's platform and the process
# group are per process). Inputs and outputs travel as torch.save files.
_RANK_SCRIPT = """
import os, sys, torch
torch.set_num_threads(1)
from trinity.launcher.trainer import TrinityLoss, VerlEngineSettings, VerlTrainEngine
from trinity.launcher.trainer.verl_compat import apply_verl_compat
rank = int(os.environ["RANK"])
job = torch.load(sys.argv[1], weights_only=False)
# the process group as verl's Ray workers make it (verl_compat turns its "cpu:gloo,cpu:gloo"
# into "gloo"); the engine then joins the existing group
apply_verl_compat("cpu")
from verl.utils.distributed import initialize_global_process_group_ray
initialize_global_process_group_ray()
assert torch.distributed.get_backend() == "gloo", torch.distributed.get_backend()
engine = VerlTrainEngine(VerlEngineSettings(**job["settings"]))
shard = job["shards"][rank]
logprobs = engine.compute_logprobs(shard["batch"], temperature=0.7)
metrics = engine.train_step(
    shard["batch"], TrinityLoss.from_algorithm(job["algorithm"]), temperature=0.7,
    extra={"ref_logprob": shard["ref_logprob"]},
)
state = engine.state_dict()  # collective: every rank gathers
torch.save({"metrics": metrics, "logprobs": logprobs, "state": state if rank == 0 else None},
           f"{job['out']}.{rank}")
"""


@pytest.mark.slow
def test_two_gloo_ranks_equal_one_process(model_path, experiences, batch, tmp_path):
    """Data parallelism: 2 ranks with uneven shards (3 and 2 rows, different token counts) take
    the same step as one process on the whole batch (global loss denominators, FSDP averaging).
    The ranks create their process group with verl's own initializer, as Ray workers do."""

    if DEVICE != "cpu":
        pytest.skip("two ranks on one GPU: run this check on CPU")
    algorithm = {
        "algorithm_type": "grpo",
        "kl_loss_fn_args": {"kl_coef": 0.1},
        "entropy_loss_fn_args": {"entropy_coef": 0.01},
    }
    ref = reference_ref_logprob(batch)
    shards = []
    for rows in (range(0, 3), range(3, 5)):
        shard = collate_experiences([experiences[i] for i in rows], pad_token_id=0)
        width = shard.response_length
        shards.append({"batch": shard, "ref_logprob": ref[list(rows), :width].clone()})
    settings = dict(
        model_path=model_path,
        device="cpu",
        dtype="float32",
        lr=LR,
        betas=BETAS,
        weight_decay=WEIGHT_DECAY,
        eps=EPS,
        grad_clip=GRAD_CLIP,
        use_dynamic_bsz=True,
        max_token_len_per_gpu=24,
    )
    job_file = tmp_path / "job.pt"
    torch.save(
        {
            "settings": settings,
            "shards": shards,
            "algorithm": algorithm,
            "out": str(tmp_path / "out"),
        },
        job_file,
    )
    from trinity.launcher.trainer.ranks import run_ranks

    ranks = run_ranks(_RANK_SCRIPT, [str(job_file)], 2, timeout=180)
    for rank, (code, log) in enumerate(ranks):
        assert code == 0, f"rank {rank} failed:\n{log[-3000:]}"
    results = [torch.load(f"{tmp_path / 'out'}.{rank}", weights_only=False) for rank in range(2)]

    # each rank's log-probs are its rows of the one-process ones
    expected_logprobs = hf_logprobs(hf_model(model_path), batch, 0.7).detach()
    for rank, rows in enumerate((range(0, 3), range(3, 5))):
        got = results[rank]["logprobs"]
        assert torch.allclose(got, expected_logprobs[list(rows), : got.shape[1]], atol=1e-5, rtol=0)

    before, expected, expected_loss, expected_norm = reference_step(
        model_path, batch, TrinityLoss.from_algorithm(algorithm), temperature=0.7
    )
    for result in results:  # metrics are the whole batch's on every rank
        assert result["metrics"]["actor/loss"] == pytest.approx(expected_loss, rel=1e-5)
        assert result["metrics"]["actor/grad_norm"] == pytest.approx(expected_norm, rel=1e-5)
        assert result["metrics"]["actor/num_tokens"] == float(batch.action_mask.sum())
    got = results[0]["state"]
    num = sum(((got[k] - expected[k]) ** 2).sum() for k in expected).sqrt()
    den = sum(((expected[k] - before[k]) ** 2).sum() for k in expected).sqrt()
    assert float(num / den) < 1e-4
