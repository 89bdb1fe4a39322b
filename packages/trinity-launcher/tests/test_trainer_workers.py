"""The trainer's engines as Ray worker ranks (``trainer/workers.py``).

Fast checks: how batches are split over ranks and how many ranks a config asks for. Slow
checks run the real thing: two gloo ranks in Ray actors against one in-process engine (same
log-probs, same step), and mode ``both`` through the CLI with two trainer ranks.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest
import torch
import yaml

from trinity.common.config import Config
from trinity.common.experience import EID, Experience, collate_experiences
from trinity.launcher.trainer.workers import split_rows, trainer_world_size


def _experiences(n: int, vocab: int = 50, seed: int = 0) -> list[Experience]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        prompt, response = 2 + i % 3, 1 + (i * 2) % 5
        out.append(
            Experience(
                eid=EID(batch=1, task=i, run=0),
                tokens=torch.randint(1, vocab, (prompt + response,), generator=g),
                prompt_length=prompt,
                logprobs=-1.0 - torch.rand(response, generator=g),
                advantages=torch.randn(response, generator=g),
                reward=float(i),
                info={"score": float(i)},
            )
        )
    return out


def test_split_rows_keeps_order_widths_and_every_field():
    batch = collate_experiences(_experiences(5), custom_fields=None)
    shards = split_rows(batch, 2)
    assert [s.batch_size for s in shards] == [3, 2]
    for shard in shards:  # padded widths are the batch's, so [b, R] results concatenate
        assert shard.prompt_length == batch.prompt_length
        assert shard.response_length == batch.response_length
    for name in ("tokens", "attention_mask", "position_ids", "action_mask", "logprobs"):
        joined = torch.cat([getattr(s, name) for s in shards])
        assert torch.equal(joined, getattr(batch, name)), name
    assert torch.equal(torch.cat([s.rewards for s in shards]), batch.rewards)
    assert [e for s in shards for e in s.eids] == batch.eids


def test_split_rows_keeps_pairs_together_and_refuses_empty_ranks():
    batch = collate_experiences(_experiences(6))
    assert [s.batch_size for s in split_rows(batch, 2, unit=2)] == [4, 2]
    with pytest.raises(ValueError, match="groups of 4 rows"):
        split_rows(batch, 2, unit=4)
    with pytest.raises(ValueError, match="cannot be spread over 8 trainer ranks"):
        split_rows(batch, 8)


def test_balanced_partition_evens_out_tokens_and_joins_back_in_order():
    pytest.importorskip("verl")
    from trinity.launcher.trainer.workers import _join, partition_rows, take_rows

    batch = collate_experiences(_experiences(8))
    lengths = batch.attention_mask.sum(dim=-1).tolist()
    contiguous = partition_rows(batch, 2)
    assert contiguous == [[0, 1, 2, 3], [4, 5, 6, 7]]
    for equal in (True, False):
        parts = partition_rows(batch, 2, balance=True, equal=equal)
        assert sorted(i for p in parts for i in p) == list(range(8))
        if equal:
            assert [len(p) for p in parts] == [4, 4]
        sums = [sum(lengths[i] for i in p) for p in parts]
        assert max(sums) - min(sums) <= max(lengths)  # about the same number of tokens each
        # per-rank results come back in the batch's row order
        shards = [take_rows(batch, p) for p in parts]
        assert torch.equal(_join([s.tokens for s in shards], parts), batch.tokens)
    # uneven rows with equal-size shards asked: contiguous (equal sizes impossible)
    odd = collate_experiences(_experiences(5))
    assert partition_rows(odd, 2, balance=True, equal=True) == [[0, 1, 2], [3, 4]]
    # DPO pairs are never regrouped
    assert partition_rows(batch, 2, unit=2, balance=True) == contiguous


def _config(trainer_config=None, **cluster) -> Config:
    raw = {
        "mode": "train",
        "model": {"model_path": "m"},
        "trainer": {"trainer_config": trainer_config or {}},
        "cluster": cluster,
    }
    return Config.model_validate(raw)


def test_trainer_world_size_from_verl_names_or_the_cluster():
    assert trainer_world_size(_config(), "cpu") == 1
    two = {"trainer": {"n_gpus_per_node": 2}}
    assert trainer_world_size(_config(two), "cpu") == 2
    four = {"trainer": {"n_gpus_per_node": 2, "nnodes": 2}}
    assert trainer_world_size(_config(four), "cuda") == 4
    gpus = _config(trainer_gpu_num=6)
    assert trainer_world_size(gpus, "cuda") == 6
    assert trainer_world_size(gpus, "cpu") == 1  # no GPUs here: one in-process rank
    with pytest.raises(ValueError, match=r"trainer\.trainer_config\.trainer\.n_gpus_per_node=0"):
        trainer_world_size(_config({"trainer": {"n_gpus_per_node": 0}}), "cpu")
    with pytest.raises(ValueError, match=r"nnodes='2'"):
        trainer_world_size(_config({"trainer": {"n_gpus_per_node": 1, "nnodes": "2"}}), "cpu")


# ------------------------------------------------------------------------------------ real


@pytest.mark.slow
def test_two_ray_worker_ranks_equal_one_in_process_engine(ray_cluster, model_path, one_thread):
    """Two gloo ranks in Ray actors (uneven shards: 3 and 2 rows) compute the same log-probs
    and take the same optimizer step as one engine in this process on the whole batch; the
    state dict reaches the driver through rank 0's object reference."""
    pytest.importorskip("verl")
    from trinity.algorithm.resolve import resolve_algorithm
    from trinity.launcher.trainer.verl_engine import (
        TrinityLoss,
        VerlEngineSettings,
        VerlTrainEngine,
    )
    from trinity.launcher.trainer.workers import RemoteEngine, TrainerWorkerGroup

    vocab = json.loads((Path(model_path) / "config.json").read_text())["vocab_size"]
    batch = collate_experiences(_experiences(5, vocab=vocab))
    settings = VerlEngineSettings(
        model_path=model_path,
        device="cpu",
        dtype="float32",
        lr=1e-3,
        use_dynamic_bsz=True,
        max_token_len_per_gpu=32,
    )
    loss = TrinityLoss.from_algorithm(
        resolve_algorithm(
            {
                "algorithm_type": "grpo",
                "kl_loss_fn": "none",
                "entropy_loss_fn_args": {"entropy_coef": 0.01},
            }
        )
    )
    group = TrainerWorkerGroup(2, {"actor": partial(VerlTrainEngine, settings)}, "cpu", threads=1)
    try:
        # rows spread by token count (trainer.balance_batch), results joined back in order
        remote = RemoteEngine(group, "actor", balance=True, equal_rows=False)
        assert remote._partition(batch) != [[0, 1, 2], [3, 4]]
        contiguous = RemoteEngine(group, "actor")
        local = VerlTrainEngine(settings)
        expected_logprobs = local.compute_logprobs(batch)
        assert torch.allclose(remote.compute_logprobs(batch), expected_logprobs, atol=1e-5)
        assert torch.allclose(contiguous.compute_logprobs(batch), expected_logprobs, atol=1e-5)
        got = remote.train_step(batch, loss, temperature=1.0)
        expected = local.train_step(batch, loss, temperature=1.0)
        assert remote.global_step == 1
        for key in ("actor/loss", "actor/pg_loss", "actor/grad_norm", "actor/entropy"):
            assert got[key] == pytest.approx(expected[key], rel=1e-5), key
        assert got["actor/num_tokens"] == float(batch.action_mask.sum())
        after_remote, after_local = remote.state_dict(), local.state_dict()
        assert after_remote.keys() == after_local.keys()
        for key, value in after_local.items():
            assert torch.allclose(after_remote[key], value, atol=1e-6), key
    finally:
        group.shutdown()


@pytest.mark.slow
def test_mode_both_with_two_trainer_ranks(tmp_path, both_config, run_cli, arithmetic_tasks):
    """Mode both through the CLI with the trainer on two Ray worker ranks: it trains and
    synchronises every step, and its checkpoint holds one shard per rank."""
    tasks = arithmetic_tasks(tmp_path, 8)
    config = both_config(
        tmp_path,
        "two-ranks",
        tasks,
        buffer={"total_steps": 2},
        trainer={"save_interval": 2, "trainer_config": {"trainer": {"n_gpus_per_node": 2}}},
    )
    path = tmp_path / "two-ranks.yaml"
    path.write_text(yaml.safe_dump(config))
    done = run_cli(path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert "2 Ray worker rank(s)" in done.stdout + done.stderr
    run = tmp_path / "ckpt" / "both" / "two-ranks"
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    for record in records:
        assert record["batch/size"] == 16
        assert record["actor/num_tokens"] > 0
    # step 2 explored with the weights of step 1: the sync from the workers reached the engine
    assert records[1]["rollout/model_version"] == 1
    actor = run / "global_step_2" / "actor"
    assert sorted(p.name for p in actor.glob("model_world_size_*.pt")) == [
        "model_world_size_2_rank_0.pt",
        "model_world_size_2_rank_1.pt",
    ]
    assert any(p.suffix == ".safetensors" for p in (actor / "huggingface").iterdir())


def test_a_bad_rank_count_is_a_located_config_error(tmp_path):
    from stand_in_model import stand_in_model

    from trinity.common.config import ConfigError
    from trinity.launcher.validation import validate_config

    raw = {
        "mode": "train",
        "checkpoint_root_dir": str(tmp_path / "ckpt"),
        "algorithm": {"algorithm_type": "sft"},
        "model": {"model_path": stand_in_model(tmp_path / "model"), "max_model_len": 64},
        "buffer": {
            "batch_size": 2,
            "train_batch_size": 2,
            "trainer_input": {
                "experience_buffer": {"name": "sft", "storage_type": "file", "path": str(tmp_path)}
            },
        },
        "trainer": {"trainer_config": {"trainer": {"n_gpus_per_node": -1}}},
    }
    with pytest.raises(ConfigError) as info:
        validate_config(raw)
    [issue] = info.value.errors
    assert issue.path == "trainer.trainer_config.trainer.n_gpus_per_node"
    assert issue.value == -1
    assert "allowed: an integer >= 1" in issue.message


@pytest.mark.slow
def test_collective_weight_sync_reaches_the_engine(ray_cluster, model_path, one_thread):
    """``sync_method: nccl``'s path, here over gloo: the trainer's rank 0 broadcasts its weights
    to a rollout engine actor over a group of their own, which then scores exactly like the
    trainer's weights -- from an in-process engine (twice: the group is reused) and from the
    rank-0 worker of a two-rank trainer."""
    pytest.importorskip("verl")
    import asyncio
    from types import SimpleNamespace

    import ray
    from transformers import AutoModelForCausalLM

    from trinity.algorithm.resolve import resolve_algorithm
    from trinity.launcher.engines import EngineSettings, create_engine_actor
    from trinity.launcher.synchronizer import Synchronizer
    from trinity.launcher.trainer.verl_engine import (
        TrinityLoss,
        VerlEngineSettings,
        VerlTrainEngine,
    )
    from trinity.launcher.trainer.workers import RemoteEngine, TrainerWorkerGroup

    handle = create_engine_actor(
        EngineSettings(model_path=model_path, engine_type="transformers", dtype="float32")
    )
    ray.get(handle.ready.remote())
    config = Config.model_validate(
        {
            "mode": "both",
            "model": {"model_path": model_path},
            "synchronizer": {"sync_method": "nccl"},
        }
    )
    assert config.synchronizer.sync_method == "nccl"  # not checked: the CPU downgrade is skipped
    explorer = SimpleNamespace(rollout_engines=[handle])
    vocab = json.loads((Path(model_path) / "config.json").read_text())["vocab_size"]
    batch = collate_experiences(_experiences(4, vocab=vocab))
    loss = TrinityLoss.from_algorithm(
        resolve_algorithm({"algorithm_type": "grpo", "kl_loss_fn": "none"})
    )
    settings = VerlEngineSettings(model_path=model_path, device="cpu", dtype="float32", lr=1e-2)
    tokens = list(range(3, 40))

    def scored_like(state: dict) -> None:
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
        model.load_state_dict(state)
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([tokens])).logits[0, :-1]
        expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(tokens[1:])[:, None])[:, 0]
        got = ray.get(handle.logprobs.remote(tokens))
        assert torch.allclose(torch.as_tensor(got), expected, atol=1e-5)

    before = ray.get(handle.logprobs.remote(tokens))
    local = VerlTrainEngine(settings)
    sync = Synchronizer(
        config.synchronizer, explorer, local, job_dir=config.checkpoint_job_dir, backend="gloo"
    )
    for version in (1, 2):
        local.train_step(batch, loss)
        asyncio.run(sync.push(version))
        assert ray.get(handle.get_model_version.remote()) == version
        scored_like(local.state_dict())
    assert not torch.allclose(
        torch.as_tensor(before), torch.as_tensor(ray.get(handle.logprobs.remote(tokens)))
    )

    group = TrainerWorkerGroup(2, {"actor": partial(VerlTrainEngine, settings)}, "cpu", threads=1)
    try:
        remote = RemoteEngine(group, "actor")
        remote.train_step(batch, loss)
        asyncio.run(
            Synchronizer(
                config.synchronizer,
                explorer,
                remote,
                job_dir=config.checkpoint_job_dir,
                backend="gloo",
            ).push(7)
        )
        assert ray.get(handle.get_model_version.remote()) == 7
        scored_like(remote.state_dict())
    finally:
        group.shutdown()
        ray.kill(handle)


def test_nccl_falls_back_to_memory_where_the_trainer_and_an_engine_share_a_gpu():
    """NCCL cannot put two ranks of one group on one GPU (one GPU for everything): the
    synchronizer sees the placements and sends through the object store instead."""
    import asyncio
    from types import SimpleNamespace

    from trinity.launcher.synchronizer import Synchronizer
    from trinity.launcher.weight_sync import shared_gpus

    assert shared_gpus(("n1", ["0"]), [("n1", ["1"]), ("n1", ["0"]), ("n2", ["0"])]) == [1]
    assert shared_gpus(("n1", []), [("n1", [])]) == []  # CPU: nothing shared

    class Method:
        def __init__(self, fn):
            self.remote = fn

    received = []

    async def placement():
        return ("n1", ["0"])

    async def update(state_dict, version):
        received.append((state_dict, version))
        return version

    handle = SimpleNamespace(gpu_placement=Method(placement), update_weights=Method(update))
    trainer = SimpleNamespace(
        gpu_placement=lambda: ("n1", ["0"]), state_dict_ref=lambda: {"w": torch.ones(1)}
    )
    config = Config.model_validate(
        {"mode": "both", "model": {"model_path": "m"}, "synchronizer": {"sync_method": "nccl"}}
    )
    sync = Synchronizer(
        config.synchronizer, SimpleNamespace(rollout_engines=[handle]), trainer, backend="nccl"
    )
    asyncio.run(sync.push(3))
    assert sync.method == "memory"
    assert received == [({"w": torch.ones(1)}, 3)]


def test_a_failed_rank_is_raised_at_once_and_a_stuck_call_is_bounded(ray_cluster, monkeypatch):
    """A rank's error surfaces as soon as that rank fails, not when its peers (which may be
    blocked in a collective with it) finish; a call still running at the trainer-call limit
    ends with ``TimeoutError`` naming the call and the ranks."""
    import time

    from trinity.launcher.trainer.workers import CALL_TIMEOUT_ENV, TrainerWorkerGroup

    class Toy:  # defined here: pickled by value into the rank actors
        def __init__(self) -> None:
            import os

            self.rank = int(os.environ["RANK"])

        def work(self, fail_rank: int, seconds: float) -> int:
            import time

            if self.rank == fail_rank:
                raise ValueError(f"rank {self.rank} failed")
            time.sleep(seconds)
            return self.rank

    group = TrainerWorkerGroup(2, {"toy": Toy}, "cpu", threads=1)
    try:
        assert group.run_all("toy", "work", -1, 0) == [0, 1]
        began = time.monotonic()
        with pytest.raises(ValueError, match="rank 1 failed"):
            group.run_all("toy", "work", 1, 300)  # rank 0 would sleep 300 s
        assert time.monotonic() - began < 60
        monkeypatch.setenv(CALL_TIMEOUT_ENV, "2")
        with pytest.raises(TimeoutError, match=r"toy\.work: rank\(s\) \[0, 1\] did not finish"):
            group.run_all("toy", "work", -1, 300)
    finally:
        group.shutdown()
