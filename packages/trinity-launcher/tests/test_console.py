"""The console of a run: Trinity's progress and warnings (each once) on the console, engine and
worker output in ``<checkpoint_job_dir>/log/run.log``, all of it on the console with
``--verbose``."""

from __future__ import annotations

import io
import logging
import os
import re
import warnings
from collections import Counter

import pytest
import yaml

from trinity.launcher.cli import main
from trinity.launcher.logs import ConsoleSession, console_out
from trinity.launcher.progress import ProgressReporter, SummaryCadence, progress_interval
from trinity.utils.log import DedupFilter, get_logger


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _logger(name: str, dedup: DedupFilter) -> tuple[logging.Logger, _Records]:
    logger = logging.getLogger(name)
    logger.handlers.clear()
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    records = _Records()
    records.addFilter(dedup)
    logger.addHandler(records)
    return logger, records


def test_dedup_filter_shows_each_warning_template_once_and_counts_repeats():
    dedup = DedupFilter()
    logger, records = _logger("test_console.dedup", dedup)
    for step in range(4):
        logger.warning("slow step %d", step)
        logger.info("step %d done", step)  # progress is never dropped
    logger.warning("another warning")
    logger.error("failed %s", "a")
    logger.error("failed %s", "a")  # errors always pass
    assert records.messages == [
        "slow step 0",
        "step 0 done",
        "step 1 done",
        "step 2 done",
        "step 3 done",
        "another warning",
        "failed a",
        "failed a",
    ]
    assert dedup.suppressed() == [("slow step 0", 3)]
    other, other_records = _logger("test_console.dedup.other", dedup)
    other.warning("slow step %d", 9)  # same template from another logger: a different warning
    assert other_records.messages == ["slow step 9"]


def test_python_warnings_are_deduplicated_by_their_text():
    dedup = DedupFilter()
    logger, records = _logger("py.warnings", dedup)
    try:
        for text in ("a.py:1: UserWarning: x", "a.py:1: UserWarning: x", "b.py:2: UserWarning: y"):
            logger.warning("%s", text)  # how logging.captureWarnings logs a warning
    finally:
        logger.handlers.clear()
        logger.propagate = True
    assert records.messages == ["a.py:1: UserWarning: x", "b.py:2: UserWarning: y"]
    assert dedup.suppressed() == [("a.py:1: UserWarning: x", 1)]


def test_summary_lines_follow_the_step_and_time_rule():
    now = [0.0]
    cadence = SummaryCadence(every_steps=10, every_seconds=10.0, clock=lambda: now[0])
    printed = []
    for step in range(1, 26):  # fast steps: the first, every 10th after it, the last
        now[0] += 0.5
        if cadence.due(step, total=25):
            printed.append(step)
    assert printed == [1, 11, 21, 25]
    slow = SummaryCadence(every_steps=10, every_seconds=10.0, clock=lambda: now[0])
    printed = []
    for step in range(1, 5):  # 12 s steps: every step (10 s passed since the last line)
        now[0] += 12.0
        if slow.due(step):
            printed.append(step)
    assert printed == [1, 2, 3, 4]


def test_reporter_without_a_terminal_writes_the_last_step_on_close(monkeypatch):
    monkeypatch.setenv("TRINITY_PROGRESS_INTERVAL", "3")
    out = io.StringIO()
    progress = ProgressReporter(total_steps=None, stream=out, cadence=SummaryCadence())
    for step in range(1, 6):
        progress.step(step, {"rollout/tasks": 2, "time/explore_step": 1.0})
    progress.close()
    assert [line.split(":")[0] for line in out.getvalue().splitlines()] == [
        "explore step 1",
        "explore step 4",
        "explore step 5",  # not due, written when the run ends
    ]


def test_bad_progress_interval_is_refused(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("TRINITY_PROGRESS_INTERVAL", "often")
    with pytest.raises(ValueError, match="TRINITY_PROGRESS_INTERVAL='often'"):
        progress_interval()
    monkeypatch.delenv("TRINITY_PROGRESS_INTERVAL")
    config = str(tmp_path / "never-read.yaml")
    assert main(["run", "--config", config, "--progress-interval", "0"]) == 2
    assert "--progress-interval 0 is invalid" in capsys.readouterr().err
    assert "TRINITY_PROGRESS_INTERVAL" not in os.environ


def test_session_sends_other_output_to_the_log_file(tmp_path, capfd):
    log = get_logger("trinity.test_console")
    with ConsoleSession(str(tmp_path / "log")) as session:
        os.write(1, b"C-level engine line\n")
        os.write(2, b"C-level engine error\n")
        print("a library's print")
        logging.getLogger("vllm.fake").warning("a library warning")
        for step in range(3):
            log.warning("step %d was slow", step)
        log.info("an info line")
        warnings.warn("a python warning", UserWarning, stacklevel=1)
        warnings.warn("a python warning", UserWarning, stacklevel=1)
        print("our line", file=console_out())
    captured = capfd.readouterr()
    console = captured.out + captured.err
    assert "our line" in captured.out
    assert "step 0 was slow" in console and "step 1 was slow" not in console
    assert console.count("UserWarning: a python warning") == 1
    assert "an info line" in console  # Trinity's INFO records: on the console by default
    for other in ("C-level engine", "a library's print", "a library warning"):
        assert other not in console
    text = (tmp_path / "log" / "run.log").read_text()
    for line in ("C-level engine line", "C-level engine error", "a library's print"):
        assert line in text
    assert "step 2 was slow" in text and "an info line" in text  # the file keeps every record
    report = "\n".join(session.report())
    assert "2x more: step 0 was slow" in report and str(tmp_path / "log" / "run.log") in report
    # everything is back as it was
    print("after the run")
    assert "after the run" in capfd.readouterr().out
    assert session not in [
        getattr(h, "session", None) for h in logging.getLogger("trinity").handlers
    ]
    with ConsoleSession(str(tmp_path / "log"), level="WARNING"):  # --log-level WARNING
        log.info("a quiet info line")
    assert "a quiet info line" not in capfd.readouterr().err
    assert "a quiet info line" in (tmp_path / "log" / "run.log").read_text()


# ---------------------------------------------------------------------------------------------
# real runs through the command line

_PLUGIN = '''
import os
import warnings

from trinity.buffer.operators.experience_operator import EXPERIENCE_OPERATORS, ExperienceOperator
from trinity.utils.log import get_logger

logger = get_logger("console_test_plugin")


def _in_ray_actor():
    import ray

    return ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None


if _in_ray_actor():  # workflow runners import plugins: one warning from two places
    warnings.warn("console-test warning in a worker", UserWarning, stacklevel=1)
    warnings.warn("console-test warning in a worker", UserWarning, stacklevel=1)


@EXPERIENCE_OPERATORS.register_module("console_test_noisy")
class Noisy(ExperienceOperator):
    """Runs in the driver on every explore step and warns every time."""

    def process(self, exps):
        logger.warning("console-test operator saw %d experiences", len(exps))
        return exps, {}
'''


@pytest.fixture
def console_run(tmp_path, both_config, run_cli, arithmetic_tasks, monkeypatch):
    """``run(name, *args) -> (CompletedProcess, run dir)``: mode both, 3 steps of 4 tasks on
    the transformers engine, with a plugin that warns on every step (in the driver) and at
    import in each workflow runner."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "console_test_plugin.py").write_text(_PLUGIN)
    tasks = arithmetic_tasks(tmp_path, 12)
    monkeypatch.setenv("RAY_DEDUP_LOGS", "0")  # each runner's line in the file, not "repeated"
    monkeypatch.delenv("TRINITY_PROGRESS_INTERVAL", raising=False)

    def run(name: str, *args: str):
        config = both_config(
            tmp_path,
            name,
            tasks,
            buffer={"total_steps": 3},
            explorer={"runner_per_model": 2},
            trainer={"save_interval": 10},
            data_processor={"experience_pipeline": {"operators": [{"name": "console_test_noisy"}]}},
        )
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config))
        done = run_cli(path, "--plugin-dir", str(plugins), *args)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
        return done, tmp_path / "ckpt" / "both" / name

    return run


#: a line Ray forwarded from a worker, e.g. ``(WorkflowRunner pid=42) ...`` (coloured on a console)
_WORKER_LINE = re.compile(r"^(?:\x1b\[\d+m)?\((\w+) pid=(\d+)\)", re.MULTILINE)


@pytest.mark.slow
def test_default_console_shows_progress_and_each_warning_once(console_run):
    done, run_dir = console_run("quiet")
    console = done.stdout + done.stderr
    assert "explore step 1/3:" in done.stdout and "explore step 3/3:" in done.stdout
    assert "Mode both finished" in done.stdout
    assert not _WORKER_LINE.search(console), console[-3000:]
    for noise in ("pid=", "Before FSDP", "Loading weights", "Started a local Ray"):
        assert noise not in console, (noise, console[-3000:])
    assert console.count("console-test operator saw") == 2  # the warning, and the count line
    assert "2x more: console-test operator saw 16 experiences" in done.stdout
    log = (run_dir / "log" / "run.log").read_text()
    assert log.count("console-test operator saw") == 3  # the file keeps each step's line
    assert "Before FSDP" in log  # verl's prints in the driver
    actors = {actor for actor, _ in _WORKER_LINE.findall(log)}
    assert "WorkflowRunner" in actors, log[-3000:]
    lines = [
        line for line in log.splitlines() if "UserWarning: console-test warning in a worker" in line
    ]
    per_pid = Counter(_WORKER_LINE.match(line).group(2) for line in lines)
    # each runner process shows the warning once (the setup hook's "once" filter), not once
    # per line that raised it
    assert len(per_pid) == 2 and set(per_pid.values()) == {1}, lines


@pytest.mark.slow
def test_verbose_shows_engine_and_worker_output_on_the_console(console_run):
    done, run_dir = console_run("verbose", "--verbose")
    console = done.stdout + done.stderr
    assert _WORKER_LINE.search(console), console[-3000:]
    assert "console-test warning in a worker" in console
    assert "explore step 3/3:" in done.stdout
    assert "INFO trinity." in console  # Trinity's INFO records with --verbose
    assert (run_dir / "log" / "run.log").exists()


def test_warnings_print_above_a_live_bar(tmp_path, capfd):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    screen = Tty()
    with ConsoleSession(str(tmp_path / "log")):
        progress = ProgressReporter(total_steps=3, stream=screen)
        assert progress.use_bar
        progress.step(1, {"rollout/tasks": 2, "time/explore_step": 1.0, "rollout/reward/mean": 0.5})
        get_logger("trinity.test_console").warning("a warning during the bar")
        progress.close()
    assert "a warning during the bar" in screen.getvalue()  # on the bar's console
    assert "reward 0.500" in screen.getvalue()
    assert "a warning during the bar" not in capfd.readouterr().err


def test_workers_get_the_run_environment_and_the_setup_hook(tmp_path, monkeypatch, capfd):
    from trinity.common.config import Config
    from trinity.launcher.logs import worker_runtime_env

    monkeypatch.delenv("VLLM_LOGGING_LEVEL", raising=False)
    config = Config()
    config.log.save_dir = str(tmp_path / "log")
    env = worker_runtime_env(config)
    assert env["worker_process_setup_hook"] == "trinity.utils.log.setup_worker_process"
    assert env["env_vars"]["TRINITY_LOG_DIR"] == str(tmp_path / "log")
    assert env["env_vars"]["TRINITY_LOG_LEVEL"] == env["env_vars"]["VLLM_LOGGING_LEVEL"] == "INFO"
    assert "TRINITY_PLUGIN_DIRS" not in env["env_vars"]  # empty: a worker keeps what it inherits
    with ConsoleSession(config.log.save_dir, level="DEBUG"):  # --log-level DEBUG
        debug = worker_runtime_env(config)["env_vars"]
    assert debug["TRINITY_LOG_LEVEL"] == debug["VLLM_LOGGING_LEVEL"] == "DEBUG"
