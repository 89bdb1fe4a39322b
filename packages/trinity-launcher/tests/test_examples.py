"""Every ``examples/*.yaml`` passes the validation ``trinity-launch`` runs before a run, says
what it is meant to run, and reads data that is in the repository.

* Each example goes through :func:`trinity.launcher.validation.validate_config` (plugins,
  schema, the algorithm type's defaults and checks, run-level checks, registry names; for a
  ``stages:`` config, every stage as its own run) -- the function ``trinity-launch`` and the
  Studio call -- and two of them through ``trinity-launch X --dry-run`` in a subprocess.
* Examples are collected from the directory, so a new example that does not validate fails
  here; one that is not described in ``EXPECTED`` fails too (say what it is meant to run).
* The GPU examples name a hub model (``Qwen/Qwen2.5-1.5B-Instruct``) that is not on this
  machine. Validation refuses a hub id that is neither a local directory nor in the Hugging
  Face cache unless ``TRINITY_ALLOW_HUB_MODELS=1`` says the run may download it (a GPU user
  downloads the model first, or sets it); here it is set, and validation must then not need
  the model (the subprocesses run with the hub offline and an empty Hugging Face cache).
  Without it, the same dry run is refused, naming the field and its line.
* Every data file an example reads lies in the repository and is read here by the reader its
  run uses (task-set reader, SFT / DPO formatter with a tokenizer), with the keys its
  ``format`` names; GSM8K-style answers ("#### N") score 1 with their workflow's reward.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from stand_in_model import stand_in_model

from trinity.algorithm import resolve_algorithm
from trinity.common.config import Config, ConfigError, StorageConfig, load_config
from trinity.launcher.validation import validate_config

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.yaml"))
BIN = Path(sys.executable).parent
HUB_MODEL = "Qwen/Qwen2.5-1.5B-Instruct"
#: lets validation accept a hub id that is not on this machine (the run would download it)
ALLOW_HUB_MODELS = "TRINITY_ALLOW_HUB_MODELS"
# Environment variables the examples interpolate; unset so the files' own defaults count.
EXAMPLE_ENV_VARS = (
    "TRINITY_MODEL_PATH",
    "TRINITY_CHECKPOINT_ROOT_DIR",
    "TRINITY_QUICKSTART_MODEL",
    "TRINITY_PLUGIN_DIRS",
)
# The one adjustment a GPU example may get on a machine without CUDA.
CPU_NCCL_FALLBACK = "CUDA is not available, so weights cannot be synchronised over NCCL"

pytestmark = pytest.mark.skipif(not EXAMPLE_FILES, reason="needs the repository checkout")


def _example_id(path: Path) -> str:
    return path.stem


class Validated:
    """One example after ``validate_config``: the config, its stages (or itself), warnings."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.config, self.type_warnings = validate_config(path)
        if self.config.stages:
            from trinity.algorithm import apply_algorithm_defaults

            self.runs = []
            for stage in self.config.iter_stages():
                stage = apply_algorithm_defaults(stage)
                stage.check_and_update()
                self.runs.append(stage)
        else:
            self.runs = [self.config]

    @property
    def warnings(self) -> list[str]:
        found = list(self.config.warnings) + list(self.type_warnings)
        for run in self.runs:
            if run is not self.config:
                found += run.warnings
        return found


@pytest.fixture(scope="module")
def validated(tmp_path_factory) -> Callable[[str], Validated]:
    """``validated("grpo_gsm8k")``: the example validated once per module, from the repository
    root (its paths are relative to it) with the interpolated variables unset -- but for the
    quickstart's model, which scripts/quickstart.sh builds before it launches (a stand-in
    here) -- and hub models allowed (the GPU examples' model is not on this machine)."""
    cache: dict[str, Validated] = {}
    stand_in = stand_in_model(tmp_path_factory.mktemp("quickstart") / "tiny-model")

    def get(stem: str) -> Validated:
        if stem not in cache:
            with pytest.MonkeyPatch.context() as mp:
                mp.chdir(REPO)
                for var in EXAMPLE_ENV_VARS:
                    mp.delenv(var, raising=False)
                mp.setenv("TRINITY_QUICKSTART_MODEL", stand_in)
                mp.setenv(ALLOW_HUB_MODELS, "1")
                cache[stem] = Validated(EXAMPLES / f"{stem}.yaml")
        return cache[stem]

    return get


# ---------------------------------------------------------------- what each example is for


def _gpu_node(run: Config, rollout_gpus: int) -> None:
    assert run.model.model_path == HUB_MODEL
    assert (run.cluster.node_num, run.cluster.gpu_per_node) == (1, 8)
    assert run.cluster.rollout_gpu_num == rollout_gpus
    assert run.cluster.trainer_gpu_num == 8 - rollout_gpus
    assert run.buffer.train_batch_size % run.cluster.trainer_gpu_num == 0


def _vllm_rollouts(run: Config) -> None:
    rollout = run.explorer.rollout_model
    assert (rollout.engine_type, rollout.engine_num, rollout.tensor_parallel_size) == (
        "vllm",
        2,
        1,
    )


def _math_tasksets(run: Config) -> None:
    explorer_input = run.buffer.explorer_input
    sets = [explorer_input.taskset, *explorer_input.eval_tasksets]
    assert explorer_input.taskset is not None and explorer_input.eval_tasksets
    for taskset in sets:
        assert taskset.path == "examples/data/gsm8k_sample"
        assert taskset.default_workflow_type == "math_workflow"
        assert (taskset.format.prompt_key, taskset.format.response_key) == ("question", "answer")
    assert explorer_input.taskset.split == "train"
    assert [t.split for t in explorer_input.eval_tasksets] == ["test"]


def expect_quickstart(v: Validated) -> None:
    # owned by the quickstart's own tests; here only what it is: CPU GRPO in mode both
    (run,) = v.runs
    assert (run.mode, run.algorithm.algorithm_type) == ("both", "grpo")
    assert run.cluster.gpu_per_node == 0


def expect_grpo_gsm8k(v: Validated) -> None:
    (run,) = v.runs
    assert (run.mode, run.algorithm.algorithm_type, run.algorithm.repeat_times) == (
        "both",
        "grpo",
        8,
    )
    _gpu_node(run, rollout_gpus=2)
    _vllm_rollouts(run)
    _math_tasksets(run)
    assert run.buffer.train_batch_size == run.buffer.batch_size * 8 == 768
    recipe = resolve_algorithm(run)
    assert (recipe.advantage_fn, recipe.policy_loss_fn) == ("grpo", "ppo")
    assert not recipe.use_critic and not recipe.compute_advantage_in_trainer
    assert run.synchronizer.sync_interval == 1 and run.synchronizer.sync_offset == 0


def expect_grpo_one_gpu(v: Validated) -> None:
    (run,) = v.runs
    assert (run.mode, run.algorithm.algorithm_type) == ("colocate", "grpo")
    assert run.model.model_path == "Qwen/Qwen2.5-0.5B-Instruct"
    # one GPU holds the engine and the trainer, which take turns on it
    assert (run.cluster.node_num, run.cluster.gpu_per_node) == (1, 1)
    assert (run.cluster.rollout_gpu_num, run.cluster.trainer_gpu_num) == (1, 1)
    rollout = run.explorer.rollout_model
    assert (rollout.engine_type, rollout.engine_num, rollout.tensor_parallel_size) == (
        "vllm",
        1,
        1,
    )
    _math_tasksets(run)
    sync = run.synchronizer
    assert (sync.sync_method, sync.sync_interval, sync.sync_offset) == ("memory", 1, 0)
    # the trainer leaves the GPU to the engine between steps
    assert run.trainer.param_offload and run.trainer.optimizer_offload


def expect_ppo_critic(v: Validated) -> None:
    (run,) = v.runs
    assert (run.mode, run.algorithm.algorithm_type) == ("both", "ppo")
    _gpu_node(run, rollout_gpus=2)
    _vllm_rollouts(run)
    _math_tasksets(run)
    recipe = resolve_algorithm(run)
    # a critic, and GAE advantages computed in the trainer from its values
    assert recipe.use_critic and recipe.compute_advantage_in_trainer
    assert recipe.advantage_fn == "ppo" and recipe.policy_loss_fn == "ppo"
    assert recipe.advantage_fn_args == {"gamma": 1.0, "lam": 1.0}
    # the critic settings of the schema: its model, warm-up, and verl's critic section
    assert run.model.critic_model_path == run.model.model_path == HUB_MODEL
    assert run.trainer.critic_warmup > 0
    critic = run.trainer.trainer_config["critic"]
    assert critic["optim"]["lr"] > 0 and critic["ppo_micro_batch_size_per_gpu"] > 0


def expect_opmd_offpolicy(v: Validated) -> None:
    from trinity.launcher.run.clock import required_version

    (run,) = v.runs
    assert (run.mode, run.algorithm.algorithm_type) == ("both", "opmd")
    _gpu_node(run, rollout_gpus=2)
    _vllm_rollouts(run)
    _math_tasksets(run)
    recipe = resolve_algorithm(run)
    assert (recipe.advantage_fn, recipe.policy_loss_fn) == ("opmd", "opmd")
    assert recipe.advantage_fn_args["opmd_baseline"] == "logavgexp"
    assert not recipe.use_critic and not recipe.compute_advantage_in_trainer
    sync = run.synchronizer
    assert sync.sync_interval > 1 and sync.sync_offset >= 1
    assert run.explorer.eval_interval % sync.sync_interval == 0
    # off-policy: train step e learns from a batch generated with the weights of step
    # required_version(e); with this schedule they lag by up to sync_interval steps
    lag = [e - 1 - required_version(e, sync.sync_interval, sync.sync_offset) for e in range(1, 50)]
    assert max(lag) == sync.sync_interval and min(lag) == 0


def expect_dpo(v: Validated) -> None:
    (run,) = v.runs
    assert (run.mode, run.algorithm.algorithm_type) == ("train", "dpo")
    _gpu_node(run, rollout_gpus=0)  # mode train: every GPU trains
    recipe = resolve_algorithm(run)
    assert recipe.schema == "dpo" and recipe.policy_loss_fn == "dpo"
    assert recipe.kl_loss_fn == "k1" and recipe.kl_loss_fn_args["kl_coef"] == 0.1
    assert run.buffer.train_batch_size == 64
    data = run.buffer.trainer_input.experience_buffer
    assert (data.storage_type, data.path, data.split) == (
        "file",
        "examples/data/dpo_sample",
        "train",
    )
    fmt = data.format
    assert (fmt.prompt_type, fmt.messages_key, fmt.chosen_key, fmt.rejected_key) == (
        "messages",
        "prompt",
        "chosen",
        "rejected",
    )
    assert run.synchronizer.sync_method == "checkpoint"
    assert run.buffer.explorer_input.taskset is None


def expect_sft_then_grpo(v: Validated) -> None:
    assert [s.stage_name for s in v.config.stages] == ["sft_warmup", "grpo"]
    sft, grpo = v.runs
    assert (sft.mode, sft.algorithm.algorithm_type) == ("train", "sft")
    _gpu_node(sft, rollout_gpus=0)
    assert resolve_algorithm(sft).schema == "sft"
    data = sft.buffer.trainer_input.experience_buffer
    assert (data.storage_type, data.path, data.split) == (
        "file",
        "examples/data/gsm8k_sample",
        "train",
    )
    assert (data.format.prompt_type, data.format.prompt_key, data.format.response_key) == (
        "plaintext",
        "question",
        "answer",
    )
    assert sft.buffer.train_batch_size == 64
    assert (grpo.mode, grpo.algorithm.algorithm_type, grpo.algorithm.repeat_times) == (
        "both",
        "grpo",
        8,
    )
    _gpu_node(grpo, rollout_gpus=2)
    _vllm_rollouts(grpo)
    _math_tasksets(grpo)
    # each stage runs in a directory of its own under the base run's
    base = os.path.normpath(REPO / v.config.get_checkpoint_job_dir())
    assert [r.checkpoint_job_dir for r in v.runs] == [f"{base}/sft_warmup", f"{base}/grpo"]


def expect_serve(v: Validated) -> None:
    (run,) = v.runs
    assert run.mode == "serve" and run.explorer.listen_address == "127.0.0.1"
    assert run.explorer.rollout_model.engine_type == "vllm"
    assert run.explorer.rollout_model.enable_openai_api  # the proxy forwards to it
    out = run.buffer.trainer_input.experience_buffer
    assert (out.name, out.storage_type) == ("served", "sql")
    assert run.synchronizer.sync_method == "checkpoint"


def expect_serve_train(v: Validated, validated: Callable[[str], Validated]) -> None:
    (run,) = v.runs
    serve = validated("serve_arithmetic").runs[0]
    assert (run.mode, run.algorithm.algorithm_type) == ("train", "grpo")
    # the service's job directory and buffer: the service loads the weights saved here
    assert run.checkpoint_job_dir == serve.checkpoint_job_dir
    data, served = run.buffer.trainer_input.experience_buffer, serve.buffer.trainer_input
    assert (data.name, data.storage_type, data.path) == (
        served.experience_buffer.name,
        "sql",
        served.experience_buffer.path,
    )
    assert run.trainer.save_hf_checkpoint == "always" and run.trainer.save_interval == 1


#: examples whose runs read no data file, and why
NO_DATA_FILE = {
    "serve_arithmetic": "its data is the agents' traffic",
    "serve_train_arithmetic": "it reads the SQL table serve_arithmetic writes",
}


EXPECTED: dict[str, Callable[[Validated], None]] = {
    "serve_arithmetic": expect_serve,
    "serve_train_arithmetic": expect_serve_train,  # type: ignore[dict-item]
    "quickstart": expect_quickstart,
    "grpo_gsm8k": expect_grpo_gsm8k,
    "grpo_one_gpu": expect_grpo_one_gpu,
    "ppo_critic": expect_ppo_critic,
    "opmd_offpolicy": expect_opmd_offpolicy,
    "dpo": expect_dpo,
    "sft_then_grpo": expect_sft_then_grpo,
}


def test_every_example_says_what_it_is_for():
    found = {p.stem for p in EXAMPLE_FILES}
    assert found == set(EXPECTED), (
        f"examples without an entry in EXPECTED (test_examples.py): {sorted(found - set(EXPECTED))}"
        f"; entries without an example: {sorted(set(EXPECTED) - found)}"
    )


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=_example_id)
def test_example_validates_and_is_what_it_says(path, validated):
    v = validated(path.stem)  # raises ConfigError / ValueError on an invalid example
    unexpected = [w for w in v.warnings if CPU_NCCL_FALLBACK not in w]
    assert not unexpected, f"{path.name} relies on the validator adjusting it: {unexpected}"
    if path.stem == "serve_train_arithmetic":  # checked against the service beside it
        expect_serve_train(v, validated)
    else:
        EXPECTED[path.stem](v)


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=_example_id)
def test_example_starts_with_a_comment_saying_what_and_where(path):
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("# "), f"{path.name} must start with a comment"
    header = []
    for line in lines:
        if not line.startswith("#"):
            break
        header.append(line)
    text = " ".join(header)
    assert re.search(r"\b(GPUs?|CPU)\b", text), f"{path.name}: say what hardware it runs on"
    assert "trinity-launch" in text or "quickstart.sh" in text, f"{path.name}: say how to run it"


# ---------------------------------------------------------------- the data the examples read


def _file_storages(run: Config) -> list[tuple[str, StorageConfig]]:
    explorer_input = run.buffer.explorer_input
    found: list[tuple[str, StorageConfig]] = []
    if run.mode in ("both", "colocate", "explore"):
        found += [("taskset", t) for t in explorer_input.get_tasksets()]
    if run.mode != "train":
        found += [("eval_taskset", t) for t in explorer_input.eval_tasksets]
    trainer_input = run.buffer.trainer_input
    if run.mode == "train" and trainer_input.experience_buffer is not None:
        found.append(("experience_buffer", trainer_input.experience_buffer))
    found += [("auxiliary_buffer", b) for b in trainer_input.auxiliary_buffers.values()]
    return [(kind, s) for kind, s in found if s.storage_type == "file"]


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=_example_id)
def test_example_data_files_are_in_the_repository(path, validated):
    from trinity.buffer.taskset.loading import resolve_data_files

    storages = [s for run in validated(path.stem).runs for s in _file_storages(run)]
    assert bool(storages) != (path.stem in NO_DATA_FILE), f"{path.name}: {storages}"
    for kind, storage in storages:
        assert storage.path and not os.path.isabs(storage.path), (kind, storage.path)
        assert (REPO / storage.path).exists(), f"{path.name}: {kind} {storage.path} is missing"
        resolved = resolve_data_files(REPO / storage.path, storage.split, storage.subset_name)
        assert resolved.files, (kind, storage.path, storage.split)
        for file in resolved.files:
            assert Path(file).resolve().is_relative_to(REPO), file
            assert Path(file).stat().st_size > 0, file


def _final_answer(answer: str) -> str:
    match = re.search(r"####\s*(-?[\d,.]+)\s*$", answer)
    assert match, f"GSM8K answers end with '#### N': {answer!r}"
    return match.group(1).replace(",", "")


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=_example_id)
def test_example_task_sets_read_into_tasks_their_reward_can_score(path, validated, monkeypatch):
    from trinity.buffer.taskset.reader import get_taskset_reader
    from trinity.common.rewards import REWARD_FUNCTIONS
    from trinity.common.workflows import WORKFLOWS

    monkeypatch.chdir(REPO)
    tasksets = [
        s
        for run in validated(path.stem).runs
        for kind, s in _file_storages(run)
        if "taskset" in kind
    ]
    if not tasksets:  # only a run with no explorer may lack a task set
        modes = {run.mode for run in validated(path.stem).runs}
        assert modes <= {"train", "serve"}, f"{path.name} explores ({modes}) but names no task set"
        return
    for storage in tasksets:
        reader = get_taskset_reader(storage)
        tasks = reader.read(len(reader))
        assert len(tasks) == len(reader) > 0
        workflow = WORKFLOWS.get(storage.default_workflow_type)
        reward_name = storage.default_reward_fn_type or workflow.default_reward_fn
        reward = REWARD_FUNCTIONS.get(reward_name)()
        for task in tasks:
            assert task.task_desc and task.truth, task.raw_task
            if storage.default_workflow_type != "math_workflow":
                continue
            answer = _final_answer(task.truth)
            right = reward(
                response=f"<think>...</think><answer>{answer}</answer>", truth=task.truth
            )
            wrong = reward(
                response=f"<think>...</think><answer>{float(answer) + 1:g}</answer>",
                truth=task.truth,
            )
            assert right["accuracy"] == 1.0 and wrong["accuracy"] == 0.0, (task.truth, right)


@pytest.mark.parametrize("stem", ["dpo", "sft_then_grpo"])
def test_example_training_data_formats_with_a_chat_template(stem, validated, model_path):
    """The SFT / DPO rows go through the formatter the trainer uses, with a real tokenizer."""
    from trinity.launcher.trainer.data import DatasetExperienceReader

    checked = 0
    for run in validated(stem).runs:
        schema = resolve_algorithm(run).schema
        if run.mode != "train" or schema not in ("sft", "dpo"):
            continue
        storage = run.buffer.trainer_input.experience_buffer.model_copy()
        storage.path = str(REPO / storage.path)
        reader = DatasetExperienceReader(storage, schema, model_path)
        exps = reader.read(len(reader))
        assert len(exps) == len(reader) > 0
        if schema == "dpo":
            assert all(e.experience_type == "dpo" for e in exps)
            assert all(len(e.chosen) > 0 and len(e.rejected) > 0 for e in exps)
        else:
            assert all(int(e.action_mask.sum()) > 0 for e in exps)  # the answer is trained on
        checked += 1
    assert checked


# ---------------------------------------------------------------- the command line


def _offline_env(hf_home: Path, allow_hub_models: bool = True) -> dict[str, str]:
    """No hub and an empty Hugging Face cache: validating must not need the model (once
    ``TRINITY_ALLOW_HUB_MODELS=1`` says the run may download it)."""
    env = {k: v for k, v in os.environ.items() if k not in EXAMPLE_ENV_VARS + (ALLOW_HUB_MODELS,)}
    env.pop("HF_HUB_CACHE", None)
    env.pop("HUGGINGFACE_HUB_CACHE", None)
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_HOME=str(hf_home),
        OMP_NUM_THREADS="1",
    )
    if allow_hub_models:
        env[ALLOW_HUB_MODELS] = "1"
    return env


@pytest.mark.slow  # a fresh interpreter per example: ~3 s of CPU, more on a busy machine
@pytest.mark.parametrize(
    ("stem", "expected_lines"),
    [
        (
            "grpo_gsm8k",
            [
                "Config OK: mode=both",
                "algorithm: grpo (repeat_times=8)",
                f"model:     {HUB_MODEL}",
                "taskset:   examples/data/gsm8k_sample (workflow=math_workflow)",
                "Dry run: the config is valid; nothing was run.",
            ],
        ),
        (
            "sft_then_grpo",
            [
                "stage 1: sft_warmup (mode=train, algorithm=sft)",
                "stage 2: grpo (mode=both, algorithm=grpo)",
                "Dry run: the config and its stages are valid; nothing was run.",
            ],
        ),
    ],
)
def test_trinity_launch_dry_run_accepts_the_example_offline(stem, expected_lines, tmp_path):
    hf_home = tmp_path / "hf-home"
    hf_home.mkdir()
    done = subprocess.run(
        [str(BIN / "trinity-launch"), f"examples/{stem}.yaml", "--dry-run"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=_offline_env(hf_home),
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for line in expected_lines:
        assert line in done.stdout, done.stdout
    warnings = [ln for ln in done.stdout.splitlines() if ln.strip().startswith("warning:")]
    assert all(CPU_NCCL_FALLBACK in w for w in warnings), warnings


def test_a_hub_model_not_on_this_machine_is_refused_before_anything_starts(tmp_path):
    """Without TRINITY_ALLOW_HUB_MODELS, a GPU example on a machine that lacks its model is
    refused by the dry run (exit 2), naming the field, its line and what to do -- not ~30 s
    into the run, inside Hugging Face."""
    hf_home = tmp_path / "hf-home"
    hf_home.mkdir()
    done = subprocess.run(
        [str(BIN / "trinity-launch"), "examples/grpo_gsm8k.yaml", "--dry-run"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=_offline_env(hf_home, allow_hub_models=False),
        timeout=180,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    line = next(
        i
        for i, text in enumerate((EXAMPLES / "grpo_gsm8k.yaml").read_text().splitlines(), 1)
        if text.strip().startswith("model_path:")
    )
    assert f"examples/grpo_gsm8k.yaml:{line}: model.model_path" in done.stderr, done.stderr
    assert f"{HUB_MODEL!r} is not a local model directory" in done.stderr
    assert "HF_HUB_OFFLINE is set" in done.stderr
    assert f"huggingface-cli download {HUB_MODEL}" in done.stderr
    assert ALLOW_HUB_MODELS in done.stderr and "Traceback" not in done.stderr
    # once downloaded (the Hugging Face cache holds it), the same dry run passes
    snapshot = hf_home / "hub" / f"models--{HUB_MODEL.replace('/', '--')}" / "snapshots" / "abc"
    stand_in_model(snapshot)
    done = subprocess.run(
        [str(BIN / "trinity-launch"), "examples/grpo_gsm8k.yaml", "--dry-run"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=_offline_env(hf_home, allow_hub_models=False),
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_example_that_does_not_validate_fails(tmp_path, monkeypatch):
    """The check above can fail: a broken copy of an example is refused, naming the field."""
    text = (EXAMPLES / "grpo_gsm8k.yaml").read_text(encoding="utf-8")
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        text.replace("default_workflow_type: math_workflow", "default_workflow_type: math_workflw")
    )
    monkeypatch.chdir(REPO)
    for var in EXAMPLE_ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    load_config(broken)  # the schema alone accepts it: the name is checked against registries
    with pytest.raises(ConfigError) as error:
        validate_config(broken)
    assert "default_workflow_type" in str(error.value) and "math_workflow" in str(error.value)
