"""Trinity-RFT's example configs, unchanged but for their model and data paths, pass
``trinity-launch --dry-run`` -- or are refused only where this release says so.

The configs are Trinity-RFT's (Apache-2.0), so they are not committed: ``python
tests/trinity_rft_compat/fetch_upstream.py`` puts them under ``upstream_examples/`` (pinned
commits); without that directory every test here is skipped, saying why.

What the test changes in each config, and nothing else: the model (a tiny local model whose
context is widened to 64k positions, standing in for the 1.5B-32B models the examples name),
the task sets and data sets (small local JSON-lines files with the columns the examples read),
buffer and output paths (a temporary directory), ``checkpoint_root_dir``, and the environment
variables the examples read (``TRINITY_MODEL_PATH``, ``TRINITY_TASKSET_PATH``, ...). Then it runs
the same validation as ``trinity-launch CONFIG --dry-run`` (``validate_config``).

Each example must pass, or every problem reported must be one of

* a feature this release does not have: the message says "not supported" and names the field;
* a key listed for that example in :data:`KNOWN_REFUSALS` -- keys Trinity-RFT 0.6 itself
  refuses (pre-0.6 layouts still found in its ``examples/`` directory, typos), each with why.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE / "upstream_examples"

#: example (path under upstream_examples/) -> {dotted field prefix: why it is refused}. Only
#: what Trinity-RFT 0.6 refuses too belongs here (checked with its own
#: ``trinity.common.config.load_config`` and component signatures); refusing something 0.6
#: accepts and a run could use is a bug here, not an entry.
KNOWN_REFUSALS: dict[str, dict[str, str]] = {
    "examples/opmd_gsm8k/opmd_gsm8k.yaml": {
        "data": "the pre-0.2 layout (top-level data:, engine keys directly under explorer:, ...)",
        "model.checkpoint_path": "pre-0.2 layout",
        "buffer.train_dataset": "pre-0.2 layout",
        "explorer": "pre-0.2 layout (engine settings moved to explorer.rollout_model)",
        "trainer.algorithm_type": "pre-0.2 layout (now algorithm.algorithm_type)",
        "trainer.sft_warmup_steps": "pre-0.2 layout",
        "monitor.cache_root_dir": "pre-0.2 layout",
        "monitor.project": "pre-0.2 layout (now top-level project)",
        "monitor.name": "pre-0.2 layout (now top-level name)",
    },
    "examples/mix_math/mix_math.yaml": {
        "algorithm.policy_loss_fn_args.read_batch_size_expert": "not an argument of 0.6's mix "
        "loss (train_batch_size_expert); 0.6 fails building the loss",
        "algorithm.policy_loss_fn_args.read_batch_size_usual": "as read_batch_size_expert",
        "algorithm.policy_loss_fn_args.repeat_times": "not an argument of 0.6's mix loss",
    },
    "examples/ppo_countdown_megatron/countdown.yaml": {
        "trainer.trainer_config.critic.ppo_epochs": "interpolates a key the example never sets; "
        "0.6's load_config fails on it too",
        "trainer.trainer_config.critic.shuffle": "as ppo_epochs",
    },
}

#: keys refused in every example that carries them, because Trinity-RFT 0.6 refuses them too
#: (its structured schema has no such key)
REFUSED_EVERYWHERE: dict[str, str] = {
    "buffer.max_retry_times": "not a key of 0.6's BufferConfig (pre-0.4 layout)",
    "buffer.max_retry_interval": "not a key of 0.6's BufferConfig (pre-0.4 layout)",
    "buffer.explore_batch_size": "not a key of 0.6's BufferConfig",
    "buffer.trainer_input.sft_warmup_dataset": "removed before 0.6 (auxiliary_buffers, stages)",
    "buffer.trainer_input.experience_buffer.use_priority_queue": "removed before 0.6",
    "algorithm.add_strategy": "removed before 0.6 (advantages are algorithm.advantage_fn)",
    "algorithm.optiimzer": "a typo in the example; 0.6 refuses the unknown key too",
    "model.max_token_len": "not a key of 0.6's ModelConfig",
    "model.tinker.base_model": "not a key of 0.6's TinkerConfig",
}

#: columns the examples' task sets read (prompt_key / response_key of each example)
_TASK_ROW = {
    "question": "What is 1 + 1?",
    "answer": "2",
    "problem": "What is 1 + 1?",
    "solution": "\\boxed{2}",
    "prompt": "What is 1 + 1?",
    "response": "2",
    "game_file": "game.json",
    "action_truth": "2",
    "messages": [{"role": "user", "content": "What is 1 + 1?"}],
}
_SFT_ROW = {
    "messages": [
        {"role": "user", "content": "What is 1 + 1?"},
        {"role": "assistant", "content": "2"},
    ],
    "prompt": "What is 1 + 1?",
    "response": "2",
}
_DPO_ROW = {"prompt": "What is 1 + 1?", "chosen": "2", "rejected": "3"}


def _example_files() -> list[Path]:
    if not EXAMPLES.is_dir():
        return []
    return sorted(p for p in EXAMPLES.rglob("*.yaml") if p.is_file())


def _example_id(path: Path) -> str:
    return path.relative_to(EXAMPLES).as_posix()


# ------------------------------------------------------------------ local stand-ins


def _write_rows(path: Path, row: dict[str, Any], n: int = 8) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for _ in range(n)), encoding="utf-8")


def make_stand_ins(root: Path) -> dict[str, str]:
    """A tiny model with a 64k context and small data sets under ``root``; their paths."""
    from trinity.launcher.tiny_model import build_tiny_model

    model = root / "model"
    build_tiny_model(str(model))
    config_file = model / "config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    # the examples ask for up to 24k-token contexts; the stand-in's positions allow them
    config["max_position_embeddings"] = 65536
    config_file.write_text(json.dumps(config, indent=2), encoding="utf-8")
    for split in ("train", "test"):
        _write_rows(root / "tasks" / f"{split}.jsonl", _TASK_ROW)
    _write_rows(root / "sft" / "train.jsonl", _SFT_ROW)
    _write_rows(root / "dpo" / "train.jsonl", _DPO_ROW)
    _write_rows(root / "raw" / "input.jsonl", _TASK_ROW)
    return {
        "model": str(model),
        "tasks": str(root / "tasks"),
        "sft": str(root / "sft"),
        "dpo": str(root / "dpo"),
        "raw": str(root / "raw" / "input.jsonl"),
        "work": str(root / "work"),
    }


def example_env(paths: dict[str, str]) -> dict[str, str]:
    """The environment variables Trinity-RFT's examples read, pointed at the stand-ins."""
    return {
        "TRINITY_MODEL_PATH": paths["model"],
        "TRINITY_AUX_MODEL_PATH": paths["model"],
        "TRINITY_TASKSET_PATH": paths["tasks"],
        "TRINITY_EVAL_TASKSET_PATH": paths["tasks"],
        "TRINITY_SFT_DATASET_PATH": paths["sft"],
        "TRINITY_CHECKPOINT_ROOT_DIR": str(Path(paths["work"]) / "checkpoints"),
    }


def _data_for(algorithm_type: Any, paths: dict[str, str]) -> str:
    return paths["dpo"] if algorithm_type == "dpo" else paths["sft"]


def _buffer_path(buffer: dict[str, Any], name: str, paths: dict[str, str], data: str) -> None:
    """A file buffer reads ``data``; a queue / SQL buffer writes to the work directory."""
    if buffer.get("storage_type", "file") == "file":
        buffer["path"] = data
    elif str(buffer.get("path") or "").startswith("sqlite:"):
        buffer["path"] = "sqlite:///" + str(Path(paths["work"]) / f"{name}.db")
    elif buffer.get("path"):
        buffer["path"] = str(Path(paths["work"]) / name)


def rewrite_paths(config: dict[str, Any], paths: dict[str, str]) -> dict[str, Any]:
    """``config`` (a parsed example) with its model and data paths on the stand-ins, in place.

    Only keys Trinity-RFT's layout puts paths under are touched, and only where present: a
    refusal of anything else in the example still shows.
    """
    work = Path(paths["work"])
    if "checkpoint_root_dir" in config:
        config["checkpoint_root_dir"] = str(work / "checkpoints")
    model = config.get("model")
    if isinstance(model, dict) and "model_path" in model:
        model["model_path"] = paths["model"]
    explorer = config.get("explorer")
    if isinstance(explorer, dict):
        for aux in explorer.get("auxiliary_models") or []:
            if isinstance(aux, dict) and aux.get("model_path"):
                aux["model_path"] = paths["model"]
        env_vars = explorer.get("env_vars")
        if isinstance(env_vars, dict) and "TMPDIR" in env_vars:
            env_vars["TMPDIR"] = str(work / "tmp")
    algorithm_type = (config.get("algorithm") or {}).get("algorithm_type")
    buffer = config.get("buffer")
    if isinstance(buffer, dict):
        explorer_input = buffer.get("explorer_input") or {}
        sets = [explorer_input.get("taskset"), *(explorer_input.get("tasksets") or [])]
        sets += explorer_input.get("eval_tasksets") or []
        for taskset in sets:
            if isinstance(taskset, dict) and "path" in taskset:
                taskset["path"] = paths["tasks"]
                taskset.pop("subset_name", None)  # a local directory has no subsets
        trainer_input = buffer.get("trainer_input") or {}
        exp = trainer_input.get("experience_buffer")
        if isinstance(exp, dict):
            _buffer_path(exp, "experience", paths, _data_for(algorithm_type, paths))
            if exp.get("storage_type", "file") == "file":
                exp.pop("subset_name", None)
        for key in ("sft_warmup_dataset",):
            if isinstance(trainer_input.get(key), dict):
                trainer_input[key]["path"] = paths["sft"]
        for name, aux in (trainer_input.get("auxiliary_buffers") or {}).items():
            if isinstance(aux, dict):
                _buffer_path(aux, str(name), paths, paths["sft"])
    processor = config.get("data_processor")
    pipeline = processor.get("task_pipeline") if isinstance(processor, dict) else None
    if isinstance(pipeline, dict):
        if pipeline.get("inputs"):
            pipeline["inputs"] = [paths["raw"]]
        if isinstance(pipeline.get("output"), dict):
            pipeline["output"]["path"] = str(work / "task_pipeline_output")
    return config


# ------------------------------------------------------------------ checking


def dry_run_issues(path: Path, paths: dict[str, str]) -> list[Any]:
    """The problems ``trinity-launch <rewritten copy of path> --dry-run`` reports."""
    from trinity.common.config import ConfigError
    from trinity.launcher.validation import config_issues, validate_config

    config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    rewritten = Path(paths["work"]) / "configs" / _example_id(path)
    rewritten.parent.mkdir(parents=True, exist_ok=True)
    rewritten.write_text(
        yaml.safe_dump(rewrite_paths(config, paths), sort_keys=False), encoding="utf-8"
    )
    try:
        validate_config(str(rewritten))
    except ConfigError as exc:
        return list(exc.errors)
    except (ValueError, KeyError) as exc:  # an unknown component name and the like
        return config_issues(exc)
    return []


def unexpected(example: str, issues: list[Any]) -> list[str]:
    """The issues neither a "not supported" refusal nor a known refusal of this example."""
    known = {**REFUSED_EVERYWHERE, **KNOWN_REFUSALS.get(example, {})}
    out = []
    for issue in issues:
        text = str(issue)
        if "not supported" in issue.message:
            continue
        if any(issue.path == k or issue.path.startswith(k + ".") for k in known):
            continue
        out.append(text)
    return out


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    paths = make_stand_ins(tmp_path_factory.mktemp("upstream_examples"))
    saved = {k: os.environ.get(k) for k in example_env(paths)}
    os.environ.update(example_env(paths))
    try:
        yield paths
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


_FILES = _example_files()
_SKIP = pytest.mark.skipif(
    not _FILES,
    reason=f"no Trinity-RFT example configs in {EXAMPLES} (not committed: fetch them with "
    "`python tests/trinity_rft_compat/fetch_upstream.py --examples`)",
)


@_SKIP
@pytest.mark.parametrize("path", _FILES or [None], ids=[_example_id(p) for p in _FILES] or ["none"])
def test_example_passes_dry_run_or_is_refused_as_documented(
    path: Path, stand_ins: dict[str, str]
) -> None:
    issues = dry_run_issues(path, stand_ins)
    bad = unexpected(_example_id(path), issues)
    assert not bad, f"{_example_id(path)}: refused for reasons nobody documented:\n" + "\n".join(
        bad
    )


def test_path_rewriting_touches_only_paths(tmp_path: Path) -> None:
    """Runs without the fetched files: the rewriting keeps every non-path key as written."""
    paths = {
        "model": "/m",
        "tasks": "/t",
        "sft": "/s",
        "dpo": "/d",
        "raw": "/r.jsonl",
        "work": str(tmp_path),
    }
    config = {
        "checkpoint_root_dir": "/PATH/TO/CHECKPOINT/",
        "algorithm": {"algorithm_type": "dpo"},
        "model": {"model_path": "/PATH/TO/MODEL/", "max_model_len": 1280},
        "buffer": {
            "explorer_input": {"taskset": {"path": "openai/gsm8k", "subset_name": "main"}},
            "trainer_input": {"experience_buffer": {"storage_type": "file", "path": "x"}},
        },
        "trainer": {"ppo_max_token_len_per_gpu": 16384},
    }
    out = rewrite_paths(config, paths)
    assert out["model"] == {"model_path": "/m", "max_model_len": 1280}
    assert out["buffer"]["explorer_input"]["taskset"] == {"path": "/t"}
    assert out["buffer"]["trainer_input"]["experience_buffer"]["path"] == "/d"
    assert out["trainer"] == {"ppo_max_token_len_per_gpu": 16384}
    assert out["checkpoint_root_dir"] == str(tmp_path / "checkpoints")


#: ``key=value`` overrides that scale an example down to a 2-core CPU and two steps: what a
#: user trying a GPU example on a laptop passes on the command line (the paths are rewritten
#: as for the dry run; nothing else of the example changes)
LAPTOP_OVERRIDES = (
    "cluster.gpu_per_node=0",
    "explorer.rollout_model.engine_num=1",
    "explorer.runner_per_model=2",
    "algorithm.repeat_times=2",
    "buffer.batch_size=2",
    "buffer.total_steps=2",
    "buffer.explorer_input.eval_tasksets=[]",
    "model.max_response_tokens=8",
    "model.max_model_len=256",
)
LORA_EXAMPLE = EXAMPLES / "examples" / "grpo_lora_gsm8k" / "gsm8k.yaml"


@pytest.mark.slow
@pytest.mark.skipif(
    not LORA_EXAMPLE.is_file(),
    reason=f"{LORA_EXAMPLE} not fetched (`python tests/trinity_rft_compat/fetch_upstream.py "
    "--examples`)",
)
def test_the_grpo_lora_gsm8k_example_runs_a_few_steps(stand_ins: dict[str, str]) -> None:
    """Trinity-RFT 0.6's LoRA example, model and data local, scaled down to a CPU with
    ``key=value`` overrides: it trains two steps, the engines get the adapter alone through
    ``global_step_N/actor/lora_adapter`` (its ``sync_method: checkpoint``, as 0.6 does) and
    serve it under the example's adapter name."""
    import subprocess
    import sys

    pytest.importorskip("vllm")
    pytest.importorskip("verl")
    work = Path(stand_ins["work"])
    config = rewrite_paths(yaml.safe_load(LORA_EXAMPLE.read_text(encoding="utf-8")), stand_ins)
    path = work / "configs" / "grpo_lora_gsm8k.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    env = dict(os.environ, OMP_NUM_THREADS="1", **example_env(stand_ins))
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(
        [str(Path(sys.executable).parent / "trinity-launch"), str(path), *LAPTOP_OVERRIDES],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    run = work / "checkpoints" / "Trinity-RFT-gsm8k" / "qwen2.5-1.5B-gsm8k"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if "actor/loss" in r]
    assert [r["step"] for r in trained] == [1, 2]
    adapter = run / "global_step_1" / "actor" / "lora_adapter"
    saved = json.loads((adapter / "adapter_config.json").read_text())
    assert (saved["r"], saved["lora_alpha"]) == (16, 16)
    synced = {r["sync/weight_bytes"] for r in rows if "sync/weight_bytes" in r}
    assert synced == {(adapter / "adapter_model.safetensors").stat().st_size - _header(adapter)}


def _header(adapter: Path) -> int:
    """Bytes of the safetensors header of ``adapter``'s weights (the rest is the tensors)."""
    import struct

    with open(adapter / "adapter_model.safetensors", "rb") as f:
        return 8 + struct.unpack("<Q", f.read(8))[0]
