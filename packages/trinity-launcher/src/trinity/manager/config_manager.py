"""Trinity Studio: build a run config step by step, validate it, write it, run it.

Run it with ``trinity studio`` (or ``streamlit run`` on this file). The page has a Beginner mode
("Essential Configs", "Important Configs") and an Expert mode ("Model", "Buffer", "Explorer and
Synchronizer", "Trainer"), as in the developer guide. Entries are drawn with
``self.get_configs(...)`` from :data:`CONFIG_GENERATORS`; ``generate_config`` places their
session-state values in the YAML. Every rerun validates the would-be YAML with the launcher's
own checks (:func:`trinity.launcher.validation.validate_config`), and the page emits a YAML only
when there is no problem. A problem is shown under its field once the field was edited (its
value differs from the one the page opened with), or everywhere once the user asked for the
config (the Generate Config button) or loaded a YAML: a fresh page, whose required fields are
simply still empty, shows no errors.
"""

from __future__ import annotations

import copy
import re
from typing import Any, Optional

import streamlit as st

from trinity.algorithm.resolve import COMPONENT_FIELDS
from trinity.manager.config_io import (
    YAMLLoadError,
    key_for_path,
    normalize_path,
    parse_yaml,
    pop_path,
    set_path,
    to_yaml,
    validate,
)
from trinity.manager.config_loading import (
    EVAL_TASKSETS_PATH,
    OPERATORS_PATH,
    load_into_page,
)
from trinity.manager.config_registry import CONFIG_GENERATORS
from trinity.manager.config_registry._common import run_mode
from trinity.manager.config_registry.algorithm_config_manager import (
    apply_algorithm_type_defaults,
    component_args_editor,
    is_offline,
    parse_component_args,
    resolved_defaults,
)
from trinity.manager.config_registry.buffer_config_manager import (
    _OFFLINE_KEYS,
    _TASKSET_ARGS,
    EVAL_TASKSET_KEYS,
)
from trinity.manager.config_registry.model_config_manager import set_trainer_gpu_num
from trinity.manager.run_control import (  # noqa: F401 - re-exported
    _draw_metrics,
    launch_run,
    show_metrics,
    stop_run,
    tail,
)

PAGE_MODES = ("Beginner Mode", "Expert Mode")
# Entries drawn by a composite entry (taskset_args, offline_dataset_args, ...), not on their own.
_COMPOSITE_PARTS = set(_TASKSET_ARGS) | set(_OFFLINE_KEYS) | {"trainer_gpu_num_display"}

#: session-state key: YAML text waiting to be loaded into the page at the next run
LOAD_REQUEST_KEY = "_yaml_to_load"
#: session-state keys: every problem is shown (set by Generate Config and by loading a YAML);
#: the entries' values when the page opened; the entries edited since
SHOW_ALL_ISSUES_KEY = "_show_all_issues"
BASELINE_KEY = "_baseline_values"
TOUCHED_KEY = "_touched_fields"
_EMPTY = (None, "")


def _load_plugins_once() -> None:
    """Import plugin directories (``TRINITY_PLUGIN_DIRS``) so their registrations show."""
    if st.session_state.get("_plugins_loaded"):
        return
    from trinity.utils.plugin_loader import load_plugins

    try:
        load_plugins()
    except Exception as exc:  # shown, not fatal: the page still builds configs
        st.session_state["_plugin_error"] = str(exc)
    st.session_state["_plugins_loaded"] = True


class ConfigManager:
    """The Studio page. Instantiating it draws the page for one Streamlit script run."""

    def __init__(self) -> None:
        st.set_page_config(page_title="Trinity Studio", page_icon=":robot_face:", layout="wide")
        if "_init_config_manager" not in st.session_state:
            self.reset_session_state()
        _load_plugins_once()
        self.unfinished_fields: set[str] = set()
        CONFIG_GENERATORS.start_run(self.unfinished_fields)
        st.title("Trinity Studio")
        st.caption("Build a run config step by step; download it or launch it with trinity-launch.")
        if st.session_state.get("_plugin_error"):
            st.error(f"Plugins failed to load: {st.session_state['_plugin_error']}")
        self.maintain_session_state()
        self.load_panel()
        mode = st.radio(
            "Select Mode",
            PAGE_MODES,
            key="_page_mode",
            horizontal=True,
            label_visibility="collapsed",
        )
        if mode == "Beginner Mode":
            self.beginner_mode()
        else:
            self.expert_mode()
        if "config_generated" not in st.session_state:
            st.session_state.config_generated = False
        self.generate_config()
        self.run_panel()

    @staticmethod
    def run(port: int = 8501, address: str = "127.0.0.1") -> None:
        """Serve the Studio at ``address:port``: Trinity-RFT's entry point (its ``trinity
        studio`` calls it), the same server as our ``trinity studio``. This process becomes
        the Streamlit server; bad input (no Streamlit) exits with status 2."""
        from trinity.manager.studio import run_studio

        code = run_studio(port, address)
        if code:
            raise SystemExit(code)

    # ------------------------------------------------------------------ session state
    def reset_session_state(self) -> None:
        st.session_state["_init_config_manager"] = True
        for key, value in CONFIG_GENERATORS.default_config.items():
            st.session_state[key] = copy.deepcopy(value)
        st.session_state["_loaded_config"] = {}
        apply_algorithm_type_defaults()
        set_trainer_gpu_num()
        st.session_state[BASELINE_KEY] = {
            key: copy.deepcopy(st.session_state.get(key))
            for key in CONFIG_GENERATORS.default_config
        }
        st.session_state[TOUCHED_KEY] = set()
        st.session_state[SHOW_ALL_ISSUES_KEY] = False

    def maintain_session_state(self) -> None:
        """Keep values of widgets not drawn in this run (Streamlit drops those otherwise)."""
        st.session_state["_init_config_manager"] = True
        for key, value in CONFIG_GENERATORS.default_config.items():
            if key in st.session_state:
                st.session_state[key] = st.session_state[key]
            else:  # registered after this session started (a plugin)
                st.session_state[key] = copy.deepcopy(value)
        for idx in range(st.session_state["_eval_tasksets_num"]):
            for short in EVAL_TASKSET_KEYS:
                key = f"eval_taskset_{idx}_{short}"
                st.session_state[key] = st.session_state.get(key)
            st.session_state[f"_eval_taskset_{idx}_extra"] = st.session_state.get(
                f"_eval_taskset_{idx}_extra", {}
            )
        if LOAD_REQUEST_KEY in st.session_state:
            text = st.session_state.pop(LOAD_REQUEST_KEY)
            try:
                self.load_config_dict(parse_yaml(text))
                st.session_state["_load_message"] = ("success", "Config loaded into the page.")
                st.session_state[SHOW_ALL_ISSUES_KEY] = True  # the user's own config: check it
            except YAMLLoadError as exc:
                st.session_state["_load_message"] = ("error", str(exc))

    def get_configs(self, *config_names: str, columns_spec: Optional[list[int]] = None) -> None:
        CONFIG_GENERATORS.get_configs(*config_names, columns_spec=columns_spec)

    # ------------------------------------------------------------------ beginner mode
    def beginner_mode(self) -> None:
        st.header("Essential Configs")
        self.get_configs("project", "exp_name", "mode")
        self.get_configs("checkpoint_root_dir")
        self.get_configs("model_path")
        self.get_configs("algorithm_type", "repeat_times", "actor_lr")
        if is_offline():
            self.get_configs("experience_buffer_path")
            self.get_configs("offline_dataset_args")
        else:
            self.get_configs("taskset_path")
            self.get_configs("taskset_args")
            self.get_configs("default_workflow_type", "default_reward_fn_type")
        self.get_configs("node_num", "gpu_per_node", "trainer_gpu_num_display")

        st.header("Important Configs")
        self.get_configs("explore_batch_size", "train_batch_size", "total_epochs", "total_steps")
        self.get_configs("max_response_tokens", "max_model_len")
        self.get_configs("engine_type", "engine_num", "tensor_parallel_size", "dtype")
        self.get_configs("sync_method", "sync_style", "sync_interval", "sync_offset")
        self.get_configs("monitor_type", "log_level", "save_interval", "eval_interval")
        with st.expander("Eval Tasksets"):
            self.get_configs("eval_tasksets")

    # ------------------------------------------------------------------ expert mode
    def _expert_model_part(self) -> None:
        self.get_configs("project", "group", "exp_name", "mode")
        self.get_configs("checkpoint_root_dir")
        self.get_configs("model_path")
        self.get_configs("critic_model_path")
        self.get_configs("max_prompt_tokens", "max_response_tokens", "max_model_len")
        self.get_configs("monitor_type", "log_level")
        self.get_configs("node_num", "gpu_per_node", "trainer_gpu_num_display")

    def _expert_buffer_part(self) -> None:
        self.get_configs("total_epochs", "total_steps", "explore_batch_size", "train_batch_size")
        self.get_configs(
            "default_workflow_type", "default_eval_workflow_type", "default_reward_fn_type"
        )
        if is_offline():
            with st.expander("Offline Dataset Configs", expanded=True):
                self.get_configs("experience_buffer_path", "storage_type", columns_spec=[3, 1])
                self.get_configs("offline_dataset_args")
        else:
            with st.expander("Taskset Configs", expanded=True):
                self.get_configs("taskset_path")
                self.get_configs("taskset_args")
            with st.expander("Eval Tasksets Configs", expanded=True):
                self.get_configs("eval_tasksets")
            with st.expander("Experience Buffer Configs", expanded=True):
                self.get_configs("storage_type", "experience_buffer_path", columns_spec=[1, 3])
                self.get_configs("experience_operators")

    def _expert_explorer_part(self) -> None:
        self.get_configs(
            "sync_method", "sync_style", "sync_interval", "sync_offset", "sync_timeout"
        )
        self.get_configs(
            "runner_per_model",
            "tasks_per_runner",
            "eval_interval",
            "max_timeout",
            "explorer_max_retry_times",
        )
        with st.expander("Rollout Model Config", expanded=True):
            self.get_configs("engine_type", "engine_num", "tensor_parallel_size")
            self.get_configs("gpu_memory_utilization", "dtype", "seed")
            self.get_configs("enforce_eager", "enable_prefix_caching", "enable_chunked_prefill")
            self.get_configs("enable_history", "enable_openai_api", "enable_auto_tool_choice")
            self.get_configs("tool_call_parser", "reasoning_parser")

    def _expert_trainer_part(self) -> None:
        self.get_configs("algorithm_type", "repeat_times", "save_interval")
        self.get_configs("actor_lr", "lr_warmup_steps_ratio", "lr_scheduler_type")
        self.get_configs("policy_loss_fn", "advantage_fn", "sample_strategy")
        self.get_configs("kl_penalty_fn", "kl_loss_fn", "entropy_loss_fn")
        self.get_configs("loss_agg_mode")
        with st.expander("Advanced Algorithm Config"):
            for field in COMPONENT_FIELDS:
                component_args_editor(field)
        st.subheader("Trainer")
        self.get_configs("trainer_type", "trainer_strategy", "ulysses_sequence_parallel_size")
        self.get_configs("grad_clip", "use_dynamic_bsz", "max_token_len_per_gpu")
        self.get_configs("param_offload", "optimizer_offload", "critic_warmup")
        self.get_configs("save_hf_checkpoint", "max_checkpoints_to_keep")

    def _expert_other_part(self, names: list[str]) -> None:
        st.caption("Entries registered by plugins (CONFIG_GENERATORS) that no section draws.")
        for name in names:
            self.get_configs(name)

    def _other_entries(self) -> list[str]:
        drawn = {
            "project",
            "group",
            "exp_name",
            "mode",
            "checkpoint_root_dir",
            "model_path",
            "critic_model_path",
            "max_prompt_tokens",
            "max_response_tokens",
            "max_model_len",
            "monitor_type",
            "log_level",
            "node_num",
            "gpu_per_node",
            "total_epochs",
            "total_steps",
            "explore_batch_size",
            "train_batch_size",
            "default_workflow_type",
            "default_eval_workflow_type",
            "default_reward_fn_type",
            "experience_buffer_path",
            "storage_type",
            "offline_dataset_args",
            "taskset_path",
            "taskset_args",
            "eval_tasksets",
            "experience_operators",
            "sync_method",
            "sync_style",
            "sync_interval",
            "sync_offset",
            "sync_timeout",
            "runner_per_model",
            "tasks_per_runner",
            "eval_interval",
            "max_timeout",
            "explorer_max_retry_times",
            "engine_type",
            "engine_num",
            "tensor_parallel_size",
            "gpu_memory_utilization",
            "dtype",
            "seed",
            "enforce_eager",
            "enable_prefix_caching",
            "enable_chunked_prefill",
            "enable_history",
            "enable_openai_api",
            "enable_auto_tool_choice",
            "tool_call_parser",
            "reasoning_parser",
            "algorithm_type",
            "repeat_times",
            "save_interval",
            "actor_lr",
            "lr_warmup_steps_ratio",
            "lr_scheduler_type",
            "loss_agg_mode",
            "trainer_type",
            "trainer_strategy",
            "ulysses_sequence_parallel_size",
            "grad_clip",
            "use_dynamic_bsz",
            "max_token_len_per_gpu",
            "param_offload",
            "optimizer_offload",
            "critic_warmup",
            "save_hf_checkpoint",
            "max_checkpoints_to_keep",
            *COMPONENT_FIELDS,
        }
        names = [n for n in CONFIG_GENERATORS.modules if not n.startswith("check_")]
        return [
            n
            for n in names
            if n not in drawn and n not in _COMPOSITE_PARTS and CONFIG_GENERATORS.is_visible(n)
        ]

    def expert_mode(self) -> None:
        tab2func: dict[str, Any] = {
            "Model": self._expert_model_part,
            "Buffer": self._expert_buffer_part,
            "Explorer and Synchronizer": self._expert_explorer_part,
            "Trainer": self._expert_trainer_part,
        }
        if not run_mode().uses_rollout_engines:
            del tab2func["Explorer and Synchronizer"]
        others = self._other_entries()
        if others:
            tab2func["Other"] = lambda: self._expert_other_part(others)
        tabs = st.tabs(list(tab2func))
        for tab, func in zip(tabs, tab2func.values(), strict=False):
            with tab:
                func()

    # ------------------------------------------------------------------ YAML generation
    def _gen_entries(self, data: dict[str, Any]) -> None:
        """Write every visible entry that has a ``config_path`` into ``data``."""
        moved = st.session_state.get("_moved_paths") or {}
        for key, path in CONFIG_GENERATORS.config_paths.items():
            if not CONFIG_GENERATORS.is_visible(key):
                continue
            path = moved.get(key, path)
            value = st.session_state.get(key)
            if value is None or value == "":
                pop_path(data, path)  # cleared on the page: the schema default applies
            else:
                set_path(data, path, copy.deepcopy(value))

    def _gen_algorithm_config(self, data: dict[str, Any]) -> None:
        """Components, their arguments and loss_agg_mode, written only where they differ from
        the algorithm type's defaults (which ``trinity-launch`` fills in the same way)."""
        try:
            defaults = resolved_defaults()
        except Exception:  # unknown type: the schema check reports it
            return
        algorithm = data.setdefault("algorithm", {})
        for field in COMPONENT_FIELDS:
            name = st.session_state.get(field)
            if name != defaults[field]:
                algorithm[field] = name
            args = parse_component_args(field)
            if args is None or not isinstance(args, dict):
                self.unfinished_fields.add(f"{field}_args")
                continue
            try:
                expected = resolved_defaults(**{field: name})[f"{field}_args"]
            except Exception:
                expected = None
            if args != expected:
                algorithm[f"{field}_args"] = args
        if st.session_state.get("loss_agg_mode") != defaults["loss_agg_mode"]:
            algorithm["loss_agg_mode"] = st.session_state["loss_agg_mode"]

    def _gen_buffer_config(self, data: dict[str, Any]) -> None:
        if run_mode().uses_eval_tasksets:
            eval_sets = []
            for idx in range(st.session_state["_eval_tasksets_num"]):
                entry = copy.deepcopy(st.session_state.get(f"_eval_taskset_{idx}_extra") or {})
                for short, (path, _) in EVAL_TASKSET_KEYS.items():
                    value = st.session_state.get(f"eval_taskset_{idx}_{short}")
                    if value is not None and value != "":
                        set_path(entry, path, value)
                eval_sets.append(entry)
            if eval_sets:
                set_path(data, EVAL_TASKSETS_PATH, eval_sets)
            else:
                pop_path(data, EVAL_TASKSETS_PATH)
        if CONFIG_GENERATORS.is_visible("experience_operators"):
            args_text = st.session_state.get("experience_operator_args") or "{}"
            try:
                import yaml

                op_args = yaml.safe_load(args_text) or {}
            except Exception:
                op_args = None
            if not isinstance(op_args, dict):
                self.unfinished_fields.add("experience_operator_args")
                op_args = {}
            operators = [
                {"name": name, "args": op_args.get(name) or {}}
                for name in st.session_state.get("experience_operators") or []
            ]
            if operators:
                set_path(data, OPERATORS_PATH, operators)
            else:
                pop_path(data, OPERATORS_PATH)

    def build_config(self) -> dict[str, Any]:
        """The config the page describes: the loaded YAML with the page's values on top."""
        data = copy.deepcopy(st.session_state.get("_loaded_config") or {})
        self._gen_entries(data)
        self._gen_algorithm_config(data)
        self._gen_buffer_config(data)
        return data

    # ------------------------------------------------------------------ which problems show
    def _edited(self, key: str) -> bool:
        """Whether entry ``key`` holds another value than when the page opened (remembered:
        an entry cleared again stays edited, so its "required" error shows)."""
        touched = st.session_state.setdefault(TOUCHED_KEY, set())
        if key in touched:
            return True
        if key not in st.session_state:
            return False
        value = st.session_state[key]
        baseline = st.session_state.get(BASELINE_KEY) or {}
        start = baseline.get(key, CONFIG_GENERATORS.default_config.get(key))
        if value == start or (value in _EMPTY and start in _EMPTY):
            return False
        touched.add(key)
        return True

    def _shown(self, key: Optional[str]) -> bool:
        """Whether a problem of entry ``key`` is shown now; a problem of no entry (``None``)
        shows once any entry was edited."""
        if st.session_state.get(SHOW_ALL_ISSUES_KEY):
            return True
        if key is not None:
            return self._edited(key)
        return any(self._edited(k) for k in CONFIG_GENERATORS.default_config)

    def _show_issues(self, report: Any) -> list[str]:
        """Put each issue under its field (where :meth:`_shown`); return the shown messages
        that have no field on the page. ``self.hidden_issues`` counts those not shown."""
        paths = {**CONFIG_GENERATORS.config_paths, **(st.session_state.get("_moved_paths") or {})}
        for idx in range(st.session_state["_eval_tasksets_num"]):
            for short, (path, _) in EVAL_TASKSET_KEYS.items():
                paths[f"eval_taskset_{idx}_{short}"] = f"{EVAL_TASKSETS_PATH}.{idx}.{path}"
        for field in COMPONENT_FIELDS:
            paths[field] = f"algorithm.{field}"
            paths[f"{field}_args"] = f"algorithm.{field}_args"
        paths["experience_operators"] = OPERATORS_PATH
        unplaced = []
        by_key: dict[str, list[str]] = {}
        for issue in report.issues:
            key = key_for_path(issue.path, paths, CONFIG_GENERATORS.rendered)
            if key is None:  # a task set inherits the name from the explorer_input default
                inherited = re.sub(
                    r"^buffer\.explorer_input\.(taskset|eval_tasksets\.\d+)\."
                    r"(default_workflow_type|default_reward_fn_type)$",
                    lambda m: (
                        "buffer.explorer_input."
                        + (
                            "default_eval_workflow_type"
                            if m.group(1) != "taskset" and m.group(2) == "default_workflow_type"
                            else m.group(2)
                        )
                    ),
                    normalize_path(issue.path),
                )
                key = key_for_path(inherited, paths, CONFIG_GENERATORS.rendered)
                if key is None and inherited.endswith("default_eval_workflow_type"):
                    inherited = "buffer.explorer_input.default_workflow_type"
                    key = key_for_path(inherited, paths, CONFIG_GENERATORS.rendered)
            text = (
                f"{issue.message} (`{normalize_path(issue.path)}`)" if issue.path else issue.message
            )
            if not self._shown(key):
                self.hidden_issues += 1
            elif key is None:
                unplaced.append(text)
            else:
                by_key.setdefault(key, []).append(text)
        for key, messages in by_key.items():
            CONFIG_GENERATORS.placeholders[key].error("\n\n".join(messages))
        return unplaced

    def generate_config(self) -> None:
        """Validate what the page describes; offer the YAML only when it is valid."""
        data = self.build_config()
        report = validate(data)
        for key in (*CONFIG_GENERATORS.default_config, *CONFIG_GENERATORS.rendered):
            self._edited(key)  # remember every edit, also of fields without a problem now
        self.hidden_issues = 0
        unplaced = self._show_issues(report)
        st.session_state["_validation"] = report
        st.divider()
        for message in unplaced:
            st.error(message)
        for warning in report.warnings:
            st.info(warning)
        blocked = bool(self.unfinished_fields) or not report.ok
        shown = len(report.issues) - self.hidden_issues + len(self.unfinished_fields)
        help_message = None
        if blocked:
            st.session_state.config_generated = False
        if blocked and shown:
            help_message = (
                f"Fix the {shown} problem(s) shown above first"
                + (
                    f" (unfinished: `{'`, `'.join(sorted(self.unfinished_fields))}`)"
                    if self.unfinished_fields
                    else ""
                )
                + "."
            )
            st.warning(help_message)
        elif blocked:  # only problems of fields not edited yet (a fresh page): no alarm
            st.caption(
                "Fill in the fields above; Generate Config checks the whole config and shows "
                "what is still missing."
            )
        if st.button(
            "Generate Config",
            disabled=blocked and bool(shown),
            help=help_message,
            use_container_width=True,
            type="primary",
            key="_generate_config",
        ):
            st.session_state[SHOW_ALL_ISSUES_KEY] = True
            if blocked:  # asked for the config: show every problem, under its field
                st.rerun()
            st.session_state.config_generated = True
        if st.session_state.config_generated and not blocked:
            text = to_yaml(data)
            st.session_state["_generated_yaml"] = text
            st.session_state["_generated_config"] = report.config
            st.success("The config is valid.")
            st.code(text, language="yaml")
            file_name = f"{st.session_state.get('exp_name') or 'config'}.yaml"
            st.download_button(
                "Download Config",
                data=text,
                file_name=file_name,
                mime="application/x-yaml",
                key="_download_config",
                use_container_width=True,
            )

    # ------------------------------------------------------------------ loading a YAML
    def load_config_dict(self, data: dict[str, Any]) -> None:
        """Put a config (as parsed from YAML) into the page: :func:`load_into_page`."""
        load_into_page(data)

    def load_panel(self) -> None:
        """Sidebar: load a YAML file (or pasted text) into the page to edit it."""
        with st.sidebar:
            st.subheader("Load a config")
            uploaded = st.file_uploader("Config YAML", type=["yaml", "yml"], key="_upload")
            if uploaded is not None and st.session_state.get("_uploaded_id") != uploaded.file_id:
                st.session_state["_uploaded_id"] = uploaded.file_id
                self._load_text(uploaded.getvalue().decode("utf-8"), uploaded.name)
            st.text_area("...or paste YAML", key="_pasted_yaml", height=120)
            if st.button("Load pasted YAML", key="_load_pasted"):
                self._load_text(st.session_state.get("_pasted_yaml") or "", "the pasted YAML")
            message = st.session_state.pop("_load_message", None)
            if message:
                kind, text = message
                (st.success if kind == "success" else st.error)(text)
            for problem in st.session_state.get("_load_problems") or []:
                st.warning(problem)

    def _load_text(self, text: str, source: str) -> None:
        try:
            data = parse_yaml(text, source)
        except YAMLLoadError as exc:
            st.session_state["_load_message"] = ("error", str(exc))
            return
        # applied at the top of the next run, before any widget of those keys exists
        st.session_state[LOAD_REQUEST_KEY] = to_yaml(data)
        st.rerun()

    # ------------------------------------------------------------------ running
    def run_panel(self) -> None:
        """Launch the generated config with trinity-launch and follow its metrics."""
        st.header("Run")
        config = st.session_state.get("_generated_config")
        job_dir = getattr(config, "checkpoint_job_dir", "") if config is not None else ""
        process = st.session_state.get("_run_process")
        running = process is not None and process.poll() is None
        if st.session_state.config_generated and config is not None:
            if st.button("Launch Run", disabled=running, key="_launch_run"):
                process = launch_run(st.session_state["_generated_yaml"], job_dir)
                st.session_state["_run_process"] = process
                st.session_state["_run_dir"] = job_dir
                running = True
        if process is not None:
            log_path = getattr(process, "trinity_log_path", "")
            if running:
                st.info(f"Running (pid {process.pid}); output in `{log_path}`.")
                if st.button("Stop Run", key="_stop_run"):
                    stop_run(process)
            else:
                code = process.returncode
                (st.success if code == 0 else st.error)(f"The run exited with status {code}.")
            st.code(tail(log_path), language="text")
        if not st.session_state.get("_run_dir") and job_dir:
            st.session_state["_run_dir"] = job_dir
        st.text_input("Run directory (holds metrics.jsonl)", key="_run_dir")
        show_metrics(st.session_state.get("_run_dir") or "", live=running)


if __name__ == "__main__":
    ConfigManager()
