"""The first hour with the command line: mistakes caught before Ray starts, ``KEY=VALUE``
overrides, ``--version``, a ``--help`` that answers at once, modes that cannot run refused.

* Local paths: a model directory or task set that does not exist is refused by ``--dry-run``
  and by a launch alike (exit 2, file:line and the dotted field, the absolute path it
  resolved to), before anything starts.
* Overrides (``trinity-launch cfg.yaml buffer.total_steps=3``, ``trinity run --config cfg.yaml
  ...``): applied to the YAML before validation, checked like the file (a bad key names the
  override), shown in the summary, written to the run's log, and the run executes them.
* ``--help`` speed is structural, not timed: importing the CLI module (and printing every
  help) imports neither torch nor the config schema.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from stand_in_model import small_config, stand_in_model

BIN = Path(sys.executable).parent
DISTRIBUTIONS = (
    "trinity-launcher",
    "trinity-core",
    "trinity-algorithms",
    "trinity-buffer",
    "trinity-workflows",
)


def _run(*args: str, cwd: Path | None = None, env: dict | None = None):
    return subprocess.run(args, capture_output=True, text=True, cwd=cwd, env=env, timeout=180)


@pytest.fixture
def config_file(tmp_path) -> Path:
    """A valid mode-``explore`` config: a stand-in model, one task file, ``repeat_times: 2``."""
    return small_config(
        tmp_path,
        repeat_times=2,
        head="mode: explore",
        buffer="total_steps: 5",
        tail="explorer:\n  rollout_model:\n    engine_type: transformers",
    )


def _line_of(path: Path, key: str) -> int:
    for number, text in enumerate(path.read_text().splitlines(), 1):
        if text.strip().startswith(f"{key}:"):
            return number
    raise AssertionError(f"no {key} in {path}")


# ---------------------------------------------------------------- local paths


def test_a_missing_model_directory_is_refused_by_the_dry_run_and_the_launch(config_file, tmp_path):
    text = config_file.read_text().replace(str(tmp_path / "model"), str(tmp_path / "no-model"))
    config_file.write_text(text)
    line = _line_of(config_file, "model_path")
    for extra in (("--dry-run",), ()):
        out = _run(str(BIN / "trinity-launch"), str(config_file), *extra)
        assert out.returncode == 2, out.stdout + out.stderr
        assert f"{config_file}:{line}: model.model_path" in out.stderr
        assert f"no directory {tmp_path / 'no-model'}" in out.stderr
        assert "Traceback" not in out.stderr and "Starting Ray" not in out.stdout + out.stderr


def test_a_relative_task_set_typo_is_refused_with_its_absolute_path(config_file, tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "arithmetic.jsonl").write_text('{"question": "1+1=", "answer": "2"}\n')
    config_file.write_text(
        config_file.read_text().replace(str(tmp_path / "tasks.jsonl"), "data/arithmetc.jsonl")
    )
    out = _run(str(BIN / "trinity"), "run", "--config", str(config_file), "--dry-run", cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    line = _line_of(config_file, "path")
    assert f"{config_file}:{line}: buffer.explorer_input.taskset.path" in out.stderr
    assert str(tmp_path / "data" / "arithmetc.jsonl") in out.stderr  # where it looked
    # the loader's resolution: relative to the current directory
    fixed = config_file.read_text().replace("data/arithmetc.jsonl", "data/arithmetic.jsonl")
    config_file.write_text(fixed)
    out = _run(str(BIN / "trinity"), "run", "--config", str(config_file), "--dry-run", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr


# ---------------------------------------------------------------- overrides


def test_overrides_are_applied_before_validation_and_shown(config_file):
    out = _run(
        str(BIN / "trinity-launch"),
        str(config_file),
        "algorithm.repeat_times=4",
        "--dry-run",  # options and overrides in any order
        "buffer.total_steps=3",
        "name=my run",
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "algorithm: grpo (repeat_times=4)" in out.stdout
    assert "name='my run'" in out.stdout
    assert "overrides: algorithm.repeat_times=4 buffer.total_steps=3 name=my run" in out.stdout
    out = _run(
        str(BIN / "trinity"),
        "run",
        "--config",
        str(config_file),
        "algorithm.repeat_times=6",
        "--dry-run",
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "algorithm: grpo (repeat_times=6)" in out.stdout


def test_a_bad_override_is_refused_naming_the_override(config_file):
    out = _run(
        str(BIN / "trinity-launch"),
        str(config_file),
        "--dry-run",
        "buffer.total_stepz=3",
        "algorithm.repeat_times=0",
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert (
        "override 'buffer.total_stepz=3': buffer.total_stepz: unknown key 'total_stepz'; "
        "did you mean 'total_steps'?"
    ) in out.stderr
    assert "override 'algorithm.repeat_times=0': algorithm.repeat_times: must be >= 1" in (
        out.stderr
    )
    assert f"{config_file}:" not in out.stderr  # no line of the file is blamed
    assert "Traceback" not in out.stderr
    # not KEY=VALUE among the options: argparse's bad-usage exit
    out = _run(str(BIN / "trinity-launch"), str(config_file), "--dry-run", "total_steps")
    assert out.returncode == 2 and "unrecognized arguments: total_steps" in out.stderr


def test_override_values_are_read_as_omegaconf_reads_a_dotlist(config_file, tmp_path):
    from trinity.launcher.cli import prepare_config

    config, _ = prepare_config(
        str(config_file),
        overrides=[
            "buffer.total_steps=3",
            "trainer.trainer_config.x=[1,2]",
            "model.max_model_len=null",
            "group='007'",
            "algorithm.optimizer.lr=1e-5",
            "buffer.explorer_input.taskset.rollout_args.temperature=0.5",
            "+monitor.monitor_type=tensorboard",  # Hydra's "add" prefix is accepted
        ],
    )
    assert config.buffer.total_steps == 3
    assert config.trainer.trainer_config["x"] == [1, 2]
    assert config.model.max_model_len == 24  # null: derived from prompt + response tokens
    assert config.group == "007" and config.algorithm.optimizer.lr == 1e-5
    assert config.buffer.explorer_input.taskset.rollout_args.temperature == 0.5


def test_an_override_of_a_list_item_names_an_existing_item(tmp_path):
    from trinity.common.config import ConfigError
    from trinity.launcher.validation import validate_config

    stand_in_model(tmp_path / "model")
    data = {
        "mode": "bench",
        "checkpoint_root_dir": str(tmp_path / "ckpt"),
        "model": {"model_path": str(tmp_path / "model"), "max_model_len": 64},
        "buffer": {"explorer_input": {"eval_tasksets": [{"path": str(tmp_path)}]}},
        "explorer": {"rollout_model": {"engine_type": "transformers"}},
    }
    config, _ = validate_config(data, overrides=["buffer.explorer_input.eval_tasksets[0].name=e"])
    assert config.buffer.explorer_input.eval_tasksets[0].name == "e"
    with pytest.raises(ConfigError) as info:
        validate_config(data, overrides=["buffer.explorer_input.eval_tasksets[1].name=e"])
    [issue] = info.value.errors
    assert issue.file == "override 'buffer.explorer_input.eval_tasksets[1].name=e'"
    assert "has 1 item(s)" in issue.message


def test_the_run_executes_the_overridden_config_and_logs_the_overrides(
    config_file, monkeypatch, capfd
):
    from trinity.launcher import cli

    ran = []
    monkeypatch.setattr(
        cli, "_execute", lambda config, preemption: ran.append((config, preemption))
    )
    code = cli.launch_main([str(config_file), "buffer.total_steps=3", "algorithm.repeat_times=4"])
    assert code == 0, capfd.readouterr()
    [(config, preemption)] = ran
    import signal

    # the run is handed the default preemption handling (SIGTERM / SIGUSR1, 120 s grace)
    assert preemption.signals == (signal.SIGTERM, signal.SIGUSR1) and preemption.grace_s == 120
    assert config.buffer.total_steps == 3 and config.algorithm.repeat_times == 4
    log = Path(config.checkpoint_job_dir) / "log" / "run.log"
    assert "Config overrides: buffer.total_steps=3 algorithm.repeat_times=4" in log.read_text()
    assert "overrides: buffer.total_steps=3 algorithm.repeat_times=4" in capfd.readouterr().out


def test_collection_pauses_while_the_launch_starts_up_and_is_back_on_after(
    config_file, monkeypatch
):
    """Automatic full collections stop from the launch until the run freezes its start-up
    heap (trinity.utils.gc_heap), and are back when the launch returns, whatever the way."""
    import gc

    from trinity.launcher import cli

    default = gc.get_threshold()
    seen = []
    real = cli.prepare_config

    def observed(*args, **kwargs):
        seen.append(gc.get_threshold()[2] > default[2])
        return real(*args, **kwargs)

    monkeypatch.setattr(cli, "prepare_config", observed)
    assert cli.launch_main([str(config_file), "--dry-run"]) == 0
    assert cli.launch_main([str(config_file), "no.such_key=1"]) == 2  # refused
    assert seen == [True, True] and gc.get_threshold() == default


# ---------------------------------------------------------------- modes that cannot run


def test_a_stage_in_mode_serve_exits_2(config_file):
    staged = config_file.parent / "staged.yaml"
    text = config_file.read_text().replace("engine_type: transformers", "engine_type: vllm")
    staged.write_text(text + "stages:\n  - stage_name: s\n    mode: serve\n")
    for extra in ((), ("--dry-run",)):
        out = _run(str(BIN / "trinity-launch"), str(staged), *extra)
        assert out.returncode == 2, out.stdout + out.stderr
        assert "stages[0] mode 'serve'" in out.stderr and "Traceback" not in out.stderr
        assert "runs until it is stopped" in out.stderr


def test_mode_serve_given_as_an_override_is_checked_as_serve(config_file):
    out = _run(str(BIN / "trinity-launch"), str(config_file), "mode=serve", "--dry-run")
    assert out.returncode == 2, out.stdout + out.stderr
    assert "not supported yet in mode 'serve'" in out.stderr  # its transformers engine


# ---------------------------------------------------------------- --version and --help


@pytest.mark.parametrize("command", [("trinity",), ("trinity-launch",)])
def test_version_lists_every_installed_trinity_package(command):
    from importlib.metadata import version

    out = _run(str(BIN / command[0]), "--version")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines == [f"{name} {version(name)}" for name in DISTRIBUTIONS]


def test_every_subcommand_describes_itself():
    from trinity.launcher.cli import _launch_parser, _main_parser

    parser = _main_parser()
    [sub] = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    assert set(sub.choices) == {"run", "studio", "plot", "convert", "log", "debug", "view"}
    for name, subparser in sub.choices.items():
        assert subparser.description and len(subparser.description) > 20, name
    assert "KEY=VALUE" in _launch_parser().format_help()
    assert "KEY=VALUE" in sub.choices["run"].format_help()


def test_the_cli_module_and_its_help_import_nothing_heavy():
    """Why ``--help`` answers at once: neither importing the module nor printing any help
    imports torch, the config schema or the run layer (structural, not timed)."""
    code = textwrap.dedent(
        """
        import contextlib, io, json, sys
        import trinity.launcher.cli as cli
        after_import = sorted(sys.modules)
        for argv in (["--help"], ["run", "--help"], ["convert", "--help"],
                     ["studio", "--help"], ["plot", "--help"], ["log", "--help"], ["debug", "--help"],
                     ["view", "--help"],
                     ["--version"]):
            with contextlib.redirect_stdout(io.StringIO()):
                try:
                    cli.main(argv)
                except SystemExit:
                    pass
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                cli.launch_main(["--help"])
            except SystemExit:
                pass
        heavy = ("torch", "ray", "transformers", "pydantic", "trinity.common.config",
                 "trinity.launcher.validation", "trinity.launcher.session")
        print(json.dumps({
            "import": [m for m in heavy if m in after_import],
            "help": [m for m in heavy if m in sys.modules],
        }))
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRINITY_")}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"import": [], "help": []}
