"""Mode ``both`` builds a trainer that runs in the driver on the CPU while Ray starts
(``trinity.launcher.trainer.build.build_local_cpu_engines``): once, before ``ray.init`` returns,
and a build that fails ends the run with its error, Ray shut down, nothing left running."""

from __future__ import annotations

import tempfile

import pytest
import yaml

pytest.importorskip("verl")
ray = pytest.importorskip("ray")


@pytest.fixture
def in_process_run(tmp_path, both_config, arithmetic_tasks, monkeypatch, one_thread):
    """``run(**sections) -> metrics``: mode both in this process (run_both from a checked
    config) on 4 tasks, 2 steps; Ray started and shut down by the run itself."""
    from trinity.launcher.cli import prepare_config
    from trinity.launcher.modes import run_both

    monkeypatch.setenv("TRINITY_RAY_TMPDIR", tempfile.mkdtemp(prefix="tr-ray-"))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)

    def run(**sections):
        tasks = arithmetic_tasks(tmp_path, 4)
        config = both_config(tmp_path, "early", tasks, buffer={"total_steps": 2}, **sections)
        path = tmp_path / "early.yaml"
        path.write_text(yaml.safe_dump(config))
        checked, _ = prepare_config(str(path))
        assert not ray.is_initialized()
        try:
            return run_both(checked)
        finally:
            assert not ray.is_initialized()  # the run's own session, ended

    return run


@pytest.mark.slow
def test_the_cpu_trainer_is_built_once_while_ray_starts(in_process_run, monkeypatch):
    import trinity.launcher.trainer.build as run_module
    from trinity.launcher.trainer.verl_engine import VerlTrainEngine

    built: list[object] = []
    ray_up_at_build: list[bool] = []
    original_build = run_module.build_local_cpu_engines
    original_init = VerlTrainEngine.__init__

    def early(config):
        ray_up_at_build.append(ray.is_initialized())
        engines = original_build(config)
        built.append(engines)
        return engines

    def counting_init(self, *args, **kwargs):
        built.append(self)
        original_init(self, *args, **kwargs)

    monkeypatch.setattr(run_module, "build_local_cpu_engines", early)
    monkeypatch.setattr(VerlTrainEngine, "__init__", counting_init)
    metrics = in_process_run()
    assert ray_up_at_build == [False]  # started before Ray was up
    *constructed, engines = built  # every engine was constructed by the early build
    assert constructed and constructed == [
        e for e in (engines.engine, engines.ref_engine) if e is not None
    ]
    assert metrics["actor/pg_loss"] == pytest.approx(metrics["actor/pg_loss"])  # a real step


@pytest.mark.slow
def test_a_trainer_that_fails_to_build_ends_the_run_with_its_error(in_process_run, monkeypatch):
    import trinity.launcher.trainer.build as run_module

    def broken(config):
        raise RuntimeError("the trainer could not be built (injected)")

    monkeypatch.setattr(run_module, "build_local_cpu_engines", broken)
    with pytest.raises(RuntimeError, match="injected"):
        in_process_run()


def test_trainer_ranks_in_ray_workers_are_not_built_early(tmp_path, both_config, arithmetic_tasks):
    """Several trainer ranks are Ray workers in the run's placement: nothing is built before Ray
    (and nothing is imported or constructed by the check)."""
    from trinity.launcher.cli import prepare_config
    from trinity.launcher.trainer.build import build_local_cpu_engines

    config = both_config(
        tmp_path,
        "ranks",
        arithmetic_tasks(tmp_path, 4),
        trainer={"trainer_config": {"trainer": {"n_gpus_per_node": 2}}},
    )
    path = tmp_path / "ranks.yaml"
    path.write_text(yaml.safe_dump(config))
    checked, _ = prepare_config(str(path))
    assert build_local_cpu_engines(checked) is None
