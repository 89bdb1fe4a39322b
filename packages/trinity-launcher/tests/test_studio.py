"""Trinity Studio, driven through Streamlit's own ``AppTest`` (the real page script, no browser).

Covers both page modes, the guide's ``train_batch_size`` entry (default, visibility,
divisibility check), algorithm defaults from ``ALGORITHM_TYPE``, registry-backed choices with a
plugin, errors shown next to their fields, YAML generation that validates with the launcher's
own checks, loading a YAML back (round trip), and launching a run / showing its metrics.
"""

from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path

import pytest
import yaml

pytest.importorskip("streamlit")

from streamlit.testing.v1 import AppTest  # noqa: E402

from trinity.algorithm.resolve import resolve_algorithm  # noqa: E402
from trinity.common.config import load_config  # noqa: E402
from trinity.launcher.validation import validate_config  # noqa: E402
from trinity.manager.studio import APP_PATH  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
ARITHMETIC = str(REPO / "examples" / "data" / "arithmetic")


@pytest.fixture(autouse=True)
def _model_dir(tmp_path):
    """``tmp_path / "model"``, the model path the tests type: a stand-in model directory
    (validation refuses one that does not exist; nothing here loads it)."""
    from stand_in_model import stand_in_model

    stand_in_model(tmp_path / "model")


def new_app() -> AppTest:
    at = AppTest.from_file(APP_PATH, default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    return at


def fill_essentials(at: AppTest, tmp_path: Path) -> AppTest:
    at.text_input(key="checkpoint_root_dir").input(str(tmp_path / "ckpt"))
    at.text_input(key="model_path").input(str(tmp_path / "model"))
    at.text_input(key="taskset_path").input(ARITHMETIC)
    at.run()
    assert not at.exception, at.exception
    return at


def generate(at: AppTest) -> str:
    at.button(key="_generate_config").click().run()
    assert not at.exception, at.exception
    assert at.session_state["config_generated"], [e.value for e in at.error]
    return at.session_state["_generated_yaml"]


def errors(at: AppTest) -> list[str]:
    return [e.value for e in at.error]


def keys_of(node) -> set[str]:
    """Widget keys anywhere under an AppTest node."""
    found = set()
    key = getattr(node, "key", None)
    if key:
        found.add(key)
    for child in getattr(node, "children", {}).values():
        found |= keys_of(child)
    return found


def errors_in(node) -> list[str]:
    out = [node.value] if getattr(node, "type", None) == "error" else []
    for child in getattr(node, "children", {}).values():
        out += errors_in(child)
    return out


def column_of(at: AppTest, key: str):
    """The innermost column block that holds the widget ``key``."""
    best = None

    def walk(node):
        nonlocal best
        if getattr(node, "type", None) == "column" and key in keys_of(node):
            best = node
        for child in getattr(node, "children", {}).values():
            walk(child)

    walk(at.main)
    assert best is not None, f"no column holds {key}"
    return best


# ---------------------------------------------------------------------- both modes render
def test_beginner_mode_renders_sections_and_blocks_generation(tmp_path):
    at = new_app()
    headers = [h.value for h in at.header]
    assert headers[:2] == ["Essential Configs", "Important Configs"]
    # a fresh page: the required fields are empty, and nothing is red yet
    assert errors(at) == [] and [w.value for w in at.warning] == []
    assert not at.button(key="_generate_config").disabled
    # asking for the config: the launcher's checks say what is missing, under each field
    at.button(key="_generate_config").click().run()
    assert not at.exception, at.exception
    assert not at.session_state["config_generated"]
    assert any("model path is required" in e for e in errors_in(column_of(at, "model_path")))
    assert any("task set's path" in e for e in errors_in(column_of(at, "taskset_path")))
    assert any(
        "checkpoint_root_dir" in e or "required in mode" in e
        for e in errors_in(column_of(at, "checkpoint_root_dir"))
    )
    assert at.button(key="_generate_config").disabled
    assert not at.code  # no YAML is emitted for an invalid config

    fill_essentials(at, tmp_path)
    assert errors(at) == []
    assert not at.button(key="_generate_config").disabled


def test_a_problem_shows_once_its_field_is_edited(tmp_path):
    at = new_app()
    at.text_input(key="model_path").input(str(tmp_path / "model")).run()
    assert errors(at) == []  # the other required fields are still untouched: no errors
    at.text_input(key="model_path").input("").run()  # cleared again: edited, so it shows
    assert any("model path is required" in e for e in errors_in(column_of(at, "model_path")))
    assert errors_in(column_of(at, "taskset_path")) == []  # never edited
    assert at.button(key="_generate_config").disabled
    assert [w.value for w in at.warning] == ["Fix the 1 problem(s) shown above first."]


def test_expert_mode_renders_the_guide_tabs():
    at = new_app()
    at.radio(key="_page_mode").set_value("Expert Mode").run()
    assert not at.exception, at.exception
    assert [t.label for t in at.tabs][:4] == [
        "Model",
        "Buffer",
        "Explorer and Synchronizer",
        "Trainer",
    ]
    for key in ("model_path", "taskset_path", "engine_num", "sync_method", "policy_loss_fn"):
        assert key in keys_of(at.main), key
    # train mode has no explorer
    at.selectbox(key="mode").set_value("train").run()
    assert "Explorer and Synchronizer" not in [t.label for t in at.tabs]


# ---------------------------------------------------------------------- train_batch_size
def test_train_batch_size_follows_the_guide(tmp_path):
    at = new_app()
    state = at.session_state
    # defaults: 8 GPUs, 2 rollout engines x TP 1 -> 6 trainer GPUs, 16 per GPU -> 96
    assert state["trainer_gpu_num"] == 6
    assert state["_train_batch_size_per_gpu"] == 16
    assert at.number_input(key="train_batch_size").value == 96

    # a new value updates the per-GPU size (on_change), which then defines the value
    at.number_input(key="train_batch_size").set_value(120).run()
    assert state["_train_batch_size_per_gpu"] == 20
    assert at.number_input(key="train_batch_size").value == 120

    # fewer trainer GPUs: the value follows per-GPU size x GPUs
    at.number_input(key="engine_num").set_value(4).run()
    assert state["trainer_gpu_num"] == 4
    assert at.number_input(key="train_batch_size").value == 80

    fill_essentials(at, tmp_path)
    config = yaml.safe_load(generate(at))
    assert config["buffer"]["train_batch_size"] == 80

    # no trainer GPU (a CPU run): the entry is hidden and not written
    at.number_input(key="gpu_per_node").set_value(0).run()
    assert state["trainer_gpu_num"] == 0
    assert "train_batch_size" not in keys_of(at.main)
    config = yaml.safe_load(generate(at))
    assert "train_batch_size" not in config["buffer"]
    assert (
        validate_config(config)[0].buffer.train_batch_size
        == config["buffer"]["batch_size"] * (config["algorithm"]["repeat_times"])
    )


def _check_script():
    import streamlit as st

    from trinity.manager.config_registry.config_registry import CONFIG_GENERATORS

    st.session_state["trainer_gpu_num"] = st.session_state.get("gpus", 6)
    st.session_state["train_batch_size"] = st.session_state.get("tbs", 96)
    st.session_state["mode"] = "both"
    unfinished: set = set()
    CONFIG_GENERATORS.set_unfinished_fields(unfinished)
    CONFIG_GENERATORS.get_check_func("train_batch_size")(unfinished_fields=unfinished)
    st.session_state["unfinished"] = sorted(unfinished)


@pytest.mark.parametrize(("tbs", "gpus", "flagged"), [(96, 6, False), (97, 6, True), (64, 6, True)])
def test_train_batch_size_check_warns_and_marks_unfinished(tbs, gpus, flagged):
    import trinity.manager.config_registry  # noqa: F401  registers the entries

    at = AppTest.from_function(_check_script, default_timeout=30)
    at.session_state["tbs"] = tbs
    at.session_state["gpus"] = gpus
    at.run()
    assert not at.exception, at.exception
    assert (at.session_state["unfinished"] == ["train_batch_size"]) is flagged
    warnings = [w.value for w in at.warning]
    if flagged:
        assert len(warnings) == 1 and f"({gpus})" in warnings[0] and "divided" in warnings[0]
    else:
        assert warnings == []


# ---------------------------------------------------------------------- algorithm defaults
@pytest.mark.parametrize("algorithm", ["ppo", "dapo", "opmd"])
def test_choosing_an_algorithm_fills_its_defaults(algorithm):
    at = new_app()
    at.radio(key="_page_mode").set_value("Expert Mode").run()
    at.selectbox(key="algorithm_type").set_value(algorithm).run()
    assert not at.exception, at.exception
    expected = resolve_algorithm({"algorithm_type": algorithm}).to_dict()
    state = at.session_state
    assert state["repeat_times"] == expected["repeat_times"]
    for field in ("advantage_fn", "policy_loss_fn", "kl_loss_fn", "sample_strategy"):
        assert state[field] == expected[field], field
        assert yaml.safe_load(state[f"{field}_args"]) == expected[f"{field}_args"], field
    assert ("critic_model_path" in keys_of(at.main)) is (algorithm == "ppo")


def test_sft_switches_to_train_mode_and_an_offline_dataset(tmp_path):
    at = new_app()
    at.selectbox(key="algorithm_type").set_value("sft").run()
    assert at.session_state["mode"] == "train"
    shown = keys_of(at.main)
    assert "taskset_path" not in shown and "experience_buffer_path" in shown
    at.text_input(key="checkpoint_root_dir").input(str(tmp_path / "ckpt"))
    at.text_input(key="model_path").input(str(tmp_path / "model"))
    at.run()
    # a data set path is required (the launcher would derive an empty buffer's path instead)
    assert "Please input the SFT dataset path." in [w.value for w in at.warning]
    assert at.button(key="_generate_config").disabled
    at.text_input(key="experience_buffer_path").input(str(tmp_path / "sft.jsonl")).run()
    config = yaml.safe_load(generate(at))
    assert config["mode"] == "train"
    assert config["algorithm"]["algorithm_type"] == "sft"
    assert config["buffer"]["trainer_input"]["experience_buffer"]["path"] == str(
        tmp_path / "sft.jsonl"
    )
    assert "explorer_input" not in config["buffer"]
    validate_config(config)


def test_cpt_is_an_offline_type_too():
    """``cpt`` trains on a data set of raw text: mode train, no task set, a data set path."""
    at = new_app()
    at.selectbox(key="algorithm_type").set_value("cpt").run()
    assert not at.exception, at.exception
    assert at.session_state["mode"] == "train"
    shown = keys_of(at.main)
    assert "taskset_path" not in shown and "experience_buffer_path" in shown


# ---------------------------------------------------------------------- errors next to fields
def test_schema_errors_appear_under_their_field_and_block_the_yaml(tmp_path):
    at = fill_essentials(new_app(), tmp_path)
    at.radio(key="_page_mode").set_value("Expert Mode").run()
    at.number_input(key="max_prompt_tokens").set_value(4000).run()
    near = errors_in(column_of(at, "max_prompt_tokens"))
    assert any("exceeds" in e and "max_model_len" in e for e in near), errors(at)
    assert at.button(key="_generate_config").disabled
    at.number_input(key="max_prompt_tokens").set_value(512).run()
    assert errors(at) == []
    generate(at)


# ---------------------------------------------------------------------- plugins
PLUGIN = """
import streamlit as st

from trinity.common.workflows import WORKFLOWS, Workflow
from trinity.manager.config_registry.config_registry import CONFIG_GENERATORS


@WORKFLOWS.register_module("studio_plugin_workflow")
class StudioPluginWorkflow(Workflow):
    def run(self):
        return []


@CONFIG_GENERATORS.register_config(
    default_value=0, config_path="explorer.runner_state_report_interval"
)
def set_studio_plugin_report_interval(**kwargs):
    st.number_input("Runner State Report Interval", min_value=0, **kwargs)


@CONFIG_GENERATORS.register_check()
def check_studio_plugin_report_interval(unfinished_fields: set, key: str):
    if st.session_state[key] == 13:
        unfinished_fields.add(key)
        st.warning("13 is unlucky")
"""


@pytest.fixture
def studio_plugin(tmp_path, monkeypatch):
    plugin_dir = tmp_path / "plugins"
    plugin_dir.mkdir()
    (plugin_dir / "studio_plugin_module.py").write_text(textwrap.dedent(PLUGIN))
    monkeypatch.setenv("TRINITY_PLUGIN_DIRS", str(plugin_dir))
    yield plugin_dir
    from trinity.common.workflows import WORKFLOWS
    from trinity.manager.config_registry import CONFIG_GENERATORS

    CONFIG_GENERATORS.unregister_config("studio_plugin_report_interval")
    WORKFLOWS.unregister("studio_plugin_workflow")


def test_plugin_workflows_and_config_entries_show_up(tmp_path, studio_plugin):
    at = fill_essentials(new_app(), tmp_path)
    assert "studio_plugin_workflow" in at.selectbox(key="default_workflow_type").options
    assert "math_workflow" in at.selectbox(key="default_workflow_type").options  # entry point
    at.selectbox(key="default_workflow_type").set_value("studio_plugin_workflow").run()
    at.radio(key="_page_mode").set_value("Expert Mode").run()
    assert "Other" in [t.label for t in at.tabs]
    # operators: what trinity-buffer's registry holds (entry points of the installed package)
    operators = at.multiselect(key="experience_operators")
    assert {"reward_filter", "reward_std_filter"} <= set(operators.options)
    operators.set_value(["reward_filter"]).run()
    at.text_area(key="experience_operator_args").input("reward_filter: {threshold: 0.5}").run()
    at.number_input(key="studio_plugin_report_interval").set_value(13).run()
    assert "13 is unlucky" in [w.value for w in at.warning]
    assert at.button(key="_generate_config").disabled
    at.number_input(key="studio_plugin_report_interval").set_value(30).run()
    config = yaml.safe_load(generate(at))
    assert config["explorer"]["runner_state_report_interval"] == 30
    assert config["buffer"]["explorer_input"]["default_workflow_type"] == "studio_plugin_workflow"
    assert config["data_processor"]["experience_pipeline"]["operators"] == [
        {"name": "reward_filter", "args": {"threshold": 0.5}}
    ]


OVERRIDE_PLUGIN = """
from trinity.algorithm import ALGORITHM_TYPE, AlgorithmType


@ALGORITHM_TYPE.register_module("opmd")  # a built-in's name: this class replaces it
class StudioUserOPMD(AlgorithmType):
    use_reference = True
    schema = "experience"

    @classmethod
    def default_config(cls):
        return {"repeat_times": 3, "advantage_fn": "opmd", "policy_loss_fn": "opmd"}
"""


def test_a_plugin_that_replaces_a_builtin_shows_its_defaults(tmp_path, monkeypatch):
    from trinity.algorithm import ALGORITHM_TYPE
    from trinity.algorithm.algorithm import OPMDAlgorithm

    plugin_dir = tmp_path / "plugins"
    plugin_dir.mkdir()
    (plugin_dir / "studio_user_opmd.py").write_text(OVERRIDE_PLUGIN)
    monkeypatch.setenv("TRINITY_PLUGIN_DIRS", str(plugin_dir))
    try:
        at = new_app()
        assert ALGORITHM_TYPE.get("opmd").__name__ == "StudioUserOPMD"
        at.radio(key="_page_mode").set_value("Expert Mode").run()
        options = at.selectbox(key="algorithm_type").options
        assert options.count("opmd") == 1
        at.selectbox(key="algorithm_type").set_value("opmd").run()
        assert not at.exception, at.exception
        assert OPMDAlgorithm.default_config()["repeat_times"] != 3
        assert at.session_state["repeat_times"] == 3  # the user's class, not the built-in
    finally:
        ALGORITHM_TYPE.unregister("opmd")  # the built-in comes back
    assert ALGORITHM_TYPE.get("opmd") is OPMDAlgorithm


def test_unknown_workflow_in_a_loaded_yaml_is_shown_at_its_field(tmp_path):
    at = fill_essentials(new_app(), tmp_path)
    text = generate(at)
    data = yaml.safe_load(text)
    data["buffer"]["explorer_input"]["default_workflow_type"] = "no_such_workflow"
    at = new_app()
    at.session_state["_yaml_to_load"] = yaml.safe_dump(data)
    at.run()
    near = errors_in(column_of(at, "default_workflow_type"))
    assert any("no_such_workflow" in e for e in near), errors(at)
    assert at.button(key="_generate_config").disabled


# ---------------------------------------------------------------------- YAML round trips
def test_generated_yaml_validates_and_round_trips(tmp_path):
    at = fill_essentials(new_app(), tmp_path)
    at.radio(key="_page_mode").set_value("Expert Mode").run()
    at.number_input(key="sync_offset").set_value(1).run()
    at.selectbox(key="policy_loss_fn").set_value("opmd").run()
    at.button(key="_add_eval_taskset").click().run()
    at.text_input(key="eval_taskset_0_path").input(ARITHMETIC).run()
    text = generate(at)
    path = tmp_path / "studio.yaml"
    path.write_text(text)
    config, _ = validate_config(str(path))  # what trinity-launch does with the file
    assert config.synchronizer.sync_offset == 1
    assert config.algorithm.policy_loss_fn == "opmd"
    assert config.buffer.explorer_input.eval_tasksets[0].path == ARITHMETIC

    again = new_app()
    again.session_state["_yaml_to_load"] = text
    again.run()
    assert errors(again) == []
    assert again.session_state["sync_offset"] == 1
    assert again.session_state["policy_loss_fn"] == "opmd"
    assert again.session_state["_eval_tasksets_num"] == 1
    assert generate(again) == text


def test_colocate_is_offered_with_its_explorer_trainer_and_offset_rule(tmp_path):
    """Mode colocate: offered in the mode list, keeps the explorer, synchronizer and trainer
    settings, gives the trainer every GPU, and the launcher's refusal of ``sync_offset > 0``
    shows in the page; the generated YAML validates."""
    at = fill_essentials(new_app(), tmp_path)
    at.radio(key="_page_mode").set_value("Expert Mode").run()
    assert "colocate" in at.selectbox(key="mode").options
    at.selectbox(key="mode").set_value("colocate").run()
    assert not at.exception, at.exception
    assert "Explorer and Synchronizer" in [t.label for t in at.tabs]
    for key in ("engine_num", "sync_method", "policy_loss_fn"):
        assert key in keys_of(at.main), key
    state = at.session_state
    assert state["trainer_gpu_num"] == state["gpu_per_node"] * state["node_num"]
    at.number_input(key="sync_offset").set_value(1).run()
    assert any("synchronous by construction" in e for e in errors(at)), errors(at)
    at.number_input(key="sync_offset").set_value(0).run()
    path = tmp_path / "studio.yaml"
    path.write_text(generate(at))
    config, _ = validate_config(str(path))
    assert config.mode == "colocate" and config.synchronizer.sync_offset == 0


def test_quickstart_loads_edits_and_keeps_its_meaning(tmp_path, monkeypatch):
    monkeypatch.delenv("TRINITY_CHECKPOINT_ROOT_DIR", raising=False)
    from stand_in_model import stand_in_model

    # scripts/quickstart.sh builds the model before it launches (a fresh checkout has none, and
    # validation refuses a missing one): a stand-in, through the variable the config reads
    monkeypatch.setenv("TRINITY_QUICKSTART_MODEL", stand_in_model(tmp_path / "tiny-model"))
    source = REPO / "examples" / "quickstart.yaml"
    at = new_app()
    at.session_state["_yaml_to_load"] = source.read_text()
    at.run()
    assert errors(at) == []
    assert at.session_state["algorithm_type"] == "grpo"
    assert at.session_state["repeat_times"] == 8
    assert at.session_state["gpu_per_node"] == 0
    text = generate(at)
    assert "${oc.env:TRINITY_CHECKPOINT_ROOT_DIR" in text  # interpolations are kept as written
    assert load_config(yaml.safe_load(text)) == load_config(str(source))

    # edit one value: only that value changes
    at.number_input(key="sync_interval").set_value(2).run()
    edited = load_config(yaml.safe_load(generate(at)))
    expected = yaml.safe_load(source.read_text())
    expected["synchronizer"]["sync_interval"] = 2
    assert edited == load_config(expected)


def test_bad_pasted_yaml_is_refused_without_changing_the_page():
    at = new_app()
    at.text_area(key="_pasted_yaml").input("model: [unclosed").run()
    at.button(key="_load_pasted").click().run()
    assert not at.exception, at.exception
    sidebar_errors = [e.value for e in at.sidebar.error]
    assert any("YAML syntax error" in e and "line" in e for e in sidebar_errors), sidebar_errors
    assert at.session_state["model_path"] == ""

    at.text_area(key="_pasted_yaml").input("- just\n- a list\n").run()
    at.button(key="_load_pasted").click().run()
    assert any("must be a mapping" in e.value for e in at.sidebar.error)


def test_pasted_yaml_loads_into_the_page(tmp_path):
    at = new_app()
    text = yaml.safe_dump(
        {
            "mode": "explore",
            "model": {"model_path": str(tmp_path / "model"), "max_model_len": 64},
            "algorithm": {"algorithm_type": "grpo", "repeat_times": 4},
            "buffer": {"batch_size": 3, "explorer_input": {"taskset": {"path": ARITHMETIC}}},
            "checkpoint_root_dir": str(tmp_path),
            "explorer": {"rollout_model": {"temperature": 1}},
        }
    )
    at.text_area(key="_pasted_yaml").input(text).run()
    at.button(key="_load_pasted").click().run()
    assert not at.exception, at.exception
    assert at.session_state["mode"] == "explore"
    assert at.session_state["model_path"] == str(tmp_path / "model")
    assert at.session_state["explore_batch_size"] == 3
    assert at.session_state["repeat_times"] == 4
    config = yaml.safe_load(generate(at))
    assert config["explorer"]["rollout_model"]["temperature"] == 1  # kept though not on the page


# ---------------------------------------------------------------------- running
@pytest.mark.slow
def test_launch_runs_trinity_launch_on_the_generated_config(tmp_path):
    at = fill_essentials(new_app(), tmp_path)
    at.number_input(key="gpu_per_node").set_value(0).run()
    generate(at)
    at.button(key="_launch_run").click().run()
    assert not at.exception, at.exception
    process = at.session_state["_run_process"]
    job_dir = at.session_state["_generated_config"].checkpoint_job_dir
    config_path = Path(job_dir) / "studio" / "config.yaml"
    assert config_path.read_text() == at.session_state["_generated_yaml"]
    log = Path(job_dir) / "studio" / "launch.log"
    deadline = time.time() + 120
    while "Config OK" not in (log.read_text() if log.exists() else "") and time.time() < deadline:
        if process.poll() is not None:
            break
        time.sleep(0.5)
    text = log.read_text()
    if process.poll() is None:
        from trinity.manager.config_manager import stop_run

        stop_run(process)
    assert process.poll() is not None
    assert "Config OK: mode=both" in text, text


def test_run_directory_metrics_show_the_reward_curve(tmp_path):
    from trinity.launcher.progress import JsonlMonitor

    run_dir = tmp_path / "run"
    monitor = JsonlMonitor(run_dir / "metrics.jsonl")
    for step in range(1, 6):
        monitor.log({"rollout/reward/mean": step / 10, "rollout/reward/std": 0.1}, step)
    monitor.close()
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write('{"step": 6, "rollout/rew')  # a line being written right now
    at = new_app()
    at.text_input(key="_run_dir").input(str(run_dir)).run()
    assert not at.exception, at.exception
    assert any("5 step(s)" in c.value for c in at.caption)
    charts = at.get("arrow_vega_lite_chart") or at.get("vega_lite_chart")
    assert charts, [n.type for n in at.main.children.values()]
    frame = at.dataframe[0].value
    assert list(frame["step"]) == [1, 2, 3, 4, 5]
    assert os.path.basename(at.session_state["_run_dir"]) == "run"
