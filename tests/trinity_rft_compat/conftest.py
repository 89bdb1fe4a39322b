"""Run Trinity-RFT's own CPU unit tests, unmodified, against our packages.

The files under ``upstream/`` are Trinity-RFT's (see README.md and ``fetch_upstream.py``);
pytest collects them as they are (``*_test.py``, ``unittest.TestCase``), run from an emulated
Trinity-RFT checkout with the variables its CI sets (see ``_trinity_rft_root``). This hook
marks the tests whose failure is a difference ``docs/compat.md`` documents as strict ``xfail``
with that reason and the exception they must fail with: a fix or a different failure shows up
as an error instead of hiding behind the mark. Every other upstream test must pass.

Out of scope (not vendored: they need a GPU, a model hub or a running cluster): see
README.md. A vendored test that cannot run here is in :data:`OUT_OF_SCOPE` and skipped with
its reason; a vendored file that imports a module documented as missing is in
:data:`DOCUMENTED_MISSING_FILES`, and one whose test-only import (Trinity-RFT's ``dev`` extra)
is missing is in :data:`NEEDS_MODULE`: neither is collected (the report header says so).
"""

from __future__ import annotations

import ast
import contextlib
import os
import sys
import tempfile
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from trinity.common.config import ConfigError
from trinity.common.experience import InvalidExperienceError

UPSTREAM = Path(__file__).resolve().parent / "upstream"


def _upstream_as_tests_package() -> None:
    """Make ``tests.*`` resolve under ``upstream/`` first.

    Trinity-RFT's tests import their shared helpers as ``tests.tools`` (and plugins as
    ``tests.utils.plugins``) from its repository root; here those files sit under
    ``upstream/`` (same relative paths), so ``tests`` becomes a package searched in
    ``upstream/`` first, then in this repository's ``tests/``. verl's wheel installs a
    top-level ``tests`` package into site-packages; one already imported keeps its path last.
    """
    if not UPSTREAM.is_dir():
        return
    pkg = sys.modules.get("tests")
    if pkg is None:
        pkg = types.ModuleType("tests")
        sys.modules["tests"] = pkg
    first = [str(UPSTREAM), str(UPSTREAM.parent.parent)]
    rest = [p for p in list(getattr(pkg, "__path__", None) or []) if p not in first]
    pkg.__path__ = [*first, *rest]


_upstream_as_tests_package()

#: Trinity-RFT's CI model is Qwen3-0.6B (its docker-compose's ``TRINITY_MODEL_PATH``); the
#: stand-in is our tiny Qwen2 with that model's context length (40960 positions), so the
#: template config's ``max_model_len: 4096`` fits it as it fits the real one.
STAND_IN_POSITIONS = 40960


def _stand_in_model() -> str:
    """A tiny random Qwen2 (byte-level BPE, Qwen2.5's chat template) built locally, no hub.

    Built once into the temp directory and reused (``build_tiny_model`` keeps a directory
    built from the same spec).
    """
    from trinity.launcher.tiny_model import TinyModelSpec, build_tiny_model

    path = Path(tempfile.gettempdir()) / "trinity-rft-compat" / "tiny-qwen2-40960"
    build_tiny_model(path, TinyModelSpec(max_position_embeddings=STAND_IN_POSITIONS))
    return str(path)


@pytest.fixture(scope="session")
def _trinity_rft_root(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """What Trinity-RFT's CI gives its tests, built here once per session.

    Its unit tests run from the repository root (the compose file's ``working_dir``), reading
    ``tests/template/...`` relative to it and writing run directories under it (an empty
    ``checkpoint_root_dir`` is the current directory); the models and the checkpoint root come
    from environment variables (``TRINITY_MODEL_PATH``, ``TRINITY_CHECKPOINT_ROOT_DIR``). Here
    the root is a temporary directory whose ``tests`` is ``upstream/``, the model a local
    stand-in, the checkpoint root a temporary directory; variables already set are kept.
    """
    root = tmp_path_factory.mktemp("trinity-rft-root")
    (root / "tests").symlink_to(UPSTREAM, target_is_directory=True)
    env = {
        "TRINITY_MODEL_PATH": os.environ.get("TRINITY_MODEL_PATH") or _stand_in_model(),
        "TRINITY_CHECKPOINT_ROOT_DIR": os.environ.get("TRINITY_CHECKPOINT_ROOT_DIR")
        or str(tmp_path_factory.mktemp("checkpoints")),
    }
    return {"root": str(root), **env}


#: Upstream files that share one file (Trinity-RFT's CI runs its tests one at a time):
#: ``buffer/sql_test.py`` and ``buffer/task_storage_test.py`` both use ``buffer/test.db`` and
#: delete it in their tear-down. Under pytest-xdist they would run at once on two workers
#: (SQLite then fails with "disk I/O error"), so a file lock makes them take turns, and each
#: closes its process's SQL engines before handing over: a pooled connection left open on the
#: deleted file keeps its ``-wal`` / ``-shm`` files, which the next database of that name
#: would then open as its own (the same "disk I/O error").
SHARED_FILES = {
    "buffer/sql_test.py": "buffer/test.db",
    "buffer/task_storage_test.py": "buffer/test.db",
}


@contextlib.contextmanager
def _turn_for(module: Path) -> Iterator[None]:
    shared = SHARED_FILES.get(module.relative_to(UPSTREAM).as_posix())
    if shared is None:
        yield
        return
    from filelock import FileLock

    lock = Path(tempfile.gettempdir()) / "trinity-rft-compat" / (shared.replace("/", "_") + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(lock)):
        try:
            yield
        finally:
            from trinity.buffer.storage.sql import _close_all_engines

            _close_all_engines()


@pytest.fixture(scope="module", autouse=True)
def _as_in_trinity_rft_ci(request: pytest.FixtureRequest) -> Iterator[None]:
    """Run each upstream module from the emulated repository root with CI's variables.

    Ray workers import what a test sends them by module name: the test module itself
    (``upstream.utils.log_test``: pytest names it from ``upstream/``'s package files, which are
    Trinity-RFT's ``tests/**/__init__.py``) and the helpers it names (``tests.utils.plugins...``).
    So the workers get ``PYTHONPATH`` with the emulated root first (``tests`` there is
    Trinity-RFT's package, not verl's) and this directory (for ``upstream``).
    """
    module = Path(str(request.path)).resolve()
    try:
        module.relative_to(UPSTREAM)
    except ValueError:
        yield
        return
    ci = request.getfixturevalue("_trinity_rft_root")
    paths = [ci["root"], str(UPSTREAM.parent), os.environ.get("PYTHONPATH", "")]
    with pytest.MonkeyPatch.context() as mp:
        for name, value in ci.items():
            if name != "root":
                mp.setenv(name, value)
        mp.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
        mp.chdir(ci["root"])
        with _turn_for(module):
            yield


_DOC = " docs/compat.md"


def _why(*parts: str) -> str:
    return " ".join(parts) + _DOC


_D5 = _why(
    "It builds Experience(...) with a one-entry logprobs for a response of several tokens.",
    "Per-token fields cover the response (or the whole sequence) here and any other length is",
    "refused (D5, InvalidExperienceError); Trinity-RFT stores it unchecked.",
)
_LAYOUT = _why(
    "Experience keeps per-token fields over the response only: a full-length action_mask /",
    "logprobs is accepted and trimmed to its response part, so it does not compare equal to",
    "the full-length input (D5).",
)
_UPSTREAM_06 = "Not ours: it fails against Trinity-RFT 0.6.0 as well. This 0.5.2 test expects "

#: test node id suffix -> (reason, exception the test must fail with)
DOCUMENTED_DIFFERENCES: dict[str, tuple[str, type[BaseException]]] = {
    # --- algorithm/policy_loss_test.py
    "algorithm/policy_loss_test.py::VerlPolicyLossTest::test_mix_policy_loss": (
        _why(
            "MIX weights each part by its own mean where Trinity-RFT's bare defaults",
            "(train_batch_size_usual/expert=1) multiply it by the part's row count; pass 1 for",
            "both to reproduce (D2, test_documented_differences.py).",
        ),
        AssertionError,
    ),
    "algorithm/policy_loss_test.py::VerlPolicyLossTest::test_dpo_policy_loss": (
        _why(
            "Trinity-RFT's DPOLossFn sums log-ratios over all chosen / all rejected rows of",
            "the batch (one 'pair' per batch, so an odd batch passes); ours is per-pair DPO and",
            "refuses the test's odd batch of 5 (D3); sum_pairs_over_batch=True reproduces it.",
        ),
        ValueError,
    ),
    "algorithm/policy_loss_test.py::VerlPolicyLossTest::test_sapo_policy_loss": (
        _why(
            "SAPO follows the paper (-gate(ratio) * A); Trinity-RFT computes another surrogate",
            "(D4); trinity_rft_surrogate=True reproduces its numbers.",
        ),
        AssertionError,
    ),
    # --- common/experience_test.py
    "common/experience_test.py::TestExperience::test_multi_turn_experience": (
        _LAYOUT,
        AssertionError,
    ),
    "common/experience_test.py::TestExperienceConversion::"
    "test_experience_model_experience_conversion": (_LAYOUT, AssertionError),
    "common/experience_test.py::TestExperience::test_deserialize_legacy_pickle_payload": (
        _why(
            "Experience.deserialize reads only its own pickle-free format; a pickled Experience",
            "(Trinity-RFT's older payload) is refused, as unpickling can run code (D12).",
        ),
        ValueError,
    ),
    # --- common/models/utils_test.py: the helper's return value changed in 0.6
    **{
        f"common/models/utils_test.py::TestTokenizeAndMaskMessagesDefault::test_{name}": (
            _UPSTREAM_06 + "(token_ids, assistant_mask, prompt_length) where 0.6's (and our) "
            "tokenize_and_mask_messages_default return a dict of input_ids / assistant_masks; "
            "its token counts are also Qwen3-0.6B's tokenizer's." + _DOC,
            ValueError,
        )
        for name in (
            "normal_conversation_data",
            "no_assistant_messages",
            "first_message_is_assistant",
        )
    },
    # --- cli/launcher_test.py
    "cli/launcher_test.py::TestLauncherMain::test_main_run_command": (
        _why(
            "Its template config runs in modes train and bench without what those modes read",
            "(no buffer.trainer_input.experience_buffer / train_batch_size; no",
            "eval_tasksets): run checks every config up front, before Ray or the mode",
            "function (here mocked) starts, and refuses a config no run can use (exit 2);",
            "Trinity-RFT's check_and_update accepts it and the mode fails later.",
        ),
        AssertionError,
    ),
    "cli/launcher_test.py::TestLauncherMain::test_main_run_in_dlc": (
        _why(
            "It sets log.group_by_node: true, which is refused here as not supported yet",
            "(docs/compat.md field table), so run exits 2 before the DLC set-up it checks.",
        ),
        AssertionError,
    ),
    "cli/launcher_test.py::TestLauncherMain::test_multi_stage_run": (
        _why(
            "Its second stage starts from the mocked weights path /path/to/hf/checkpoint,",
            "which the up-front check of each stage refuses as missing (D13); past it the",
            "test reads trainer.trainer_config.actor_rollout_ref.model.path, which the verl view",
            "of trainer_config answers with the stage's model path (D11). The stages'",
            "ray.init calls, namespaces and model paths it checks first are Trinity-RFT's",
            "(test_cli_launcher_compat.py runs them with real weights).",
        ),
        AssertionError,
    ),
    # --- common/config_test.py
    "common/config_test.py::TestConfig::test_load_default_config": (
        _why(
            "Its model paths are hub ids (Qwen/Qwen3-1.7B, Qwen/Qwen3-32B) that are not on this",
            "machine: the run checks refuse them unless TRINITY_ALLOW_HUB_MODELS=1 (D13). Past",
            "that, trainer_config's verl view shows the trainer's ranks on this machine: its",
            "8 GPUs on CUDA, one CPU rank without CUDA (n_gpus_per_node 1, not 8; D11).",
        ),
        ConfigError,
    ),
    "common/config_test.py::TestConfig::test_optimizer_config_propagation": (
        _why(
            "trainer_config's verl view shows the settings this trainer runs with (D11): verl's",
            "FSDP warm-up starts from 0 (lr_warmup_init 0.0, not 1e-6), and the critic's",
            "optimizer takes the policy's values its section leaves out (weight_decay 0.05,",
            "clip_grad 2.0, cosine; verl's defaults: 0.01, 1.0, constant).",
        ),
        AssertionError,
    ),
    # --- buffer
    **{
        f"buffer/sql_test.py::TestSQLBuffer::test_sql_exp_buffer_read_write_{i}": (
            _D5,
            InvalidExperienceError,
        )
        for i in (0, 1)  # parameterized: enable_replay True / False
    },
    **{
        f"buffer/experience_storage_test.py::ExperienceStorageTest::test_sql_storage_{i}": (
            _D5,
            InvalidExperienceError,
        )
        for i in ("0_sft", "1_dpo")
    },
    "buffer/file_test.py::TestFileBuffer::test_file_writer": (
        _why(
            "A file storage here holds experiences (it refuses the test's plain dicts), and is",
            "opened in each process rather than served by the Ray actor 'json-<name>' (D9).",
        ),
        AttributeError,
    ),
    **{
        f"buffer/queue_test.py::TestQueueBuffer::test_queue_buffer_{i}": (
            _D5,
            InvalidExperienceError,
        )
        for i in ("0_queue", "1_priority_queue")
    },
    # --- explorer/workflow_test.py
    "explorer/workflow_test.py::TestWorkflowStateRecording::test_workflow_state_recording": (
        _UPSTREAM_06 + "ModelWrapper(engine) with no config, where 0.6's ModelWrapper(model, "
        "models, config, api_address) raises 'Model config must be provided.' without one. "
        "Here ModelWrapper is the contract an engine implements (D15), so it is not built "
        "around the test's MagicMock either.",
        TypeError,
    ),
    **{
        f"explorer/workflow_test.py::TestWorkflowRunner::test_workflow_runner{suffix}": (
            _UPSTREAM_06 + "WorkflowRunner(config, model=..., auxiliary_models=...) and (status, "
            "experiences) from run_task, where 0.6's runner takes engine ids and returns "
            "(Status, bytes). Trinity-RFT's runner actor is not reimplemented here: "
            "WorkflowRunner raises NotImplementedError." + _DOC,
            NotImplementedError,
        )
        for suffix in ("", "_get_state")
    },
}

#: upstream files none of whose tests passes against Trinity-RFT 0.6.0 itself (0.6 removed
#: what they import or patch), so their tests do not count among the 155 that 0.6.0 passes
FAILS_ON_06_FILES: dict[str, str] = {
    "cli/launcher_test.py": (
        "imports trinity.common.models.get_debug_explorer_model and patches "
        "trinity.trainer.verl.utils, both gone in 0.6"
    ),
    "explorer/proxy_test.py": "calls 0.6's async HistoryRecorder synchronously",
}

#: documented differences run as subtests, some of which pass (a strict mark would fail those)
NON_STRICT: set[str] = set()

#: test node id suffix -> reason it cannot run here (GPU, model hub, cluster).
OUT_OF_SCOPE: dict[str, str] = {
    "buffer/formatter_test.py::TestFormatter::test_multi_modal_sft_formatter": (
        "Needs a vision-language model (TRINITY_VLM_MODEL_PATH, Qwen3.5-0.8B in Trinity-RFT's "
        "CI) and its processor: a model-hub download."
    ),
    "common/config_test.py::TestConfig::test_all_examples_are_valid": (
        "Reads every config of Trinity-RFT's examples/ directory (not vendored; "
        "test_upstream_examples.py checks the pinned example configs), most of which name "
        "hub models."
    ),
    "common/config_test.py::TestConfig::test_update_config_from_ray_cluster": (
        "Reads node_num / gpu_per_node from a running Ray cluster of 2 nodes with 2 GPUs each "
        "(Trinity-RFT's CI cluster)."
    ),
    **{
        f"explorer/workflow_test.py::MultiTurnWorkflowTest_{i}::test_multi_turn_workflow": (
            "Starts vLLM engines (create_explorer_models) and wraps them as Trinity-RFT's "
            "ModelWrapper(engine): GPU."
        )
        for i in (0, 1)
    },
    "explorer/workflow_test.py::TestWorkflowRunner::test_workflow_with_openai": (
        "Starts a vLLM engine with its OpenAI server and drives it through Trinity-RFT's "
        "runner actor: GPU."
    ),
    "explorer/workflow_test.py::TestConcurrentWorkflowRunner::test_concurrent_workflow_runner": (
        "Starts vLLM engines and Trinity-RFT's runner actors: GPU."
    ),
    "cli/launcher_test.py::TestLauncherMain::test_debug_mode": (
        "Starts a vLLM engine through Trinity-RFT's debug inference-model server (GPU in its "
        "CI); our trinity debug is covered by packages/trinity-launcher/tests."
    ),
}

#: upstream file -> why it is not collected: it imports at module level a Trinity-RFT module
#: this implementation documents as missing, so none of its tests can run (each counts as a
#: documented difference; the report header lists them with their test counts)
DOCUMENTED_MISSING_FILES: dict[str, str] = {
    "explorer/proxy_test.py": (
        "imports trinity.explorer.proxy.recorder (Trinity-RFT's serve-mode history recorder; "
        "mode serve here records in trinity.launcher.serve.recorder). Not ours either: it calls "
        "HistoryRecorder synchronously, where 0.6.0's methods are async"
    ),
}

#: upstream file -> the test-only module it imports that this environment may lack
#: (Trinity-RFT's ``dev`` extra); without it the file is not collected (see the report header)
NEEDS_MODULE: dict[str, str] = {
    local: "parameterized"
    for local in (
        "buffer/experience_storage_test.py",
        "buffer/queue_test.py",
        "buffer/sample_strategy_test.py",
        "buffer/sql_test.py",
        "buffer/task_scheduler_test.py",
        "buffer/task_storage_test.py",
        "explorer/step_wise_workflow_test.py",
        "explorer/workflow_test.py",
        "utils/plugin_test.py",
    )
}


def _missing(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return True
    return False


_NEEDS = [
    local
    for local, module in NEEDS_MODULE.items()
    if (UPSTREAM / local).exists() and _missing(module)
]
_MISSING_FILES = [local for local in DOCUMENTED_MISSING_FILES if (UPSTREAM / local).exists()]
collect_ignore = [str(Path("upstream") / local) for local in [*_NEEDS, *_MISSING_FILES]]


def count_tests(local: str) -> int:
    """Test methods / functions of an upstream file, counted from its source (``parameterized``
    cases counted as one each), for files that are not collected."""
    tree = ast.parse((UPSTREAM / local).read_text(encoding="utf-8"))
    count = 0
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith(
            "test"
        ):
            cases = 1
            for deco in node.decorator_list:
                call = deco if isinstance(deco, ast.Call) else None
                if call and getattr(call.func, "attr", "") == "expand" and call.args:
                    arg = call.args[0]
                    cases = len(arg.elts) if isinstance(arg, (ast.List, ast.Tuple)) else cases
            count += cases
    return count


def pytest_report_header(config: pytest.Config) -> list[str]:
    lines = [
        f"trinity_rft_compat: upstream/{local} not collected: needs {NEEDS_MODULE[local]!r} "
        "(a dev extra)"
        for local in _NEEDS
    ]
    lines += [
        f"trinity_rft_compat: upstream/{local} not collected ({count_tests(local)} tests, "
        f"documented differences): it {DOCUMENTED_MISSING_FILES[local]}"
        for local in _MISSING_FILES
    ]
    return lines


def _upstream_id(item: pytest.Item) -> str | None:
    path = Path(str(item.path)).resolve()
    try:
        rel = path.relative_to(UPSTREAM)
    except ValueError:
        return None
    return "::".join([rel.as_posix(), *item.nodeid.split("::")[1:]])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        node = _upstream_id(item)
        if node is None:
            continue
        if node in OUT_OF_SCOPE:
            item.add_marker(pytest.mark.skip(reason=OUT_OF_SCOPE[node]))
        elif node in DOCUMENTED_DIFFERENCES:
            reason, raises = DOCUMENTED_DIFFERENCES[node]
            strict = node not in NON_STRICT
            item.add_marker(pytest.mark.xfail(reason=reason, raises=raises, strict=strict))
