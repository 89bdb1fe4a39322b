"""The learning matrix: every registered algorithm type trained on a task it applies to.

    .venv/bin/python benchmarks/learning_matrix.py [--types grpo,rloo] [--ci] [--out DIR] [--doc]

Each type runs ``trinity-launch`` once, on CPU with the quickstart's tiny model, one type after
the other (a fresh launcher process each, so one type's failure cannot poison the next):

* the RL types on the quickstart's task (``examples/quickstart.yaml``: a+b with a, b in 0..4,
  8 samples per problem, the quickstart's learning rate and entropy bonus) with only
  ``algorithm.algorithm_type`` switched, plus what the type cannot run without (a critic for
  ``ppo``, expert data for ``mix`` and ``mix_chord``, a multi-turn task for ``multi_step_grpo``
  and ``gigpo``). Metric: the mean reward of each step's rollouts (``rollout/reward/mean``,
  taken before any experience filter, so it is the same quantity for every type);
* the distillation types (``on_policy_distill``, ``jsd``) on the same task and metric: a fresh
  random student scored token by token by a teacher (the quickstart trained by GRPO, built
  once per run directory: :func:`build_teacher`), whose greedy accuracy must also end at 0.8 or
  more (:attr:`TypeSpec.greedy_min`);
* ``sft``, ``cpt`` and ``dpo`` in mode train on the offline sets of
  ``examples/data/make_arithmetic_offline.py``. Metric, on every saved checkpoint: SFT the greedy
  answer accuracy on the 11 held-out problems; CPT the greedy continuation of the raw text
  ``"3+4="`` (no chat template: it trains on plain text) on the 44 training problems, the
  held-out ones shown beside; DPO the share of the 11 held-out problems whose
  right answer wins its preference pair against every wrong digit (DPO's implicit reward,
  policy vs the initial model; chance about 0.1);
* the :data:`VARIANTS`: a type with a feature switched on (``grpo-token-tis``: the quickstart
  with rollout correction; ``grpo-fully-async``: with ``sync_style: fully_async``), run beside
  the type to show the feature does not hurt learning; ``grpo-vlm-counting`` is GRPO on another
  task: a tiny vision-language model counting squares in pictures (its own bars).

The bar (:data:`FULL_BAR`): the first 5 points' mean is at most 0.2 and the last 5 points' mean
at least 0.6. ``--ci`` runs the reduced matrix of ``tests/learning/test_learning_matrix*.py``
(fewer steps per type, :data:`CI_BAR`; CI leaves out the types of :data:`NOT_IN_CI`).
Results: ``DIR/learning_matrix.{json,md,png}`` and every run under ``DIR/runs/<type>``;
``--doc`` also merges the rows of ``DIR`` into the recorded ones
(``docs/learning_matrix.json``: a row run now replaces its recorded one, the others stay) and
writes their table and PNG into ``docs/learning.md`` (the part between its ``matrix`` markers)
and ``docs/learning_matrix.png``, so a run of a few types updates their rows alone.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import yaml

from trinity.manager.config_io import deep_merge

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "examples" / "data"
DOC = REPO / "docs" / "learning.md"
DOC_PNG = REPO / "docs" / "learning_matrix.png"
#: The rows behind docs/learning.md's table (curves included), which ``--doc`` merges into.
DOC_JSON = REPO / "docs" / "learning_matrix.json"
BEGIN, END = "<!-- learning-matrix:begin -->", "<!-- learning-matrix:end -->"
#: The metric of the RL types: the mean reward of the step's rollouts, before any filter.
RL_METRIC = "rollout/reward/mean"


@dataclass(frozen=True)
class Bar:
    """What "learned" means: ``first <= first_max`` and ``last >= last_min`` and
    ``last - first >= min_gain`` (means of the first / last ``window`` points)."""

    first_max: float
    last_min: float
    min_gain: float = 0.0
    window: int = 5

    def describe(self) -> str:
        parts = [
            f"first {self.window} <= {self.first_max:g}",
            f"last {self.window} >= {self.last_min:g}",
        ]
        if self.min_gain > 0:
            parts.append(f"gain >= {self.min_gain:g}")
        return ", ".join(parts)

    def check(self, first: float, last: float) -> bool:
        return first <= self.first_max and last >= self.last_min and last - first >= self.min_gain


FULL_BAR = Bar(first_max=0.2, last_min=0.6)
#: The reduced matrix's bar: fewer steps, so a smaller rise, but still one that a type whose
#: loss or advantage has a sign error, a wrong mask or a cancelling baseline does not make.
CI_BAR = Bar(first_max=0.25, last_min=0.3, min_gain=0.2)


@dataclass(frozen=True)
class TypeSpec:
    """How one algorithm type is run in the matrix.

    ``kind``: ``rl`` (mode both on the quickstart's task), ``distill`` (the same, the student
    a fresh random model scored by a trained teacher: :func:`build_teacher`), ``sft``,
    ``cpt`` or ``dpo`` (mode train on the offline sets). ``overrides`` are merged into the type's base
    config (nested dicts merge, anything else replaces; ``{model}`` / ``{teacher}`` in a string
    are the matrix's tiny model / the teacher's weights). ``save_every`` (offline kinds):
    checkpoint interval, one metric point per checkpoint. ``greedy_min``: the greedy accuracy
    on the quickstart's 25 problems (its ``arithmetic-greedy`` eval) the run must end with,
    beside the bar (0: not checked).
    """

    steps: int
    ci_steps: int
    kind: str = "rl"
    overrides: dict[str, Any] = field(default_factory=dict)
    save_every: int = 0
    ci_save_every: int = 0
    greedy_min: float = 0.0
    note: str = ""


_SFT_FORMAT = {"prompt_type": "plaintext", "prompt_key": "question", "response_key": "answer"}

#: What ``mix`` and ``mix_chord`` add: expert rows (the SFT set's training problems) beside the
#: RL rows of each batch: 128 RL rows per step as for the other types, plus as many expert rows.
_MIX: dict[str, Any] = {
    "buffer": {
        "train_batch_size": 256,
        "trainer_input": {
            "auxiliary_buffers": {
                "sft_dataset": {
                    "storage_type": "file",
                    "schema_type": "sft",  # rows to format, not experiences
                    "total_epochs": 1000,  # 44 rows, 128 a step: read them again
                    "path": str(DATA / "arithmetic_sft"),
                    "split": "train",
                    "format": _SFT_FORMAT,
                }
            }
        },
    }
}

#: What the step-wise types (``multi_step_grpo``, ``gigpo``) run on: a multi-turn task, two
#: questions per episode, one experience per turn.
_MULTI_TURN: dict[str, Any] = {
    "model": {"max_prompt_tokens": 40},
    "buffer": {
        # 16 tasks x 8 episodes x 2 turns: every experience of a step in its train step
        "train_batch_size": 256,
        "explorer_input": {
            "taskset": {
                "name": "arithmetic_multi_turn",
                "path": str(DATA / "arithmetic_multi_turn"),
                "default_workflow_type": "arithmetic_multi_turn_workflow",
                "format": {"prompt_key": "questions", "response_key": "answers"},
            },
            "eval_tasksets": [],
        },
    },
}

#: The distillation types' teacher (:func:`build_teacher`): the quickstart (GRPO on its task,
#: from the matrix's tiny model) trained this many steps.
TEACHER_STEPS = 150
#: The distillation types' student: the quickstart's tiny model built from this weight seed, a
#: fresh random model (not the teacher's starting point, the preset's seed).
STUDENT_SEED = 1
#: The quickstart's greedy accuracy on its 25 problems (its eval task set).
GREEDY_METRIC = "eval/arithmetic-greedy/accuracy/mean@1"

#: What the distillation types (``on_policy_distill``, ``jsd``) add: the student samples with
#: ``on_policy_distill_workflow`` and the teacher (an auxiliary model) scores every sampled
#: token. The reward is computed to be watched (the matrix's metric), not trained on.
_DISTILL: dict[str, Any] = {
    "buffer": {
        "explorer_input": {
            "taskset": {
                "default_workflow_type": "on_policy_distill_workflow",
                "default_reward_fn_type": "arithmetic_reward",
            }
        }
    },
    "explorer": {
        "eval_interval": 10,  # the student's greedy accuracy every 10 steps
        "auxiliary_models": [
            {
                "model_path": "{teacher}",
                "engine_type": "vllm",
                "engine_num": 1,
                "tensor_parallel_size": 1,
                "enforce_eager": True,
                "dtype": "float32",
                "seed": 42,
            }
        ],
    },
}

#: Every registered type (``trinity.algorithm.ALGORITHM_TYPE``) and how it is run.
TYPES: dict[str, TypeSpec] = {
    "grpo": TypeSpec(60, 45, note="the quickstart itself"),
    "rloo": TypeSpec(60, 45),
    "reinforceplusplus": TypeSpec(60, 45),
    "opmd": TypeSpec(60, 45),
    "asymre": TypeSpec(
        100,
        50,
        # asymre's defaults have no entropy term: give it the quickstart's bonus like every
        # other type has (without it a few problems stay wrong for good: plateau near 0.55)
        overrides={"algorithm": {"entropy_loss_fn": "default"}},
        note="the quickstart's entropy bonus (`entropy_loss_fn: default`; asymre's defaults "
        "have none, and without it a few problems stay wrong for good: 0.07 -> 0.56 in 100 "
        "steps) and 100 steps (its advantages are not divided by the group std)",
    ),
    "topr": TypeSpec(60, 45),
    "cispo": TypeSpec(60, 45),
    "gspo": TypeSpec(60, 45),
    "sapo": TypeSpec(60, 45),
    "dapo": TypeSpec(60, 45),
    "raft": TypeSpec(
        100, 45, note="trains on the successful rollouts only (few at first): 100 steps"
    ),
    "ppo": TypeSpec(
        80,
        50,
        overrides={
            # the critic (a value head on a copy of the policy) is what PPO adds
            "model": {"critic_model_path": "{model}"},
            "trainer": {"trainer_config": {"critic": {"optim": {"lr": 1.5e-3}}}},
        },
        note="adds a critic (`model.critic_model_path`: the tiny model with a value head)",
    ),
    "mix": TypeSpec(
        60,
        45,
        overrides=_MIX,
        note="adds expert data (`buffer.trainer_input.auxiliary_buffers.sft_dataset`: the SFT "
        "set's 44 training problems) and `buffer.train_batch_size` 256 (half expert rows)",
    ),
    "multi_step_grpo": TypeSpec(
        150,
        45,
        overrides=_MULTI_TURN,
        note="a multi-turn task (`arithmetic_multi_turn_workflow` on "
        "`examples/data/arithmetic_multi_turn`: two questions per episode, one experience per "
        "turn, reward = share answered right) and `buffer.train_batch_size` 256 (both turns)",
    ),
    "grpo_verl": TypeSpec(60, 45),
    "rec": TypeSpec(60, 45),
    "sppo": TypeSpec(
        100,
        50,
        # sppo's defaults have no entropy term (as asymre's): give it the quickstart's bonus
        overrides={"algorithm": {"entropy_loss_fn": "default"}},
        note="the quickstart's entropy bonus (`entropy_loss_fn: default`; sppo's defaults have "
        "none: 0.07 -> 0.38 in 60 steps without it, a few problems staying wrong) and 100 "
        "steps (its OPMD advantages are not divided by the group std; on-policy its curve is "
        "`rec`'s, 0.64 over steps 56-60)",
    ),
    "mix_chord": TypeSpec(
        60,
        45,
        overrides=_MIX,
        note="the `mix` set-up (expert rows from `auxiliary_buffers.sft_dataset`, "
        "`buffer.train_batch_size` 256)",
    ),
    "gigpo": TypeSpec(
        150,
        45,
        overrides=_MULTI_TURN,
        note="the multi-turn task of `multi_step_grpo`, whose turns carry GiGPO's "
        "`env_state_hash` (SHA-256 of the conversation the turn answered) and `step_reward`",
    ),
    "on_policy_distill": TypeSpec(
        150,
        45,
        kind="distill",
        overrides=_DISTILL,
        greedy_min=0.8,
        note="distillation: a fresh random student (the tiny model, weight seed 1) samples with "
        "`on_policy_distill_workflow`, the teacher (the quickstart trained 150 steps by GRPO, "
        "an auxiliary model) scores its tokens; the reward (`arithmetic_reward`) is watched, "
        "not trained on, and the student must end at greedy accuracy >= 0.8; 150 steps (0.48 "
        "and greedy 0.56 at 60: its reverse-KL advantages, down to -10 on a token the teacher "
        "rules out, have every step's gradient clipped to norm 1)",
    ),
    "jsd": TypeSpec(
        150,
        45,
        kind="distill",
        overrides=_DISTILL,
        greedy_min=0.8,
        note="as `on_policy_distill`, with the Jensen-Shannon advantage (fixed: 0.6's formula "
        "reinforced every sampled token, 0.03 -> 0.00 in 60 steps)",
    ),
    "sft": TypeSpec(80, 48, kind="sft", save_every=8, ci_save_every=4),
    "cpt": TypeSpec(
        80,
        48,
        kind="cpt",
        save_every=4,
        ci_save_every=4,
        note="continued pre-training on the SFT set's training problems as raw text "
        '(`{"text": "3+4=7\\n"}`, `format.prompt_type: plaintext`); metric: greedy '
        'continuation of `"3+4="` without a chat template (held-out problems beside)',
    ),
    "dpo": TypeSpec(80, 40, kind="dpo", save_every=2, ci_save_every=2),
}


@dataclass(frozen=True)
class Variant:
    """An algorithm type of :data:`TYPES` run with more settings (``overrides``, merged over
    the type's own), beside the type itself: what those settings change in learning."""

    base: str
    overrides: dict[str, Any]
    note: str = ""
    #: inputs the run builds under the matrix's directory (``{name}`` in the overrides):
    #: ``vlm_model`` (the ``vlm`` tiny preset), ``counting`` (the counting task set)
    needs: tuple[str, ...] = ()
    #: ``(steps, ci_steps)`` instead of the base type's
    steps: Optional[tuple[int, int]] = None
    #: ``(full, ci)`` bars instead of :data:`FULL_BAR` / :data:`CI_BAR`
    bars: Optional[tuple[Bar, Bar]] = None


#: Runs that are not a type of their own: a type with a feature switched on.
VARIANTS: dict[str, Variant] = {
    "grpo-token-tis": Variant(
        "grpo",
        {
            "algorithm": {
                "rollout_correction": {"rollout_is": "token", "rollout_is_threshold": 2.0}
            },
            # rollouts one step behind the trainer (on-policy, vLLM's float32 log-probs equal
            # the trainer's to ~1e-6 here, and the weights would all be 1)
            "synchronizer": {"sync_offset": 1},
        },
        note="the quickstart with rollouts one step behind the trainer (`sync_offset: 1`) and "
        "token-level truncated importance sampling between the rollout engine's and the "
        "trainer's log-probs (verl's `decoupled_token_is` preset)",
    ),
    "grpo-fully-async": Variant(
        "grpo",
        {"synchronizer": {"sync_style": "fully_async"}},
        note="the quickstart with `sync_style: fully_async`: the explorer runs up to 2 batches "
        "ahead of the trainer and new weights reach the engine under requests in flight",
    ),
    "grpo-lora": Variant(
        "grpo",
        {
            "model": {"lora_configs": [{"lora_rank": 16, "lora_alpha": 32}]},
            "algorithm": {"optimizer": {"lr": 4e-3}},
        },
        note="the quickstart training a LoRA adapter (`model.lora_configs`: rank 16, alpha 32) "
        "on frozen base weights, lr 4e-3 (1e-2 did not learn); the engines serve base + "
        "adapter and each sync moves the adapter alone",
    ),
    "multi-step-grpo-fully-async": Variant(
        "multi_step_grpo",
        {"synchronizer": {"sync_style": "fully_async"}},
        note="the multi-turn task of `multi_step_grpo` with `sync_style: fully_async`",
    ),
}


#: The vision-language run: GRPO on the counting task (pictures of 1-5 squares, chance 0.2)
#: with the ``vlm`` tiny preset, images through the transformers engine and verl.
_VLM_COUNTING: dict[str, Any] = {
    "model": {"model_path": "{vlm_model}", "max_prompt_tokens": 64, "max_response_tokens": 2},
    # 16 answers per picture: GRPO's group baseline steady enough that the reward does not
    # fall back from 0.9 (8 answers: it reached 0.9 and fell to 0.4 and back in 150 steps)
    "algorithm": {"repeat_times": 16},
    "buffer": {
        "explorer_input": {
            "taskset": {
                "name": "counting",
                "path": "{counting}",
                "split": "train",
                "format": {
                    "prompt_key": "question",
                    "response_key": "answer",
                    "image_key": "images",
                },
                "default_workflow_type": "simple_mm_workflow",
                "default_reward_fn_type": "arithmetic_reward",
            },
            "eval_tasksets": [
                {
                    "name": "counting-greedy",
                    "path": "{counting}",
                    "split": "test",
                    "format": {
                        "prompt_key": "question",
                        "response_key": "answer",
                        "image_key": "images",
                    },
                    "rollout_args": {"temperature": 0.0},
                    "default_workflow_type": "simple_mm_workflow",
                    "default_reward_fn_type": "arithmetic_reward",
                }
            ],
        }
    },
    "explorer": {"rollout_model": {"engine_type": "transformers"}},
}
VARIANTS["grpo-vlm-counting"] = Variant(
    "grpo",
    _VLM_COUNTING,
    note="vision-language RL: the `vlm` tiny preset (Qwen2.5-VL architecture) counts 1-5 "
    "squares in 84 x 84 pictures drawn with Pillow (`trinity.launcher.counting_task`; chance "
    "0.2), `simple_mm_workflow` on the transformers engine, verl training the vision tower too",
    needs=("vlm_model", "counting"),
    steps=(150, 70),
    # CI: fewer steps, so a lower bar (a dip of the sampled reward at its end must not fail it)
    bars=(Bar(first_max=0.3, last_min=0.8), Bar(first_max=0.3, last_min=0.7, min_gain=0.4)),
)


#: Registered types the matrix does not run, each with the reason.
NOT_IN_MATRIX: dict[str, str] = {}

#: Types of :data:`TYPES` the reduced matrix of CI leaves out, each with the reason; the full
#: matrix (``docs/learning.md``) runs them.
_CI_TIME = (
    "a Trinity-RFT 0.6 type added after CI's matrix; CI's time is tight (the full matrix runs it)"
)
NOT_IN_CI: dict[str, str] = {
    "grpo_verl": _CI_TIME + "; grpo's math, computed in the trainer",
    "rec": _CI_TIME,
    "sppo": _CI_TIME,
    "mix_chord": _CI_TIME + "; mix's set-up, which CI runs",
    "gigpo": _CI_TIME + "; multi_step_grpo's task, which CI runs",
    "on_policy_distill": _CI_TIME + "; it needs a 150-step teacher run first",
    "jsd": _CI_TIME + "; it needs a 150-step teacher run first",
}

#: The reduced matrix of CI in three test files (``tests/learning/``), so pytest-xdist runs
#: them side by side (it gives a file to one worker): each list is one file's types, the first
#: also holds the variants (they run beside their base type's row). Together with
#: :data:`NOT_IN_CI`: :data:`TYPES`.
CI_SHARDS: dict[str, list[str]] = {
    "test_learning_matrix.py": ["grpo", "multi_step_grpo", "sft", "cpt", "dpo"],
    "test_learning_matrix_b.py": ["rloo", "opmd", "asymre", "topr", "cispo", "gspo"],
    "test_learning_matrix_c.py": ["reinforceplusplus", "sapo", "dapo", "raft", "ppo", "mix"],
}


def spec_of(name: str) -> tuple[str, TypeSpec]:
    """``(algorithm type, spec)`` of a type of :data:`TYPES` or a run of :data:`VARIANTS`."""
    if name in TYPES:
        return name, TYPES[name]
    if name not in VARIANTS:
        raise ValueError(f"unknown run {name!r}; known: {sorted(TYPES) + sorted(VARIANTS)}")
    variant = VARIANTS[name]
    base = TYPES[variant.base]
    overrides = deep_merge(base.overrides, variant.overrides)
    return variant.base, replace(base, overrides=overrides, note=variant.note)


def _fill(value: Any, names: dict[str, str]) -> Any:
    """``value`` with every ``{name}`` of ``names`` in its strings replaced."""
    if isinstance(value, dict):
        return {k: _fill(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, names) for v in value]
    if isinstance(value, str):
        for name, text in names.items():
            value = value.replace("{" + name + "}", text)
    return value


def _absolute_data_paths(config: dict[str, Any]) -> None:
    """The quickstart's data paths are relative to the repository root: make them absolute."""
    inp = config["buffer"]["explorer_input"]
    for ts in [inp["taskset"], *inp.get("eval_tasksets", [])]:
        if ts.get("path") and not os.path.isabs(ts["path"]):
            ts["path"] = str(REPO / ts["path"])


def rl_config(
    algorithm_type: str, steps: int, model: str, root: Path, name: Optional[str] = None
) -> dict[str, Any]:
    """The quickstart's config with ``algorithm_type`` switched and ``steps`` steps (the run
    is called ``name``, the type by default)."""
    config = yaml.safe_load((REPO / "examples" / "quickstart.yaml").read_text())
    config.update(project="learning-matrix", group="cpu", name=name or algorithm_type)
    config["checkpoint_root_dir"] = str(root)
    config["algorithm"]["algorithm_type"] = algorithm_type
    config["model"]["model_path"] = model
    config["buffer"]["total_steps"] = steps
    _absolute_data_paths(config)
    # greedy accuracy at the start and the end only; one checkpoint at the end
    config["explorer"]["eval_interval"] = steps
    config["trainer"]["save_interval"] = steps
    return config


def offline_config(
    algorithm_type: str, steps: int, save_every: int, model: str, root: Path
) -> dict[str, Any]:
    """Mode train on ``examples/data/arithmetic_{sft,cpt,dpo}`` (16 rows / pairs per step)."""
    max_response_tokens = 2
    if algorithm_type == "cpt":
        buffer: dict[str, Any] = {
            "name": "arithmetic_cpt",
            "storage_type": "file",
            "path": str(DATA / "arithmetic_cpt"),
            "split": "train",
            "format": {"prompt_type": "plaintext", "prompt_key": "text"},
        }
        algorithm: dict[str, Any] = {"algorithm_type": "cpt", "optimizer": {"lr": 1e-3}}
        max_response_tokens = 8  # the whole "a+b=c\n" after its first token
    elif algorithm_type == "sft":
        buffer = {
            "name": "arithmetic_sft",
            "storage_type": "file",
            "path": str(DATA / "arithmetic_sft"),
            "split": "train",
            "format": _SFT_FORMAT,
        }
        algorithm = {"algorithm_type": "sft", "optimizer": {"lr": 1e-3}}
    else:
        buffer = {
            "name": "arithmetic_dpo",
            "storage_type": "file",
            "path": str(DATA / "arithmetic_dpo"),
            "split": "train",
            "format": {
                "prompt_type": "messages",
                "messages_key": "prompt",
                "chosen_key": "chosen",
                "rejected_key": "rejected",
            },
        }
        algorithm = {"algorithm_type": "dpo", "optimizer": {"lr": 2e-3}}
    return {
        "project": "learning-matrix",
        "group": "cpu",
        "name": algorithm_type,
        "mode": "train",
        "checkpoint_root_dir": str(root),
        "algorithm": algorithm,
        "model": {
            "model_path": model,
            "max_prompt_tokens": 16,
            "max_response_tokens": max_response_tokens,
        },
        "cluster": {"node_num": 1, "gpu_per_node": 0},
        "buffer": {
            "total_epochs": 1000,  # total_steps ends the run
            "total_steps": steps,
            "train_batch_size": 16,
            "trainer_input": {"experience_buffer": buffer},
        },
        "synchronizer": {"sync_method": "checkpoint", "sync_interval": save_every},
        # Hugging Face weights at every checkpoint: the metric is computed from each
        "trainer": {
            "trainer_type": "verl",
            "save_interval": save_every,
            "save_hf_checkpoint": "always",
        },
        "monitor": {"monitor_type": "tensorboard"},
    }


def _checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    found = []
    for path in run_dir.glob("global_step_*/actor/huggingface"):
        if (path / "config.json").is_file():
            found.append((int(path.parent.parent.name.rsplit("_", 1)[1]), path))
    return sorted(found)


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _prompt_ids(tokenizer: Any, question: str) -> list[int]:
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True
    )
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _raw_prompt_ids(tokenizer: Any, question: str) -> list[int]:
    """``question`` as plain text (``cpt`` trains without a chat template)."""
    return tokenizer(question)["input_ids"]


def sft_accuracy(
    model_dir: str,
    tokenizer: Any,
    rows: list[dict[str, Any]],
    prompt_ids: Callable[[Any, str], list[int]] = _prompt_ids,
) -> float:
    """Greedy answer accuracy on ``rows`` (``question`` / ``answer``): the first integer of the
    2-token reply must be the answer (the quickstart's ``arithmetic_reward``). ``prompt_ids``:
    the question's prompt (chat template; :func:`_raw_prompt_ids` for ``cpt``)."""
    import torch
    from transformers import AutoModelForCausalLM

    from trinity.workflows.rewards.arithmetic import first_integer

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    right = 0
    with torch.no_grad():
        for row in rows:
            ids = prompt_ids(tokenizer, row["question"])
            out = model.generate(
                torch.tensor([ids]),
                max_new_tokens=2,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id,
            )
            reply = tokenizer.decode(out[0, len(ids) :], skip_special_tokens=True)
            right += first_integer(reply) == int(row["answer"])
    return right / len(rows)


def _answer_logprob(model: Any, tokenizer: Any, question: str, answer: str) -> float:
    """Sum of the log-probabilities of ``answer`` + end of turn after ``question``'s prompt."""
    import torch

    prompt = _prompt_ids(tokenizer, question)
    reply = tokenizer(answer + tokenizer.eos_token, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([prompt + reply])
    logits = model(ids).logits[0, len(prompt) - 1 : -1].float()  # [len(reply), vocab]
    logp = torch.log_softmax(logits, dim=-1)
    return float(logp.gather(-1, torch.tensor(reply)[:, None]).sum())


def dpo_preference_accuracy(
    model_dir: str, reference: dict[tuple[str, str], float], tokenizer: Any, rows: list[dict]
) -> float:
    """Share of the held-out problems whose chosen answer wins every one of its pairs.

    A pair is won when the DPO implicit reward prefers ``chosen``: ``(log pi(c) - log ref(c))
    - (log pi(r) - log ref(r)) > 0``; ``reference`` holds ``log ref`` per (question, answer).
    ``rows`` hold one pair per wrong answer of each problem (chance: about 1 in 10).
    """
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    won: dict[str, bool] = {}
    cache: dict[tuple[str, str], float] = {}

    def implicit(q: str, a: str) -> float:
        if (q, a) not in cache:
            cache[q, a] = _answer_logprob(model, tokenizer, q, a) - reference[q, a]
        return cache[q, a]

    with torch.no_grad():
        for row in rows:
            q = row["prompt"][-1]["content"]
            c, r = row["chosen"][-1]["content"], row["rejected"][-1]["content"]
            won[q] = won.get(q, True) and implicit(q, c) - implicit(q, r) > 0
    return sum(won.values()) / len(won)


def offline_curve(
    kind: str, model: str, run_dir: Path, split: str = "test"
) -> list[tuple[int, float]]:
    """The metric on ``split`` of the initial model (step 0) and of every checkpoint."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    transformers.logging.disable_progress_bar()  # one "Loading weights" bar per checkpoint
    tokenizer = AutoTokenizer.from_pretrained(model)
    points = [(0, model)] + [(step, str(path)) for step, path in _checkpoints(run_dir)]
    if kind in ("sft", "cpt"):
        rows = _rows(DATA / "arithmetic_sft" / f"{split}.jsonl")
        ids = _raw_prompt_ids if kind == "cpt" else _prompt_ids
        return [(step, sft_accuracy(path, tokenizer, rows, ids)) for step, path in points]
    rows = _rows(DATA / "arithmetic_dpo" / f"{split}.jsonl")
    ref_model = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    reference = {}
    with torch.no_grad():
        for row in rows:
            q = row["prompt"][-1]["content"]
            for side in ("chosen", "rejected"):
                a = row[side][-1]["content"]
                reference[q, a] = _answer_logprob(ref_model, tokenizer, q, a)
    # the initial model is its own reference: every margin is 0, no pair is preferred yet
    return [
        (step, dpo_preference_accuracy(path, reference, tokenizer, rows)) for step, path in points
    ]


@dataclass
class Result:
    """One row of the table."""

    algorithm_type: str
    steps: int
    metric: str
    first: float
    last: float
    wall_s: float
    passed: bool
    bar: str
    curve: list[tuple[int, float]]
    error: str = ""
    note: str = ""
    #: curves shown beside the one the bar is checked on (DPO's held-out metric)
    extra_curves: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    #: the value an extra curve must end at (at least), checked in ``passed`` (the greedy
    #: accuracy of the distillation types); an extra curve not named here is shown only
    extra_bars: dict[str, float] = field(default_factory=dict)


#: The extra curve of the types with :attr:`TypeSpec.greedy_min`.
GREEDY_CURVE = "greedy accuracy"


def _extra_passed(curve: list[tuple[int, float]], minimum: float) -> bool:
    return bool(curve) and curve[-1][1] >= minimum


def _window_means(curve: list[tuple[int, float]], window: int) -> tuple[float, float]:
    values = [v for _, v in curve]
    if not values:
        return math.nan, math.nan
    head, tail = values[:window], values[-window:]
    return sum(head) / len(head), sum(tail) / len(tail)


def _launch(
    config_path: Path, log_path: Path, timeout: float, ray_address: Optional[str] = None
) -> tuple[int, str]:
    env = dict(os.environ)
    ray_tmp = None
    if ray_address:
        env["RAY_ADDRESS"] = ray_address  # join the matrix's Ray (see shared_ray)
    else:
        env.pop("RAY_ADDRESS", None)  # a local Ray per run
        ray_tmp = tempfile.mkdtemp(prefix="tr-lm-")  # Ray's socket paths must stay short
        env["TRINITY_RAY_TMPDIR"] = ray_tmp
    launcher = Path(sys.executable).parent / "trinity-launch"
    try:
        with log_path.open("w") as log:
            done = subprocess.run(
                [str(launcher), str(config_path)],
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=timeout,
            )
        return done.returncode, ""
    except subprocess.TimeoutExpired:
        return -1, f"timed out after {timeout:.0f} s"
    finally:
        if ray_tmp:
            shutil.rmtree(ray_tmp, ignore_errors=True)


@contextlib.contextmanager
def shared_ray() -> Iterator[str]:
    """One local Ray for a whole matrix (its address; every launcher run joins it).

    Starting Ray costs each run ~10 s on 2 cores; a run that joins a cluster leaves it running
    when it ends (its own actors go with its driver), so the next type starts on a clean one.
    """
    import ray

    tmp = tempfile.mkdtemp(prefix="tr-lm-")  # Ray's socket paths must stay short
    try:
        ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False, _temp_dir=tmp)
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


def run_type(
    name: str,
    out: Path,
    model: str,
    ci: bool = False,
    timeout: float = 1800,
    ray_address: Optional[str] = None,
) -> Result:
    """Train ``name`` (a type of :data:`TYPES` or a run of :data:`VARIANTS`) as its spec says;
    return its row (``passed`` against the bar of the full or the reduced matrix)."""
    algorithm_type, spec = spec_of(name)
    bar = CI_BAR if ci else FULL_BAR
    steps = spec.ci_steps if ci else spec.steps
    variant = VARIANTS.get(name)
    if variant is not None and variant.bars is not None:
        bar = variant.bars[1] if ci else variant.bars[0]
    if variant is not None and variant.steps is not None:
        steps = variant.steps[1] if ci else variant.steps[0]
    root = out / "runs"
    names = {"model": model}
    for need in variant.needs if variant is not None else ():
        names[need] = _BUILDERS[need](out)
    if spec.kind == "rl":
        config = rl_config(algorithm_type, steps, model, root, name=name)
    elif spec.kind == "distill":
        try:
            names["teacher"] = build_teacher(out, model, timeout, ray_address)
        except RuntimeError as exc:
            return Result(
                name,
                steps,
                RL_METRIC,
                math.nan,
                math.nan,
                0.0,
                False,
                bar.describe(),
                [],
                str(exc),
                spec.note,
            )
        config = rl_config(algorithm_type, steps, build_student(out), root, name=name)
    else:
        every = spec.ci_save_every if ci else spec.save_every
        config = offline_config(algorithm_type, steps, every, model, root)
    config = _fill(deep_merge(config, spec.overrides), names)
    run_dir = root / config["project"] / config["group"] / config["name"]
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    config_path = run_dir / "config.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    start = time.monotonic()
    code, error = _launch(config_path, run_dir / "launch.log", timeout, ray_address)
    curve: list[tuple[int, float]] = []
    extra: dict[str, list[tuple[int, float]]] = {}
    extra_bars: dict[str, float] = {}
    metric = RL_METRIC
    if code == 0 and spec.kind in ("rl", "distill"):
        rows = _rows(run_dir / "metrics.jsonl")
        curve = [(int(r["step"]), float(r[RL_METRIC])) for r in rows if RL_METRIC in r]
        if spec.greedy_min:
            greedy = [(int(r["step"]), float(r[GREEDY_METRIC])) for r in rows if GREEDY_METRIC in r]
            extra[GREEDY_CURVE] = greedy
            extra_bars[GREEDY_CURVE] = spec.greedy_min
    elif code == 0 and spec.kind == "sft":
        metric = "held-out accuracy"
        curve = offline_curve("sft", model, run_dir)
    elif code == 0 and spec.kind == "cpt":
        # the bar on the text it trained on (what a language-model objective learns); the
        # held-out problems' shown beside
        metric = "raw-text accuracy, training problems"
        curve = offline_curve("cpt", model, run_dir, split="train")
        extra = {"held-out problems": offline_curve("cpt", model, run_dir, split="test")}
    elif code == 0:
        # the bar on the training problems' preferences; the held-out problems' shown beside
        # (DPO does not generalise to them on this task, see docs/learning.md)
        metric = "preference accuracy vs every wrong answer, training problems"
        curve = offline_curve("dpo", model, run_dir, split="train")
        extra = {"held-out problems": offline_curve("dpo", model, run_dir, split="test")}
    elif not error:
        tail = (run_dir / "launch.log").read_text()[-2000:]
        error = f"trinity-launch exited {code}: {tail}"
    wall = time.monotonic() - start
    first, last = _window_means(curve, bar.window)
    passed = bool(curve) and bar.check(first, last)
    passed = passed and all(_extra_passed(extra.get(k, []), m) for k, m in extra_bars.items())
    return Result(
        name,
        steps,
        metric,
        first,
        last,
        wall,
        passed,
        bar.describe(),
        curve,
        error,
        spec.note,
        extra,
        extra_bars,
    )


def build_model(out: Path) -> str:
    """The quickstart's tiny model (``--preset arithmetic``), built under ``out``."""
    from trinity.launcher.tiny_model import PRESETS, build_tiny_model

    return str(build_tiny_model(str(out / "tiny-model"), PRESETS["arithmetic"]))


def build_vlm_model(out: Path) -> str:
    """The ``vlm`` tiny preset (a random Qwen2.5-VL), built under ``out``."""
    from trinity.launcher.tiny_model import PRESETS, build_tiny_model

    return str(build_tiny_model(str(out / "tiny-vlm"), PRESETS["vlm"]))


def build_counting(out: Path) -> str:
    """The counting task set (200 training pictures, 50 held out), written under ``out``."""
    from trinity.launcher.counting_task import write_counting_taskset

    return str(write_counting_taskset(out / "counting", rows=200, seed=0))


#: What a variant's ``needs`` name, built by :func:`run_type`.
_BUILDERS: dict[str, Callable[[Path], str]] = {
    "vlm_model": build_vlm_model,
    "counting": build_counting,
}


def build_student(out: Path) -> str:
    """The distillation types' student: the quickstart's tiny model from weight seed
    :data:`STUDENT_SEED` (fresh random weights), built under ``out``."""
    from trinity.launcher.tiny_model import PRESETS, build_tiny_model

    spec = replace(PRESETS["arithmetic"], seed=STUDENT_SEED)
    return str(build_tiny_model(str(out / "tiny-student"), spec))


def build_teacher(
    out: Path, model: str, timeout: float = 1800, ray_address: Optional[str] = None
) -> str:
    """The distillation types' teacher: the quickstart (GRPO on its task, from ``model``)
    trained :data:`TEACHER_STEPS` steps; returns its last checkpoint's Hugging Face weights.

    Built once per run directory (``out/runs/learning-matrix/cpu/teacher``) and reused while
    those weights are there; ``out/teacher.json`` records its reward (first / last 5 steps)
    and greedy accuracy at the start and the end.

    Raises:
        RuntimeError: the teacher's run failed (its log's tail in the message).
    """
    root = out / "runs"
    config = rl_config("grpo", TEACHER_STEPS, model, root, name="teacher")
    run_dir = root / config["project"] / config["group"] / config["name"]
    weights = run_dir / f"global_step_{TEACHER_STEPS}" / "actor" / "huggingface"
    if (weights / "config.json").is_file():
        return str(weights)
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    config_path = run_dir / "config.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    start = time.monotonic()
    code, error = _launch(config_path, run_dir / "launch.log", timeout, ray_address)
    if code != 0 or not (weights / "config.json").is_file():
        tail = (run_dir / "launch.log").read_text()[-2000:]
        raise RuntimeError(f"the teacher's run failed ({error or f'exit {code}'}): {tail}")
    rows = _rows(run_dir / "metrics.jsonl")
    reward = [(int(r["step"]), float(r[RL_METRIC])) for r in rows if RL_METRIC in r]
    greedy = [float(r[GREEDY_METRIC]) for r in rows if GREEDY_METRIC in r]
    first, last = _window_means(reward, FULL_BAR.window)
    summary = {
        "weights": str(weights),
        "steps": TEACHER_STEPS,
        "reward_first_5": first,
        "reward_last_5": last,
        "greedy_accuracy_start": greedy[0] if greedy else None,
        "greedy_accuracy_end": greedy[-1] if greedy else None,
        "wall_s": time.monotonic() - start,
    }
    (out / "teacher.json").write_text(json.dumps(summary, indent=1) + "\n")
    return str(weights)


def load_results(out: Path) -> list[Result]:
    """The rows of ``out/learning_matrix.json`` (none if it is missing)."""
    return read_results(out / "learning_matrix.json")


def read_results(path: Path) -> list[Result]:
    """The rows of a results JSON (``write_results``' format; none if ``path`` is missing)."""
    if not path.is_file():
        return []
    rows = json.loads(path.read_text())
    return [
        Result(
            **{
                **r,
                "curve": [tuple(p) for p in r["curve"]],
                "extra_curves": {
                    k: [tuple(p) for p in v] for k, v in r.get("extra_curves", {}).items()
                },
            }
        )
        for r in rows
    ]


def merge_results(recorded: list[Result], new: list[Result]) -> list[Result]:
    """``recorded`` with ``new``'s rows put in (a run's row replaces the recorded one of the
    same name), in :data:`TYPES` then :data:`VARIANTS` order; rows of names no longer in the
    matrix are dropped."""
    rows = {r.algorithm_type: r for r in recorded}
    rows.update({r.algorithm_type: r for r in new})
    return [rows[name] for name in [*TYPES, *VARIANTS] if name in rows]


def run_matrix(
    types: list[str],
    out: Path,
    ci: bool = False,
    on_result: Optional[Callable[[Result], None]] = None,
    share_ray: bool = True,
) -> list[Result]:
    """Run ``types`` one after the other; write ``out/learning_matrix.{json,md,png}`` after
    each type (a partial matrix survives an interruption). ``share_ray``: every run joins one
    Ray started here (:func:`shared_ray`) instead of starting its own."""
    for name in types:
        spec_of(name)  # an unknown name fails before anything runs
    out.mkdir(parents=True, exist_ok=True)
    model = build_model(out)
    # rows of types run earlier into the same directory stay (re-running one type updates it)
    kept = {r.algorithm_type: r for r in load_results(out)}
    results: list[Result] = []
    with contextlib.ExitStack() as stack:
        address = stack.enter_context(shared_ray()) if share_ray else None
        for name in types:
            result = run_type(name, out, model, ci=ci, ray_address=address)
            results.append(result)
            kept[name] = result
            write_results([kept[t] for t in [*TYPES, *VARIANTS] if t in kept], out)
            if on_result is not None:
                on_result(result)
    return results


def table(results: list[Result]) -> str:
    """The results as a Markdown table."""
    lines = [
        "| type | steps | metric | first 5 | last 5 | bar | passed | wall (s) |",
        "|---|---:|---|---:|---:|---|---|---:|",
    ]
    for r in results:
        lines.append(
            f"| `{r.algorithm_type}` | {r.steps} | {r.metric} | {r.first:.2f} | {r.last:.2f} "
            f"| {r.bar} | {'yes' if r.passed else '**no**'} | {r.wall_s:.0f} |"
        )
        for name, curve in r.extra_curves.items():
            if name in r.extra_bars:  # its start and end, the end checked
                minimum = r.extra_bars[name]
                start, end = (curve[0][1], curve[-1][1]) if curve else (math.nan, math.nan)
                ok = "yes" if _extra_passed(curve, minimum) else "**no**"
                lines.append(
                    f"| `{r.algorithm_type}` | {r.steps} | {name} (start, end) | {start:.2f} | "
                    f"{end:.2f} | end >= {minimum:g} | {ok} | — |"
                )
                continue
            first, last = _window_means(curve, FULL_BAR.window)
            lines.append(
                f"| `{r.algorithm_type}` | {r.steps} | the same, {name} | {first:.2f} | "
                f"{last:.2f} | not met: see the notes | — | — |"
            )
    return "\n".join(lines)


def _short(metric: str) -> str:
    """A panel title's metric: ``rollout/reward/mean`` -> ``reward``; the first words else."""
    if "/" in metric:
        return metric.split("/")[-2]
    return metric.split(",")[0].replace(" vs every wrong answer", "")


def write_results(results: list[Result], out: Path, png_name: str = "learning_matrix.png") -> Path:
    """``out/learning_matrix.json`` / ``.md`` and the PNG (one panel per type); return the PNG."""
    out.mkdir(parents=True, exist_ok=True)
    _write_json(results, out / "learning_matrix.json")
    (out / "learning_matrix.md").write_text(table(results) + "\n")
    return plot_results(results, out / png_name)


def _write_json(results: list[Result], path: Path) -> None:
    path.write_text(json.dumps([asdict(r) for r in results], indent=1) + "\n")


def plot_results(results: list[Result], png: Path) -> Path:
    """The rows' curves into ``png``, one panel per curve (nothing drawn if none has points)."""
    from trinity.launcher.plot import plot_curves

    curves: dict[str, list[tuple[int, float]]] = {}
    for r in results:
        curves[f"{r.algorithm_type} ({_short(r.metric)})"] = r.curve
        for name, curve in r.extra_curves.items():
            curves[f"{r.algorithm_type} ({name})"] = curve
    if not any(curves.values()):
        return png
    return Path(
        plot_curves(
            curves,
            str(png),
            title="learning matrix: reward / metric per step (tiny model, CPU)",
            ylabel="reward / metric",
            ncols=4,
            dpi=60,
        )
    )


def update_doc(
    results: list[Result],
    doc: Path = DOC,
    doc_png: Path = DOC_PNG,
    doc_json: Path = DOC_JSON,
) -> list[Result]:
    """Merge ``results`` into the recorded rows (``doc_json``, the rows behind the table; a
    row of ``results`` replaces the recorded one of its name, the others stay), write them
    back, and replace the part of ``doc`` between the matrix markers with their table and
    ``doc_png`` with their curves. Returns the merged rows.

    So a run of a few types (``--types rloo --doc``) updates their rows without dropping the
    rest of the matrix."""
    text = doc.read_text()
    if BEGIN not in text or END not in text:
        raise ValueError(f"{doc} lacks the markers {BEGIN} / {END}")
    rows = merge_results(read_results(doc_json), results)
    _write_json(rows, doc_json)
    plot_results(rows, doc_png)
    body = f"{BEGIN}\n{table(rows)}\n\n![learning curves]({doc_png.name})\n{END}"
    head, rest = text.split(BEGIN, 1)
    doc.write_text(head + body + rest.split(END, 1)[1])
    return rows


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--types",
        default=",".join([*TYPES, *VARIANTS]),
        help="comma-separated types (and variants: " + ", ".join(VARIANTS) + ")",
    )
    parser.add_argument("--ci", action="store_true", help="the reduced matrix (CI's bar)")
    parser.add_argument("--out", default=None, help="run directory (default: a temporary one)")
    parser.add_argument(
        "--doc",
        action="store_true",
        help="merge the rows into docs/learning_matrix.json and write docs/learning.md's table",
    )
    parser.add_argument(
        "--ray-per-run", action="store_true", help="each run starts its own Ray (default: shared)"
    )
    args = parser.parse_args(argv)
    out = Path(args.out or tempfile.mkdtemp(prefix="learning-matrix-")).resolve()
    types = [t.strip() for t in args.types.split(",") if t.strip()]

    def show(r: Result) -> None:
        status = "learned" if r.passed else f"DID NOT LEARN {r.error[:300]}"
        print(
            f"{r.algorithm_type:18s} {r.steps:3d} steps  {r.first:.2f} -> {r.last:.2f}  "
            f"{r.wall_s:5.0f} s  {status}",
            flush=True,
        )

    print(f"learning matrix in {out}", flush=True)
    results = run_matrix(types, out, ci=args.ci, on_result=show, share_ray=not args.ray_per_run)
    if args.doc:
        update_doc(load_results(out))
    print(table(results))
    return 0 if all(r.passed for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
