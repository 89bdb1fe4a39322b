"""The run-mode table (``trinity.common.config.modes``) is the one place that says what a mode
does: the schema accepts exactly its names, every column is what the config rules do, and no
source file compares a mode with a mode's name."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, get_args, get_origin

import pytest

from trinity.common import config as config_module
from trinity.common.config import (
    RUN_MODES,
    Config,
    ConfigError,
    RunMode,
    RunModeSpec,
    load_config,
    run_mode_spec,
)

PACKAGES = Path(__file__).resolve().parents[2]
DATA_DIR = str(Path(__file__).resolve().parent)  # an existing local "data set"
# a local "model": a directory holding config.json (run-level checks refuse a missing one)
MODEL_DIR = str(Path(__file__).resolve().parent / "data" / "model")

# Files allowed to compare a mode with a mode's name: none (the run-mode table answers every
# question a mode is asked). Never to grow.
PENDING_CONVERSION: set[str] = set()
#: the table itself: the one module that names the modes
TABLE = "trinity-core/src/trinity/common/config/modes.py"


@pytest.fixture(autouse=True)
def _cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    # NCCL weight sync is downgraded at run level when this machine has no CUDA: keep the
    # columns' checks independent of the machine
    monkeypatch.setattr(config_module._utils, "cuda_is_available", lambda: True)


def _literal(annotation: Any) -> tuple[Any, ...]:
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    assert get_origin(annotation) is Literal
    return get_args(annotation)


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _runnable(mode: str, tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    """A config that passes the run-level checks in every mode (whatever the mode needs is
    there: a task set, an eval task set, a data set and its batch size)."""
    data: dict[str, Any] = {
        "mode": mode,
        "checkpoint_root_dir": str(tmp_path / "ckpt"),
        "model": {"model_path": MODEL_DIR, "max_model_len": 2048},
        "buffer": {
            "batch_size": 4,
            "train_batch_size": 8,
            "explorer_input": {
                "taskset": {"path": DATA_DIR},
                "eval_tasksets": [{"path": DATA_DIR}],
            },
            # mode serve commits to a SQL table a trainer job reads; the others use a queue
            "trainer_input": {
                "experience_buffer": {
                    "name": "exp",
                    "storage_type": "sql" if RUN_MODES[mode].serves_api else "queue",
                }
            },
        },
    }
    return _merge(data, overrides)


def _issue_paths(data: dict[str, Any], check: bool = True) -> Optional[set[str]]:
    """The paths of the issues of ``data`` (None when it is valid)."""
    try:
        load_config(data, check=check)
    except ConfigError as exc:
        return {issue.path for issue in exc.errors}
    return None


def _drop(data: dict[str, Any], *path: str) -> dict[str, Any]:
    out = _merge(data, {})
    node = out
    for key in path[:-1]:
        node[key] = dict(node[key])
        node = node[key]
    del node[path[-1]]
    return out


MODES = list(RUN_MODES)


# ------------------------------------------------------------------------ the table itself


def test_the_schema_accepts_exactly_the_table_names() -> None:
    assert set(_literal(RunMode)) == set(RUN_MODES)
    assert set(_literal(Config.model_fields["mode"].annotation)) == set(RUN_MODES)
    for name, spec in RUN_MODES.items():
        assert spec.name == name
        config = load_config({"mode": name.upper()})  # matched case-insensitively
        assert config.mode == name
        assert config.run_mode is spec
    with pytest.raises(ConfigError, match="mode"):
        load_config({"mode": "evaluate"})
    with pytest.raises(ValueError, match="both, colocate"):
        run_mode_spec("evaluate")


def test_run_mode_is_a_property_not_a_field() -> None:
    config = load_config({"mode": "explore"})
    assert config.run_mode == run_mode_spec("explore")
    assert "run_mode" not in Config.model_fields
    assert "run_mode" not in config.model_dump()
    assert "run_mode" not in config.to_dict()
    with pytest.raises(AttributeError):
        config.run_mode = RUN_MODES["train"]  # type: ignore[misc]


def test_the_documented_table_is_the_table() -> None:
    from trinity.common.config import modes

    lines = [line for line in (modes.__doc__ or "").splitlines() if line.strip()]
    rules = [i for i, line in enumerate(lines) if set(line.strip()) <= {"=", " "}]
    assert len(rules) == 3, "the module docstring holds one table"
    short = {"taskset": "needs_taskset", "ckpt_eval": "evaluates_checkpoints"}
    header = [short.get(word, word) for word in lines[rules[0] + 1].split()]
    rows = [line.split() for line in lines[rules[1] + 1 : rules[2]]]
    assert [row[0] for row in rows] == list(RUN_MODES)
    for row in rows:
        spec = RUN_MODES[row[0]]
        for column, cell in zip(header[1:], row[1:], strict=True):
            assert cell in ("yes", "needed", "no"), (row[0], column, cell)
            assert getattr(spec, column) == (cell != "no"), (row[0], column)
    columns = set(RunModeSpec.__dataclass_fields__) - {"name"}
    assert set(header[1:]) == columns, "every column is documented in the table"


def test_properties_combine_the_columns() -> None:
    for spec in RUN_MODES.values():
        assert isinstance(spec, RunModeSpec)
        assert spec.explores_and_trains == (spec.explores and spec.trains)
        assert spec.trains_on_dataset == (spec.trains and not spec.explores)
        assert spec.uses_rollout_engines == (not spec.trains_on_dataset)
        assert spec.uses_eval_tasksets == (spec.explores or spec.evaluates_checkpoints)
        assert spec.writes_experiences == (spec.explores or spec.serves_api)
        assert not spec.colocated or spec.explores_and_trains  # taking turns needs two sides
        assert not spec.needs_taskset or spec.explores


# ------------------------------------------------------------------------ columns == rules


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_validates_with_what_it_needs(mode: str, tmp_path: Path) -> None:
    # a complete config passes the run level
    assert _issue_paths(_runnable(mode, tmp_path)) is None


@pytest.mark.parametrize("mode", MODES)
def test_needs_taskset(mode: str, tmp_path: Path) -> None:
    data = _drop(_runnable(mode, tmp_path), "buffer", "explorer_input", "taskset")
    issues = _issue_paths(data) or set()
    assert ("buffer.explorer_input.taskset" in issues) == RUN_MODES[mode].needs_taskset


@pytest.mark.parametrize("mode", MODES)
def test_saves(mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a mode that saves writes under checkpoint_root_dir; left empty, that is the current
    # directory (Trinity-RFT 0.6's default), with a warning
    monkeypatch.chdir(tmp_path)
    config = load_config(_runnable(mode, tmp_path, checkpoint_root_dir=""), check=True)
    saves = RUN_MODES[mode].saves
    assert config.checkpoint_root_dir == (str(tmp_path) if saves else "")
    assert any("checkpoint_root_dir is not set" in w for w in config.warnings) == saves


@pytest.mark.parametrize("mode", MODES)
def test_explores(mode: str, tmp_path: Path) -> None:
    # an explorer writes experiences: the trainer input gets a default queue for them (mode
    # serve: a SQL table, which a trainer job reads as it grows)
    config = load_config({"mode": mode})
    exp = config.buffer.trainer_input.experience_buffer
    assert (exp is not None) == RUN_MODES[mode].writes_experiences
    if exp is not None:
        assert exp.storage_type == ("queue" if RUN_MODES[mode].explores else "sql")


@pytest.mark.parametrize("mode", MODES)
def test_trains_colocated_and_rollout_engines(mode: str) -> None:
    config = load_config(
        {
            "mode": mode,
            "cluster": {"node_num": 1, "gpu_per_node": 4},
            "explorer": {"rollout_model": {"engine_num": 2}},
            "buffer": {"batch_size": 4, "train_batch_size": 8},
        }
    )
    spec = RUN_MODES[mode]
    cluster = config.cluster
    assert (cluster.trainer_gpu_num > 0) == spec.trains
    assert (cluster.rollout_gpu_num > 0) == spec.uses_rollout_engines
    # colocated: the trainer takes turns with the engines on every GPU
    assert (cluster.trainer_gpu_num == 4 and cluster.rollout_gpu_num > 0) == spec.colocated
    # ... and the weights move in memory (the default nccl cannot join two ranks on one GPU)
    assert (config.synchronizer.sync_method == "memory") == spec.colocated


@pytest.mark.parametrize("mode", MODES)
def test_explores_and_trains(mode: str) -> None:
    config = load_config({"mode": mode, "synchronizer": {"sync_method": "nccl"}})
    # NCCL sync needs an explorer and a trainer running at once (colocate uses memory)
    assert (config.synchronizer.sync_method != "checkpoint") == RUN_MODES[mode].explores_and_trains
    # a file cannot be written by the explorer while the trainer reads it
    file_buffer = {"trainer_input": {"experience_buffer": {"storage_type": "file"}}}
    if RUN_MODES[mode].serves_api:  # mode serve writes a SQL table only
        with pytest.raises(ConfigError, match="allowed: 'sql'"):
            load_config({"mode": mode, "buffer": file_buffer})
        return
    config = load_config({"mode": mode, "buffer": file_buffer})
    queued = config.buffer.trainer_input.experience_buffer.storage_type == "queue"
    assert queued == RUN_MODES[mode].explores_and_trains


@pytest.mark.parametrize("mode", MODES)
def test_resumable(mode: str, tmp_path: Path) -> None:
    # an earlier run's output in the directory: a resumable run that must not resume is renamed
    (tmp_path / "ckpt" / "Trinity-RFT" / "rft").mkdir(parents=True)
    (tmp_path / "ckpt" / "Trinity-RFT" / "rft" / "metrics.jsonl").write_text("{}\n")
    config = load_config(_runnable(mode, tmp_path, continue_from_checkpoint=False), check=True)
    assert (config.name != "rft") == RUN_MODES[mode].resumable


@pytest.mark.parametrize("mode", MODES)
def test_evaluates_checkpoints(mode: str, tmp_path: Path) -> None:
    spec = RUN_MODES[mode]
    data = _runnable(mode, tmp_path, buffer={"explorer_input": {"eval_tasksets": []}})
    issues = _issue_paths(data) or set()
    assert ("buffer.explorer_input.eval_tasksets" in issues) == spec.evaluates_checkpoints
    external = {"external_model": {"enable": True, "model_name": "gpt"}}
    issues = _issue_paths({"mode": mode, "model": external}, check=False) or set()
    assert ("model.external_model.enable" not in issues) == spec.evaluates_checkpoints


@pytest.mark.parametrize("mode", MODES)
def test_uses_eval_tasksets(mode: str, tmp_path: Path) -> None:
    data = _runnable(mode, tmp_path, buffer={"explorer_input": {"eval_tasksets": [{}]}})
    issues = _issue_paths(data) or set()
    needs_path = "buffer.explorer_input.eval_tasksets[0].path" in issues
    assert needs_path == RUN_MODES[mode].uses_eval_tasksets


@pytest.mark.parametrize("mode", MODES)
def test_trains_on_dataset(mode: str, tmp_path: Path) -> None:
    spec = RUN_MODES[mode]
    # a data set is read in epochs, and its batch size must be given
    data = _drop(_runnable(mode, tmp_path), "buffer", "train_batch_size")
    issues = _issue_paths(data) or set()
    assert ("buffer.train_batch_size" in issues) == spec.trains_on_dataset
    data = _drop(_runnable(mode, tmp_path), "buffer", "trainer_input")
    issues = _issue_paths(data) or set()
    assert ("buffer.trainer_input.experience_buffer" in issues) == spec.trains_on_dataset


@pytest.mark.parametrize("mode", MODES)
def test_serves_api_and_writes_experiences(mode: str, tmp_path: Path) -> None:
    spec = RUN_MODES[mode]
    config = load_config(_runnable(mode, tmp_path), check=True)
    assert config.explorer.rollout_model.enable_openai_api == spec.serves_api
    # what the engines produce is saved on its way through the experience pipeline
    saved = config.data_processor.experience_pipeline.input_save_path is not None
    assert saved == spec.writes_experiences


# ------------------------------------------------------------------------ no string tests


def _names_a_mode(node: ast.AST) -> bool:
    """``mode``, ``config.mode``, ``self.run_mode``, ``state["mode"]``, ``state.get("mode")``:
    any name that ends in ``mode``."""
    if isinstance(node, ast.Name):
        name = node.id
    elif isinstance(node, ast.Attribute):
        name = node.attr
    elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        name = node.slice.value
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    ):
        name = node.args[0].value
    else:
        return False
    return isinstance(name, str) and name.lower().endswith("mode")


def _mode_literals(node: ast.AST) -> set[str]:
    """The mode names a literal (a string, or a tuple, list or set of them) spells."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        name = node.value.strip().lower()
        return {name} if name in RUN_MODES else set()
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_mode_literals(e) for e in node.elts)) if node.elts else set()
    return set()


def _mode_string_tests(source: str) -> list[tuple[int, str]]:
    """(line, code) of every comparison of a mode with a mode's name (``==``, ``!=``, ``in``,
    ``not in``, ``is``, either side) and every ``match`` of a mode against one."""
    found: list[tuple[int, str]] = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for left, right in zip(operands, operands[1:], strict=False):
                if (_names_a_mode(left) and _mode_literals(right)) or (
                    _names_a_mode(right) and _mode_literals(left)
                ):
                    found.append((node.lineno, ast.get_source_segment(source, node) or ""))
        elif isinstance(node, ast.Match) and _names_a_mode(node.subject):
            for case in node.cases:
                for sub in ast.walk(case.pattern):
                    if isinstance(sub, ast.MatchValue) and _mode_literals(sub.value):
                        found.append((case.pattern.lineno, ast.unparse(case.pattern)))
    return sorted(found)


def test_the_scan_finds_string_tests() -> None:
    spotted = _mode_string_tests(
        "if cfg.mode == 'train': pass\n"
        "if config.mode not in ('both', 'colocate'): pass\n"
        "if 'bench' != mode: pass\n"
        "if st.session_state['mode'] in ['explore']: pass\n"
        "if state.get('mode') == 'serve': pass\n"
        "if self.run_mode is 'BOTH': pass\n"
        "match config.mode:\n    case 'train': pass\n"
    )
    assert [line for line, _ in spotted] == [1, 2, 3, 4, 5, 6, 8]
    assert not _mode_string_tests(
        "if loss_agg_mode == 'token-mean': pass\n"
        "if split == 'train': pass\n"
        "if config.run_mode.trains: pass\n"
        "state['mode'] = 'train'\n"
    )


def test_no_source_compares_a_mode_with_a_mode_name() -> None:
    files = sorted(PACKAGES.glob("*/src/**/*.py"))
    assert len(files) > 50, f"no sources found under {PACKAGES}"
    offenders = []
    for path in files:
        rel = path.relative_to(PACKAGES).as_posix()
        if rel == TABLE or rel in PENDING_CONVERSION:
            continue
        for line, code in _mode_string_tests(path.read_text(encoding="utf-8")):
            offenders.append(f"{rel}:{line}: {code}")
    assert not offenders, (
        "compare a mode through the run-mode table (config.run_mode.explores, .trains, ...; "
        "trinity.common.config.run_mode_spec(name) for a bare name), not with a mode's name:\n"
        + "\n".join(offenders)
    )
