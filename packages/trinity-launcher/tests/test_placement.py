"""The placement planner and its feasibility check (pure: no Ray), and a config the cluster
cannot hold refused by the command line in seconds instead of waiting forever."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from trinity.common.config import Config
from trinity.launcher.placement import (
    BUNDLE_CPUS,
    BundleGroup,
    PlacementPlan,
    placement_shortfalls,
    plan_placement,
)

ROOT = Path(__file__).resolve().parents[3]


def config(mode: str = "both", **sections) -> Config:
    """A config of ``mode`` (not checked: the planner reads the cluster and engine sections)."""
    base = {"mode": mode, "model": {"model_path": "m"}}
    base.update(sections)
    return Config.model_validate(base)


def engines(n: int = 1, tp: int = 1, engine_type: str = "vllm", **extra) -> dict:
    return {
        "rollout_model": {
            "engine_num": n,
            "tensor_parallel_size": tp,
            "engine_type": engine_type,
            **extra,
        }
    }


# ------------------------------------------------------------------------------ the plan


def test_cpu_plan_gives_every_engine_and_rank_a_sliver_bundle_with_its_custom_resources():
    cfg = config(
        explorer=engines(2),
        cluster={"explorer_resources": {"node_a": 0.01}, "trainer_resources": {"node_b": 0.5}},
    )
    plan = plan_placement(cfg, gpus=False, trainer_ranks=2, trainer_device="cpu")
    (rollout,) = plan.engines
    assert rollout.strategy == "PACK"
    assert rollout.bundles == ({"CPU": BUNDLE_CPUS, "node_a": 0.01},) * 2
    assert rollout.actors == ("rollout engine 0", "rollout engine 1")
    (trainer,) = plan.trainer
    assert trainer.strategy == "STRICT_PACK"
    assert trainer.bundles == ({"CPU": BUNDLE_CPUS, "node_b": 0.5},) * 2
    assert trainer.actors == ("trainer rank 0", "trainer rank 1")


def test_gpu_plan_packs_trainer_ranks_per_node_and_gives_engines_their_tp_gpus():
    cfg = config(
        explorer={**engines(3, tp=2), "auxiliary_models": [{"engine_num": 1, "model_path": "a"}]}
    )
    plan = plan_placement(cfg, gpus=True, trainer_ranks=6, trainer_device="cuda", ranks_per_node=4)
    rollout, aux = plan.engines
    assert [b["GPU"] for b in rollout.bundles] == [2.0] * 3
    assert aux.name == "auxiliary_0" and aux.bundles[0]["GPU"] == 1.0
    assert [len(g.bundles) for g in plan.trainer] == [4, 2]
    assert all(b["GPU"] == 1.0 for g in plan.trainer for b in g.bundles)
    assert plan.trainer[1].actors == ("trainer rank 4", "trainer rank 5")


def test_engines_without_gpus_modes_without_a_side():
    # an external engine takes no GPU; mode explore has no trainer, mode train no engines
    plan = plan_placement(config("explore", explorer=engines(1, engine_type="external")), gpus=True)
    assert "GPU" not in plan.engines[0].bundles[0] and plan.trainer == []
    plan = plan_placement(config("train", explorer=engines(4)), gpus=True, trainer_ranks=2)
    assert plan.engines == [] and len(plan.trainer) == 1


def test_trainer_layout_reads_verls_rank_counts():
    from trinity.launcher.trainer.workers import trainer_layout

    verl = {"trainer_config": {"trainer": {"n_gpus_per_node": 2, "nnodes": 2}}}
    layout = trainer_layout(config("both", trainer=verl))
    assert layout == {"trainer_ranks": 4, "trainer_device": "cpu", "ranks_per_node": 2}
    plan = plan_placement(config("both", trainer=verl), gpus=False, **layout)
    assert [g.actors for g in plan.trainer] == [
        ("trainer rank 0", "trainer rank 1"),
        ("trainer rank 2", "trainer rank 3"),
    ]
    # one rank runs in the driver: no bundle; mode explore has no trainer
    assert trainer_layout(config("both"))["trainer_ranks"] == 0
    assert trainer_layout(config("explore", trainer=verl)) == {"trainer_ranks": 0}


# ------------------------------------------------------------------------------ refusals

NODE_8 = {"CPU": 16.0, "GPU": 8.0, "memory": 1e11}


def test_the_issue_example_on_a_gpu_less_machine_says_what_is_missing():
    cfg = config(
        explorer=engines(8),
        cluster={"node_num": 2, "gpu_per_node": 8},
        buffer={"batch_size": 16, "train_batch_size": 128},
    )
    plan = plan_placement(cfg, gpus=True)
    problems = placement_shortfalls(plan, [{"CPU": 2.0, "memory": 1e10}])
    assert problems == [
        "needs 8 GPUs in total (8 for the rollout engines); the cluster has none",
        "needs 1 GPU on one node for rollout engine (tensor_parallel_size 1); no node has any GPUs",
    ]


def test_trainer_needs_its_ranks_on_one_node():
    plan = plan_placement(config("train"), gpus=True, trainer_ranks=4, trainer_device="cuda")
    nodes = [{"CPU": 8.0, "GPU": 2.0}] * 3  # 6 GPUs in total, 2 per node
    assert placement_shortfalls(plan, nodes) == [
        "needs 4 GPUs on one node for the trainer (4 ranks x 1 GPU); "
        "the cluster's largest node has 2 GPUs"
    ]
    # packed 2 per node, the same ranks fit
    plan = plan_placement(
        config("train"), gpus=True, trainer_ranks=4, trainer_device="cuda", ranks_per_node=2
    )
    assert placement_shortfalls(plan, nodes) == []


def test_an_engine_larger_than_any_node_and_a_missing_custom_resource():
    cfg = config(explorer=engines(1, tp=16), cluster={"trainer_resources": {"node_b": 1}})
    plan = plan_placement(cfg, gpus=True, trainer_ranks=2, trainer_device="cuda")
    problems = placement_shortfalls(plan, [dict(NODE_8), dict(NODE_8)])
    assert problems == [
        "needs 18 GPUs in total (16 for the rollout engines, 2 for the trainer); "
        "the cluster has 16",
        "needs 2 of resource 'node_b' in total (2 for the trainer); the cluster has none",
        "needs 16 GPUs on one node for rollout engine (tensor_parallel_size 16); "
        "the cluster's largest node has 8 GPUs",
        "needs 2 of resource 'node_b' on one node for the trainer (2 ranks x 1 GPU); "
        "no node has resource 'node_b'",
    ]


def test_parts_on_different_nodes_are_not_enough():
    cfg = config(explorer=engines(1, tp=2), cluster={"explorer_resources": {"rollout": 1}})
    plan = plan_placement(cfg, gpus=True)
    nodes = [{"CPU": 4.0, "GPU": 2.0}, {"CPU": 4.0, "GPU": 1.0, "rollout": 1.0}]
    assert placement_shortfalls(plan, nodes) == [
        "needs 2 GPUs, 0.01 CPUs, 1 of resource 'rollout' on one node for rollout engine "
        "(tensor_parallel_size 2); nodes have each part, but no node has all of it"
    ]


def test_a_cluster_that_holds_the_plan_passes():
    cfg = config(
        explorer=engines(8),
        cluster={"explorer_resources": {"node_a": 0.01}, "trainer_resources": {"node_b": 0.01}},
    )
    plan = plan_placement(cfg, gpus=True, trainer_ranks=8, trainer_device="cuda")
    nodes = [{**NODE_8, "node_a": 1.0}, {**NODE_8, "node_b": 1.0}]
    assert placement_shortfalls(plan, nodes) == []
    # the engines' node lacks one GPU: refused, and it says so
    nodes[0]["GPU"] = 7.0
    assert placement_shortfalls(plan, nodes)[0].startswith("needs 16 GPUs in total")


# ------------------------------------------------------------------------------ properties

bundle_st = st.dictionaries(
    st.sampled_from(["CPU", "GPU", "node_a", "node_b"]),
    st.integers(1, 8).map(float),
    min_size=1,
)
group_st = st.builds(
    lambda bundles, strict: BundleGroup(
        name=f"g{id(bundles)}",
        strategy="STRICT_PACK" if strict else "PACK",
        bundles=tuple(bundles),
        actors=tuple(f"actor {i}" for i in range(len(bundles))),
    ),
    st.lists(bundle_st, min_size=1, max_size=4),
    st.booleans(),
)


@settings(max_examples=200, deadline=None)
@given(
    groups=st.lists(group_st, min_size=1, max_size=4),
    nodes=st.integers(1, 4),
    data=st.data(),
)
def test_never_refuses_a_cluster_that_holds_the_plan(groups, nodes, data):
    """Nodes built to hold some assignment of the plan's bundles (strict groups whole on one
    node), plus spare capacity, are never refused."""
    capacity = [dict[str, float]() for _ in range(nodes)]
    for group in groups:
        units = [group.total()] if group.strategy == "STRICT_PACK" else list(group.bundles)
        for unit in units:
            node = capacity[data.draw(st.integers(0, nodes - 1))]
            for key, amount in unit.items():
                node[key] = node.get(key, 0.0) + amount
    for node in capacity:
        node["CPU"] = node.get("CPU", 0.0) + data.draw(st.integers(0, 4))
    assert placement_shortfalls(PlacementPlan(engines=groups), capacity) == []


@settings(max_examples=200, deadline=None)
@given(groups=st.lists(group_st, min_size=1, max_size=4), data=st.data())
def test_refuses_when_one_resource_is_short_and_names_it(groups, data):
    """Take away part of a resource the plan needs in total: refused, naming the resource."""
    plan = PlacementPlan(engines=groups)
    need: dict[str, float] = {}
    for group in groups:
        for key, amount in group.total().items():
            need[key] = need.get(key, 0.0) + amount
    key = data.draw(st.sampled_from(sorted(need)))
    node = dict(need, **{key: need[key] - 0.5})
    problems = placement_shortfalls(plan, [node])
    word = {"CPU": "CPU", "GPU": "GPU"}.get(key, f"resource {key!r}")
    assert problems and word in problems[0] and "in total" in problems[0]


# ------------------------------------------------------------------------------ the CLI


@pytest.mark.slow
def test_cli_refuses_a_config_the_cluster_cannot_hold(tmp_path):
    """The issue's example: the quickstart with ``cluster: {node_num: 2, gpu_per_node: 8}``
    and 8 rollout engines on this GPU-less machine used to pass validation and then wait
    forever; now it exits with status 2 and what is missing, before any engine starts."""
    pytest.importorskip("ray")
    cfg = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    cfg.update(checkpoint_root_dir=str(tmp_path / "ckpt"))
    cfg["cluster"] = {"node_num": 2, "gpu_per_node": 8}
    cfg["explorer"]["rollout_model"]["engine_num"] = 8
    cfg["model"]["model_path"] = str(tmp_path / "no-model-needed")  # refused before it loads
    (tmp_path / "no-model-needed").mkdir()  # a stand-in: validation refuses a missing one
    (tmp_path / "no-model-needed" / "config.json").write_text("{}")
    for ts in [cfg["buffer"]["explorer_input"]["taskset"]]:
        ts["path"] = str(ROOT / "examples" / "data" / "arithmetic")
    cfg["buffer"]["explorer_input"].pop("eval_tasksets")
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(cfg))
    ray_tmp = tempfile.mkdtemp(prefix="tr-ray-")
    env = dict(os.environ, TRINITY_RAY_TMPDIR=ray_tmp, OMP_NUM_THREADS="1")
    env.pop("RAY_ADDRESS", None)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "trinity.launcher.cli", "run", "--config", str(path)],
            capture_output=True,
            text=True,
            timeout=300,  # a hang fails here instead of holding the suite
            env=env,
        )
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    assert (
        "the cluster cannot hold this run: needs 8 GPUs in total (8 for the rollout engines); "
        "the cluster has none" in done.stderr
    ), done.stderr[-3000:]
    assert "no node has any GPUs (cluster: 1 node(s):" in done.stderr
    assert "Trainer:" not in done.stdout + done.stderr  # nothing was started


# ------------------------------------------------------------------------------ Ray


def test_engines_and_their_replacements_run_in_their_bundles(ray_cluster):
    """Engine ``i`` runs in bundle ``i`` of the rollout group; the supervisor's replacement
    of a killed engine runs in the dead engine's bundle (Ray's ``.options`` of the original)."""
    import asyncio

    import ray

    from trinity.launcher.engines import EngineSettings, create_engine_actor
    from trinity.launcher.engines.supervisor import EngineSupervisor
    from trinity.launcher.placement import Placement

    cfg = config("explore", explorer=engines(2, engine_type="external"))
    placement = Placement.create(plan_placement(cfg, gpus=False), timeout=30)
    try:
        rows = placement.table()
        assert [r[0] for r in rows] == ["rollout engine 0", "rollout engine 1"]
        assert all(r[2].startswith("rollout[") and r[1] != "?" for r in rows), rows
        handles = [  # model-free engines in the bundles a config's engines get
            create_engine_actor(
                EngineSettings(model_path="fake", engine_type="fake", engine_id=i),
                options=placement.engine_options(i),
            )
            for i in range(2)
        ]
        ray.get([h.ready.remote() for h in handles])
        group = placement.groups["rollout"].id.hex()
        assert [ray.get(h.pids.remote())["placement_group_id"] for h in handles] == [group] * 2
        supervisor = EngineSupervisor(
            handles,
            owned=[True, True],
            engine_options=[placement.engine_options(i) for i in range(2)],
        )

        async def replace() -> object:
            await supervisor.start()
            dead = handles[1]
            ray.kill(dead, no_restart=True)
            return await supervisor.restart(1, dead, "killed by the test")

        new = asyncio.run(replace())
        assert new is handles[1] and supervisor.total_restarts == 1
        assert ray.get(new.pids.remote())["placement_group_id"] == group
        assert placement.lost_nodes() is None  # every node of the run is alive
        for handle in handles:
            ray.kill(handle, no_restart=True)
    finally:
        placement.remove()
