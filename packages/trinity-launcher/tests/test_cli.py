"""The installed console scripts validate configs and report errors without tracebacks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from stand_in_model import small_config, stand_in_model

BIN = Path(sys.executable).parent
QUICKSTART = Path(__file__).resolve().parents[3] / "examples" / "quickstart.yaml"


def _run(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, cwd=cwd, env=env, timeout=120)


@pytest.fixture
def valid_config(tmp_path) -> Path:
    return small_config(tmp_path)  # validation refuses a model directory that does not exist


def test_console_scripts_are_installed():
    assert (BIN / "trinity").exists() and (BIN / "trinity-launch").exists()


@pytest.mark.skipif(not QUICKSTART.exists(), reason="needs the repository checkout")
def test_quickstart_config_validates_and_says_nothing_ran(tmp_path):
    # scripts/quickstart.sh builds the model before it launches; a stand-in here
    env = dict(os.environ, TRINITY_QUICKSTART_MODEL=stand_in_model(tmp_path / "tiny-model"))
    out = _run(
        str(BIN / "trinity-launch"),
        str(QUICKSTART),
        "--dry-run",
        cwd=QUICKSTART.parents[1],
        env=env,
    )
    assert out.returncode == 0, out.stderr
    assert "Config OK: mode=both" in out.stdout
    assert "algorithm: grpo (repeat_times=8)" in out.stdout
    assert "Dry run: the config is valid; nothing was run." in out.stdout


def test_trinity_run_loads_plugin_dirs_first(valid_config, tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    marker = tmp_path / "plugin-ran"
    (plugins / "my_plugin.py").write_text(f"open({str(marker)!r}, 'w').write('yes')\n")
    out = _run(
        str(BIN / "trinity"),
        "run",
        "--config",
        str(valid_config),
        "--plugin-dir",
        str(plugins),
        "--dry-run",
    )
    assert out.returncode == 0, out.stderr
    assert marker.read_text() == "yes"
    assert "Config OK" in out.stdout


def test_bad_config_exits_2_naming_field_value_and_allowed_values(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("mode: both\nsynchronizer:\n  sync_methdo: nccl\n  sync_style: sometimes\n")
    out = _run(str(BIN / "trinity-launch"), str(cfg))
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert "synchronizer.sync_methdo" in out.stderr and "sync_method" in out.stderr
    assert "synchronizer.sync_style" in out.stderr and "'sometimes'" in out.stderr
    assert "dynamic_by_explorer" in out.stderr
    assert str(cfg) in out.stderr


def test_missing_file_and_missing_plugin_dir_are_clear_errors(valid_config, tmp_path):
    out = _run(str(BIN / "trinity-launch"), str(tmp_path / "nope.yaml"))
    assert out.returncode == 2 and "nope.yaml" in out.stderr and "Traceback" not in out.stderr
    out = _run(
        str(BIN / "trinity"),
        "run",
        "--config",
        str(valid_config),
        "--plugin-dir",
        str(tmp_path / "no-plugins"),
    )
    assert out.returncode == 2 and "no-plugins" in out.stderr and "Traceback" not in out.stderr


def test_run_level_checks_apply(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("mode: explore\nmodel:\n  model_path: m\n  max_model_len: 64\n")
    out = _run(str(BIN / "trinity-launch"), str(cfg))
    assert out.returncode == 2, out.stdout
    # run-level checks (not just the schema) answer: the task set a mode explore run needs;
    # an empty checkpoint_root_dir is the current directory, as in Trinity-RFT 0.6
    assert "buffer.explorer_input.taskset" in out.stderr and "Traceback" not in out.stderr


def test_algorithm_defaults_and_unknown_components(valid_config, tmp_path):
    text = valid_config.read_text().replace("repeat_times: 4", "policy_loss_fn: ppoo")
    bad = tmp_path / "bad_algo.yaml"
    bad.write_text(text)
    out = _run(str(BIN / "trinity-launch"), str(bad))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "algorithm.policy_loss_fn" in out.stderr and "Did you mean 'ppo'" in out.stderr
    ok = tmp_path / "ok_algo.yaml"
    ok.write_text(valid_config.read_text().replace("  repeat_times: 4\n", ""))
    out = _run(str(BIN / "trinity-launch"), str(ok), "--dry-run")
    assert out.returncode == 0, out.stderr
    assert "algorithm: grpo (repeat_times=2)" in out.stdout  # GRPO's own default


def test_type_level_checks_refuse_sft_in_mode_both(valid_config, tmp_path):
    cfg = tmp_path / "sft.yaml"
    cfg.write_text(valid_config.read_text().replace("algorithm_type: grpo", "algorithm_type: sft"))
    out = _run(str(BIN / "trinity-launch"), str(cfg))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "sft" in out.stderr.lower()


def test_unknown_workflow_and_reward_names_are_refused_with_a_suggestion(valid_config):
    text = valid_config.read_text().replace("math_workflow", "math_workflw")
    text += "      default_reward_fn_type: no_such_reward\n"
    valid_config.write_text(text)
    out = _run(str(BIN / "trinity-launch"), str(valid_config))
    assert out.returncode == 2, out.stdout
    assert "buffer.explorer_input.taskset.default_workflow_type" in out.stderr
    assert "Did you mean 'math_workflow'?" in out.stderr
    assert "buffer.explorer_input.taskset.default_reward_fn_type" in out.stderr
    assert "'no_such_reward'" in out.stderr and "Traceback" not in out.stderr


def test_plugin_workflows_count_as_known_names(valid_config, tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "wf.py").write_text(
        "from trinity.common.workflows import WORKFLOWS, Workflow\n"
        "@WORKFLOWS.register_module('my_plugin_workflow')\n"
        "class Mine(Workflow):\n"
        "    def run(self):\n"
        "        return []\n"
    )
    valid_config.write_text(valid_config.read_text().replace("math_workflow", "my_plugin_workflow"))
    bare = _run(str(BIN / "trinity-launch"), str(valid_config))
    assert bare.returncode == 2 and "my_plugin_workflow" in bare.stderr
    out = _run(
        str(BIN / "trinity-launch"), str(valid_config), "--plugin-dir", str(plugins), "--dry-run"
    )
    assert out.returncode == 0, out.stderr


def test_a_mode_without_a_runner_is_validated_then_refused(valid_config, monkeypatch, capsys):
    """A valid config of a mode this release cannot run (none today: the run-mode table's
    ``runnable`` column) exits 2 (bad input), with or without --dry-run: a script must not take
    "nothing was run" for success."""
    from trinity.launcher import cli, modes

    monkeypatch.setattr(modes, "RUNNABLE_MODES", ("both",))
    explore = valid_config.parent / "explore.yaml"
    explore.write_text("mode: explore\n" + valid_config.read_text())
    for extra in ((), ("--dry-run",)):
        assert cli.launch_main([str(explore), *extra]) == 2
        out = capsys.readouterr()
        assert "Config OK: mode=explore" in out.out  # validated first
        assert "mode 'explore' is not implemented yet" in out.err
        assert "nothing was run" in out.err


def test_mode_serve_dry_run_validates(valid_config):
    serve = valid_config.parent / "serve.yaml"
    text = valid_config.read_text().replace("engine_type: transformers", "engine_type: vllm")
    serve.write_text("mode: serve\n" + text)
    out = _run(str(BIN / "trinity-launch"), str(serve), "--dry-run")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Config OK: mode=serve" in out.stdout


def test_explore_mode_refuses_bad_input_before_starting_anything(valid_config, tmp_path):
    text = "mode: explore\n" + valid_config.read_text()
    missing = tmp_path / "config_missing.yaml"
    missing.write_text(text.replace(str(tmp_path / "tasks.jsonl"), str(tmp_path / "nope.jsonl")))
    out = _run(str(BIN / "trinity-launch"), str(missing))
    assert out.returncode == 2, out.stdout + out.stderr
    assert "nope.jsonl" in out.stderr and "Traceback" not in out.stderr
    assert "Starting Ray" not in out.stderr
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"prompt": "1+1=", "response": "2"}\n')
    engine = tmp_path / "config_engine.yaml"
    text = text.replace(str(tmp_path / "tasks.jsonl"), str(rows))
    engine.write_text(text + "explorer:\n  rollout_model:\n    engine_type: sglang\n")
    out = _run(str(BIN / "trinity"), "run", "--config", str(engine))
    assert out.returncode == 2, out.stdout + out.stderr
    assert "explorer.rollout_model.engine_type" in out.stderr and "'sglang'" in out.stderr
    assert "transformers" in out.stderr and "Traceback" not in out.stderr


def test_bad_preemption_options_exit_2_naming_them(valid_config):
    """``--preemption-signals`` takes signal names (SIGKILL cannot be caught),
    ``--grace-period`` a positive number of seconds; a bad one is refused before anything
    starts."""
    launch = str(BIN / "trinity-launch")
    out = _run(launch, str(valid_config), "--preemption-signals", "TERM,BOGUS", "--dry-run")
    assert out.returncode == 2 and "'BOGUS'" in out.stderr and "USR1" in out.stderr
    assert "Traceback" not in out.stderr
    out = _run(launch, str(valid_config), "--preemption-signals", "KILL", "--dry-run")
    assert out.returncode == 2 and "cannot be caught" in out.stderr
    out = _run(launch, str(valid_config), "--grace-period", "0", "--dry-run")
    assert out.returncode == 2 and "--grace-period" in out.stderr and "> 0" in out.stderr
    out = _run(launch, str(valid_config), "--preemption-signals", "usr2", "--dry-run")
    assert out.returncode == 0, out.stderr  # names case-insensitive, SIG optional
