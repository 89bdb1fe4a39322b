"""Every Python block of the developer guides, cut out of the guide texts and run as printed.

``seed_guides.py`` cuts the fenced ```` ```python ```` blocks out of ``shared/seeds/*.txt`` at test
time and runs each, unchanged, in a fresh module namespace after the imports the guides leave
out. :data:`BLOCKS` classifies every block (by the SHA-256 of its text) and says how it is run;
a block that is new or edited in a guide is unclassified and fails
:func:`test_every_guide_block_is_classified` until someone decides how to run it.

The registered components then go through short real loops on a tiny Qwen2 built here: the
workflows roll out on the ``transformers`` engine; the algorithm blocks resolve from the guide's
YAML, compute advantages in the experience pipeline (with the guide's ``RewardFilter``) and
take an optimizer step with the guide's loss; and the newest guide's OPMD and ``RewardFilter``
train for real in mode ``both`` through ``trinity-launch --plugin-dir`` — the guide's
registrations of ``"opmd"`` and ``"reward_filter"`` replace the built-ins of those names,
without any help.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

from trinity.algorithm import ALGORITHM_TYPE
from trinity.algorithm.advantage_fn import ADVANTAGE_FN, AdvantageFn, GroupAdvantage
from trinity.algorithm.policy_loss_fn import POLICY_LOSS_FN, PolicyLossFn
from trinity.algorithm.resolve import resolve_algorithm
from trinity.buffer.operators import EXPERIENCE_OPERATORS, ExperienceOperator
from trinity.buffer.pipelines import ExperiencePipeline
from trinity.common.experience import EID
from trinity.common.workflows import WORKFLOWS, Task, Workflow, run_task

sys.path.insert(0, str(Path(__file__).parent))
from seed_guides import (  # noqa: E402
    SEEDS,
    guide_blocks,
    plugin_source,
    run_blocks,
    unregister_guide_classes,
)

HERE = Path(__file__).parent
SNIPPETS = HERE / "snippets"  # the guides' YAML
HELPERS = HERE / "real_run_plugins"

# ---------------------------------------------------------------------- the table
#: block key -> (what it is, how this file runs it). Keys: see ``seed_guides.guide_blocks``.
BLOCKS: dict[str, tuple[str, str]] = {
    # Workflows
    "35d56c021f": ("Workflow base class (keyword-only __init__)", "workflow interface"),
    "9e7beab751": ("Workflow base class, older guide (model, task)", "workflow interface"),
    "03f9bd1dd3": ("ExampleWorkflow.__init__ step", "step chain, first"),
    "dc0112d4fb": ("ExampleWorkflow.__init__ step, older guide", "step chain, first"),
    "4917fe85a3": ("ExampleWorkflow.run step ('# the __init__ function')", "step chain, continues"),
    "b5ff9ff5d2": ("registration step ('# import some packages')", "step chain, last"),
    "c0ea723e3b": ("resettable/reset step ('# some code')", "step chain, last"),
    "809dbf1cdd": ("__init__.py of the contributed workflow", "package __init__"),
    "dfb69e60a8": ("full ExampleWorkflow", "workflow"),
    "3c0cee2d43": ("full ExampleWorkflow, older guide", "workflow"),
    # Algorithms
    "cc93483705": ("OPMDGroupAdvantage", "algorithm loop; mode both"),
    "8e2568a7b9": ("OPMDAdvantageFn skeleton, older guide", "algorithm loop (skeleton)"),
    "8c6c905625": ("OPMDPolicyLossFn with masked_mean", "algorithm loop"),
    "5c28a23949": ("OPMDPolicyLossFn with masked_loss", "algorithm loop; mode both"),
    "187213120b": ("OPMDAlgorithm", "algorithm loop; mode both"),
    "1ba52aa715": ("OPMDAlgorithm, older guide (use_advantage, ExperienceModel)", "algorithm loop"),
    # Operators
    "5b23e8d8fa": ("ExperienceOperator interface", "operator interface"),
    "a31976c93c": ("RewardFilter", "algorithm loop; mode both"),
    # Config generator (Studio)
    "c68e967898": ("CONFIG_GENERATORS.register_config set_train_batch_size", "studio"),
    "1f1dbb48e3": ("CONFIG_GENERATORS.register_check check_train_batch_size", "studio"),
    "3d2737750d": ("ConfigManager._expert_buffer_part fragment", "studio manager"),
    "8743998136": ("ConfigManager._gen_buffer_config fragment", "studio manager"),
}

#: The workflow registrations rolled out: label -> blocks run in one namespace, in order.
WORKFLOW_RUNS = {
    "full": ("dfb69e60a8",),
    "full, older guide": ("3c0cee2d43",),
    "steps, registered": ("03f9bd1dd3", "4917fe85a3", "b5ff9ff5d2"),
    "steps, reset": ("03f9bd1dd3", "4917fe85a3", "c0ea723e3b"),
    "steps of the older guide, registered": ("dc0112d4fb", "4917fe85a3", "b5ff9ff5d2"),
    "steps of the older guide, reset": ("dc0112d4fb", "4917fe85a3", "c0ea723e3b"),
}
PACKAGE_INIT, PACKAGE_MODULE = "809dbf1cdd", "dfb69e60a8"

#: The algorithm registrations trained in-process: label -> (advantage, loss, algorithm).
ALGORITHM_RUNS = {
    "newest guide (masked_loss)": ("cc93483705", "5c28a23949", "187213120b"),
    "developer guide (masked_mean)": ("cc93483705", "8c6c905625", "187213120b"),
    "older guide": ("8e2568a7b9", "8c6c905625", "1ba52aa715"),
}
REWARD_FILTER = "a31976c93c"
#: What the older guide's blocks use without defining: its ``schema`` class (Trinity-RFT 0.1's
#: buffer model, a name our ``AlgorithmType`` maps to "experience"), the verl batch type its
#: skeleton annotates, and the ``metrics`` its skeleton returns ("# record some metrics").
OLDER_GUIDE_NAMES = {"ExperienceModel": type("ExperienceModel", (), {}), "metrics": {}}


@pytest.fixture(autouse=True)
def _undo_registrations():
    yield
    unregister_guide_classes()


def test_every_guide_block_is_classified():
    blocks = guide_blocks()
    unclassified = {k: b.places for k, b in blocks.items() if k not in BLOCKS}
    assert not unclassified, (
        "guide blocks nobody decided how to run (new or edited in the guide): "
        + "; ".join(f"{k} at {', '.join(p)}:\n{blocks[k].text}" for k, p in unclassified.items())
    )
    assert not set(BLOCKS) - set(blocks), "table rows whose block is no longer in any guide"
    ran = {k for keys in WORKFLOW_RUNS.values() for k in keys} | {PACKAGE_INIT}
    ran |= {k for keys in ALGORITHM_RUNS.values() for k in keys} | {REWARD_FILTER}
    for key, (_, how) in BLOCKS.items():
        if how.startswith(("workflow", "step", "package", "algorithm")) and "interface" not in how:
            assert key in ran, f"{key} ({BLOCKS[key][0]}) is classified but never run"


def test_the_web_page_is_the_algorithm_guide_without_indentation():
    """004 is 003 as a rendered web page: no fences, code lines unindented. Its code is 003's
    blocks line for line (whitespace aside), so the runs of 003's blocks cover it."""
    blocks = guide_blocks()  # skips when the guides are not here
    web = (SEEDS / "004_ac676189faf0a5bd.txt").read_text(encoding="utf-8")
    assert "```" not in web

    def squash(line: str) -> str:
        return re.sub(r"\s+", " ", line).strip()

    web_lines = [squash(line) for line in web.splitlines()]
    md_keys = [k for k, b in blocks.items() if any(p.startswith("003_") for p in b.places)]
    assert len(md_keys) == 3
    for key in md_keys:
        code = [squash(line) for line in blocks[key].text.splitlines() if line.strip()]
        starts = [i for i, line in enumerate(web_lines) if line == code[0]]
        assert any(web_lines[i : i + len(code)] == code for i in starts), key


# ---------------------------------------------------------------------- interfaces
@pytest.mark.parametrize(
    ("key", "call"),
    [("35d56c021f", "keywords"), ("9e7beab751", "positional")],
)
def test_workflow_interface_blocks_describe_our_base_class(key, call):
    printed = run_blocks(key).Workflow
    assert printed.__abstractmethods__ == {"run"}
    model, task = object(), Task(workflow="x", raw_task={})

    class Printed(printed):
        def run(self):
            return []

    class Ours(Workflow):
        def run(self):
            return []

    for cls in (Printed, Ours):  # what a subclass's super().__init__ passes, both accept
        if call == "keywords":
            wf = cls(task=task, model=model, auxiliary_models=None)
        else:
            wf = cls(model, task, None)
        assert wf.model is model and wf.auxiliary_models is None


def test_operator_interface_block_describes_our_base_class():
    printed = run_blocks("5b23e8d8fa").ExperienceOperator
    assert printed.__abstractmethods__ == {"process"}
    assert "process" in ExperienceOperator.__abstractmethods__


# ---------------------------------------------------------------------- workflows, real rollouts
@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    from trinity.launcher.tiny_model import build_tiny_model

    path = tmp_path_factory.mktemp("tiny-qwen2")
    build_tiny_model(path)
    return str(path)


@pytest.fixture(scope="module")
def rollout_model(tiny_model):
    """A real rollout model: the ``transformers`` engine on the tiny model, in this process."""
    from trinity.launcher.engines import EngineModelWrapper, EngineSettings, create_engine

    engine = create_engine(
        EngineSettings(
            model_path=tiny_model,
            engine_type="transformers",
            dtype="float32",
            max_model_len=128,
            max_prompt_tokens=64,
            max_response_tokens=4,
        )
    )
    asyncio.run(engine.start())
    yield EngineModelWrapper(engine, engine.settings)
    asyncio.run(engine.shutdown())


def _rollout(workflow_name: str, model, answer: str, n: int = 3) -> list:
    from trinity.common.config import GenerationConfig

    task = Task(
        workflow=workflow_name,
        raw_task={"question": "1+1=", "answer": answer},
        rollout_args=GenerationConfig(n=n, temperature=1.0),
    )
    model.seed_task("guide-blocks")  # the same samples on every call
    return run_task(task, model)


def _check_real_rollouts(model) -> None:
    """The registered ``example_workflow`` samples from the tiny model; its reward is exactly
    ``response_text == answer`` (the second run asks for the first run's first sample)."""
    first = _rollout("example_workflow", model, answer="no such answer")
    assert len(first) == 3 and all(e.reward == 0.0 for e in first)
    texts = [
        model.tokenizer.decode(e.tokens[e.prompt_length :], skip_special_tokens=True) for e in first
    ]
    text = model.tokenizer.apply_chat_template(
        [{"role": "user", "content": "Question:\n1+1="}], add_generation_prompt=True, tokenize=False
    )
    prompt = model.tokenizer.encode(text, add_special_tokens=False)
    for exp in first:
        assert exp.tokens[: exp.prompt_length].tolist() == list(prompt)
        assert exp.logprobs.shape == (len(exp.tokens) - exp.prompt_length,)
        assert torch.all(exp.logprobs <= 0)
    again = _rollout("example_workflow", model, answer=texts[0])
    assert [e.tokens.tolist() for e in again] == [e.tokens.tolist() for e in first]
    assert [e.reward for e in again] == [1.0 if t == texts[0] else 0.0 for t in texts]


@pytest.mark.slow
@pytest.mark.parametrize("label", list(WORKFLOW_RUNS))
def test_workflow_blocks_roll_out_on_the_tiny_model(label, rollout_model):
    module = run_blocks(*WORKFLOW_RUNS[label])
    cls = WORKFLOWS.get("example_workflow")
    assert cls is module.ExampleWorkflow and issubclass(cls, Workflow)
    _check_real_rollouts(rollout_model)
    if label.endswith("reset"):  # the guide's reset() swaps the task of a reused workflow
        wf = Task(workflow="example_workflow", raw_task={"question": "a", "answer": "b"})
        wf = wf.to_workflow(rollout_model)
        assert wf.resettable()
        wf.reset(Task(workflow="example_workflow", raw_task={"question": "c", "answer": "d"}))
        assert (wf.question, wf.answer) == ("c", "d")


@pytest.mark.slow
def test_contributed_package_init_block_registers_the_workflow(
    tmp_path, monkeypatch, rollout_model
):
    """The guide's ``__init__.py`` lines over a module holding the full example, as a package."""
    package = tmp_path / "guide_block_contrib"
    package.mkdir()
    (package / "__init__.py").write_text(guide_blocks()[PACKAGE_INIT].text)
    (package / "example_workflow.py").write_text(plugin_source(PACKAGE_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    contrib = importlib.import_module("guide_block_contrib")
    assert contrib.__all__ == ["ExampleWorkflow"]
    assert WORKFLOWS.get("example_workflow") is contrib.ExampleWorkflow
    _check_real_rollouts(rollout_model)


# ---------------------------------------------------------------------- algorithms, real step
@pytest.fixture(scope="module")
def policy(tiny_model):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)


class ListWriter:
    def __init__(self):
        self.written: list = []

    async def write_async(self, exps):
        self.written.extend(exps)


def _samples(model, tasks: int = 2, n: int = 4) -> list:
    """Real samples of the tiny model; reward = run index / (n - 1), so groups differ."""
    exps = []
    for t in range(tasks):
        model.seed_task("guide-algorithm", t)
        out = model.chat([{"role": "user", "content": f"{t}+{t}="}], n=n)
        for r, exp in enumerate(out):
            exp.eid = EID(batch=0, task=t, run=r)
            exp.reward = r / (n - 1)
            exps.append(exp)
    return exps


def _train_step(policy, loss_fn, exps) -> tuple[float, dict]:
    """One optimizer step of ``loss_fn`` on the experiences (response tokens, right-padded)."""
    width = max(len(e.tokens) - e.prompt_length for e in exps)
    logprob = torch.zeros(len(exps), width)
    mask = torch.zeros(len(exps), width, dtype=torch.bool)
    adv = torch.zeros(len(exps), width)
    rows = []
    for i, e in enumerate(exps):
        logits = policy(e.tokens.unsqueeze(0)).logits[0, e.prompt_length - 1 : -1]
        target = e.tokens[e.prompt_length :]
        rows.append(torch.log_softmax(logits, -1).gather(-1, target.unsqueeze(-1)).squeeze(-1))
        mask[i, : len(target)] = e.action_mask.bool()
        adv[i, : len(target)] = e.advantages
    logprob = torch.stack([torch.nn.functional.pad(r, (0, width - len(r))) for r in rows])
    loss, metrics = loss_fn(logprob=logprob, action_mask=mask, advantages=adv)
    policy.zero_grad()
    loss.backward()
    grad = math.sqrt(
        sum(float((p.grad**2).sum()) for p in policy.parameters() if p.grad is not None)
    )
    return float(loss.detach()), {**metrics, "grad_norm": grad}


@pytest.mark.slow
@pytest.mark.parametrize("label", list(ALGORITHM_RUNS))
def test_algorithm_blocks_resolve_process_and_train(label, rollout_model, policy, tmp_path):
    adv_key, loss_key, algo_key = ALGORITHM_RUNS[label]
    extra = OLDER_GUIDE_NAMES if label == "older guide" else None
    run_blocks(adv_key, extra=extra)
    loss_mod = run_blocks(loss_key)
    algo_mod = run_blocks(algo_key, extra=extra)
    op_mod = run_blocks(REWARD_FILTER)
    adv_cls = ADVANTAGE_FN.get("opmd")
    assert adv_cls.__module__.startswith("guide_block_") and issubclass(adv_cls, AdvantageFn)
    assert POLICY_LOSS_FN.get("opmd") is loss_mod.OPMDPolicyLossFn
    assert issubclass(loss_mod.OPMDPolicyLossFn, PolicyLossFn)
    assert ALGORITHM_TYPE.get("opmd") is algo_mod.OPMDAlgorithm
    assert EXPERIENCE_OPERATORS.get("reward_filter") is op_mod.RewardFilter

    # the guide's YAML names them; the config resolves to the guide's classes
    algorithm = yaml.safe_load((SNIPPETS / "guide_algorithm.yaml").read_text())["algorithm"]
    resolved = resolve_algorithm(algorithm)
    assert resolved.algorithm is algo_mod.OPMDAlgorithm
    assert resolved.classes["advantage_fn"] is adv_cls
    assert resolved.classes["policy_loss_fn"] is loss_mod.OPMDPolicyLossFn
    operators = yaml.safe_load((SNIPPETS / "guide_operators.yaml").read_text())
    operators = operators["data_processor"]["experience_pipeline"]["operators"]

    exps = _samples(rollout_model)  # rewards 0, 1/3, 2/3, 1 in each of two groups
    adv_fn = resolved.build_advantage_fn()
    writer = ListWriter()
    if label == "older guide":
        # use_advantage=True: the trainer's job; the printed skeleton hands the batch back as is
        assert resolved.compute_advantage_in_trainer and not issubclass(adv_cls, GroupAdvantage)
        assert resolved.algorithm.schema_name() == "experience"
        out, metrics = adv_fn(exps)
        assert out is exps and metrics == {} and all(e.advantages is None for e in exps)
        pipeline = ExperiencePipeline({"operators": operators}, writer=writer)
        asyncio.run(pipeline.process(exps))
        assert [e.reward for e in writer.written] == [r / 3 for r in (1, 2, 3)] * 2
        return
    pipeline = ExperiencePipeline({"operators": operators}, writer=writer, advantage_fn=adv_fn)
    metrics = asyncio.run(pipeline.process(exps))
    # the guide's RewardFilter (threshold 0.1) dropped the reward-0 run of each group, then the
    # guide's OPMD advantage subtracted each group's mean reward (2/3)
    assert metrics["experience_pipeline/reward_filter/filtered_count"] == 2
    kept = writer.written
    assert [e.reward for e in kept] == [r / 3 for r in (1, 2, 3)] * 2
    for e in kept:
        torch.testing.assert_close(e.advantages, (e.reward - 2 / 3) * e.action_mask.float())
    assert metrics[
        "experience_pipeline/advantage_fn/group_advantages/group_baseline/mean"
    ] == pytest.approx(2 / 3)

    loss_fn = resolved.build_policy_loss_fn()
    before = [p.detach().clone() for p in policy.parameters()]
    loss, step = _train_step(policy, loss_fn, kept)
    assert math.isfinite(loss) and step["opmd_loss"] == pytest.approx(loss)
    assert step["grad_norm"] > 0
    torch.optim.SGD(policy.parameters(), lr=1e-2).step()
    assert any(
        not torch.equal(a, b.detach()) for a, b in zip(before, policy.parameters(), strict=True)
    )


# ---------------------------------------------------------------------- Studio blocks
def test_studio_blocks_register_and_check_a_config_entry():
    pytest.importorskip("streamlit")
    from trinity.manager.config_registry.config_registry import ConfigRegistry

    drawn: list = []
    warned: list = []
    st = SimpleNamespace(
        session_state={"trainer_gpu_num": 2},
        number_input=lambda label, **kw: drawn.append((label, kw)),
        warning=warned.append,
    )
    # A registry of the Studio's class stands in for the Studio's own, which already holds
    # ``train_batch_size`` (the guide re-creates an entry the Studio ships).
    generators = ConfigRegistry("guide_config_generators")
    names = {"CONFIG_GENERATORS": generators, "st": st}
    names["_str_for_train_batch_size"] = lambda: "divisible by the number of trainer GPUs"
    run_blocks("c68e967898", "1f1dbb48e3", extra=names)

    assert generators.default_config == {"train_batch_size": 96, "_train_batch_size_per_gpu": 16}
    st.session_state.update(generators.default_config)
    generators.get("train_batch_size")()
    assert st.session_state["train_batch_size"] == 32  # 16 per GPU x 2 GPUs
    ((label, kwargs),) = drawn
    assert label == "Train Batch Size" and kwargs["key"] == "train_batch_size"
    assert kwargs["min_value"] == kwargs["step"] == 2
    st.session_state["train_batch_size"] = 33
    fields: set = set()
    generators.get_check_func("train_batch_size")(unfinished_fields=fields)
    assert fields == {"train_batch_size"} and warned
    st.session_state["trainer_gpu_num"] = 0  # the entry's visibility condition
    assert generators.get("train_batch_size") is None


def test_studio_manager_fragments_name_entries_the_studio_has():
    pytest.importorskip("streamlit")
    from trinity.manager.config_registry import CONFIG_GENERATORS

    asked: list = []
    st = SimpleNamespace(session_state={"train_batch_size": 96})
    expert = run_blocks("3d2737750d").ConfigManager
    expert._expert_buffer_part(SimpleNamespace(get_configs=lambda *names: asked.extend(names)))
    assert asked == ["total_epochs", "train_batch_size"]
    assert set(asked) <= set(CONFIG_GENERATORS.default_config)
    gen = run_blocks("8743998136", extra={"st": st}).ConfigManager
    assert gen._gen_buffer_config(SimpleNamespace()) is None  # the fragment builds, returns nothing


# ---------------------------------------------------------------------- plugins, real run
TASKS = 12  # 3 explore steps of 4 tasks; every other task is marked keep
BATCH = 4
REPEAT = 4
KEPT_PER_STEP = BATCH // 2 * REPEAT  # 8: the trainer's batch
FILTERED_PER_STEP = BATCH * REPEAT - KEPT_PER_STEP
#: the newest guide's algorithm (003, with 000's identical advantage and type) and operator (000)
PLUGIN_BLOCKS = {
    "guide_opmd_advantage": "cc93483705",
    "guide_opmd_policy_loss": "5c28a23949",
    "guide_opmd_algorithm": "187213120b",
    "guide_reward_filter": REWARD_FILTER,
}


def _plugin_dir(root: Path, names=tuple(PLUGIN_BLOCKS)) -> Path:
    plugins = root / "plugins"
    plugins.mkdir()
    for name in names:
        (plugins / f"{name}.py").write_text(plugin_source(PLUGIN_BLOCKS[name]))
    return plugins


def _launch(*args: str, env: dict, timeout: float) -> tuple[int, str, str]:
    launch = Path(sys.executable).parent / "trinity-launch"
    proc = subprocess.Popen(
        [str(launch), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"trinity-launch did not finish in {timeout} s:\n{out[-3000:]}\n{err[-5000:]}")
    return proc.returncode, out, err


def _env(**extra: str) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", **extra)
    for var in ("RAY_ADDRESS", "TRINITY_PLUGIN_DIRS"):
        env.pop(var, None)
    return env


@pytest.mark.slow
def test_a_guide_block_alone_as_a_plugin_replaces_the_builtin(tmp_path, tiny_model):
    """No helper: the guide's ``opmd`` advantage loads next to the installed built-in, which it
    replaces with one warning naming both classes."""
    plugins = _plugin_dir(tmp_path, names=("guide_opmd_advantage",))
    shutil.copy(HELPERS / "keep_flag_reward.py", plugins)  # the config's reward
    config = _config(tmp_path, tiny_model, _tasks(tmp_path / "tasks.jsonl"))
    code, out, err = _launch(
        str(config), "--plugin-dir", str(plugins), "--dry-run", env=_env(), timeout=180
    )
    assert code == 0, out + err
    (warning,) = [line for line in err.splitlines() if "replaces the built-in" in line]
    assert "guide_opmd_advantage.OPMDGroupAdvantage" in warning
    assert "trinity.algorithm.advantage_fn.opmd.OPMDGroupAdvantage" in warning


def _tasks(path: Path) -> Path:
    rows = []
    for i in range(TASKS):
        a, b = i % 5, (i * 3) % 5
        rows.append({"question": f"{a}+{b}=", "answer": str(a + b), "keep": i % 2})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _config(root: Path, model_path: str, tasks: Path) -> Path:
    algorithm = yaml.safe_load((SNIPPETS / "guide_algorithm.yaml").read_text())["algorithm"]
    guide_operators = yaml.safe_load((SNIPPETS / "guide_operators.yaml").read_text())
    assert algorithm == {"algorithm_type": "opmd"}
    config = {
        "mode": "both",
        "project": "seed-plugins",
        "name": "opmd-reward-filter",
        "checkpoint_root_dir": str(root / "ckpt"),
        "algorithm": {**algorithm, "repeat_times": REPEAT, "optimizer": {"lr": 1e-3}},
        "data_processor": guide_operators["data_processor"],
        "model": {"model_path": model_path, "max_prompt_tokens": 32, "max_response_tokens": 4},
        "cluster": {"gpu_per_node": 0},
        "buffer": {
            "batch_size": BATCH,
            # the experiences the filter keeps of one explore step make one train step
            "train_batch_size": KEPT_PER_STEP,
            "total_epochs": 1,
            "explorer_input": {
                "taskset": {
                    "name": "arithmetic",
                    "path": str(tasks),
                    "format": {"prompt_key": "question", "response_key": "answer"},
                    "default_workflow_type": "arithmetic_workflow",
                    "default_reward_fn_type": "keep_flag_reward",
                }
            },
        },
        "explorer": {
            "runner_per_model": 1,  # one runner process: start-up dominates on 2 cores
            "eval_on_startup": False,
            "rollout_model": {"engine_type": "transformers", "dtype": "float32", "seed": 1},
        },
        "synchronizer": {"sync_method": "memory", "sync_interval": 1},
    }
    path = root / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@pytest.mark.slow
def test_guide_opmd_and_reward_filter_train_in_mode_both(tmp_path, tiny_model):
    """The guide's blocks as a plugin directory, in a real ``trinity-launch`` run: a tiny Qwen2,
    rollouts from the ``transformers`` engine in Ray actors, training on verl's FSDP2 engine
    (CPU, gloo), weights synchronised through memory. Two helpers complete the directory: a
    reward that makes the filter's split known in advance (``keep_flag_reward.py``) and one that
    records which classes hold the guide's names in each process."""
    plugins = _plugin_dir(tmp_path)
    for helper in HELPERS.glob("*.py"):
        shutil.copy(helper, plugins / helper.name)
    config = _config(tmp_path, tiny_model, _tasks(tmp_path / "tasks.jsonl"))
    record_dir = tmp_path / "registrations"
    record_dir.mkdir()
    ray_tmp = tempfile.mkdtemp(prefix="tr-ray-")  # Ray's socket paths must stay short
    env = _env(TRINITY_RAY_TMPDIR=ray_tmp, SEED_PLUGINS_RECORD_DIR=str(record_dir))
    try:
        code, out, err = _launch(str(config), "--plugin-dir", str(plugins), env=env, timeout=600)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert code == 0, out[-3000:] + err[-6000:]
    assert "Mode both finished" in out
    assert "algorithm: opmd (repeat_times=4)" in out

    # every process (driver and Ray workers) resolved the guide's names to the guide's classes
    records = [json.loads(p.read_text()) for p in record_dir.glob("*.json")]
    expected = {  # plugin files are trinity.plugins.<file name> (Trinity-RFT 0.6)
        "algorithm_type/opmd": "trinity.plugins.guide_opmd_algorithm.OPMDAlgorithm",
        "advantage_fn/opmd": "trinity.plugins.guide_opmd_advantage.OPMDGroupAdvantage",
        "policy_loss_fn/opmd": "trinity.plugins.guide_opmd_policy_loss.OPMDPolicyLossFn",
        "experience_operators/reward_filter": "trinity.plugins.guide_reward_filter.RewardFilter",
    }
    assert records and all(r == expected for r in records)

    run = tmp_path / "ckpt" / "seed-plugins" / "opmd-reward-filter"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, TASKS // BATCH + 1))
    for r in rows:
        # the RewardFilter dropped exactly the runs of the tasks marked keep: 0 ...
        assert r["rollout/experiences"] == BATCH * REPEAT
        assert r["experience_pipeline/reward_filter/filtered_count"] == FILTERED_PER_STEP
        assert r["experience_pipeline/experience_count"] == KEPT_PER_STEP
        # ... before the guide's advantage function, which saw only kept groups
        # (rewards in [1, 1.09]: their baselines lie there too)
        assert (
            1.0
            <= r["experience_pipeline/advantage_fn/group_advantages/group_baseline/mean"]
            <= 1.09
        )
        # the trainer stepped on the kept experiences with the guide's OPMD loss
        assert r["batch/size"] == KEPT_PER_STEP
        assert r["actor/opmd_loss"] == pytest.approx(r["actor/pg_loss"])
        assert math.isfinite(r["actor/opmd_loss"])
        assert "actor/kl_loss" in r  # the guide's default_config: kl_loss_fn k2
        assert r["actor/grad_norm"] > 0
    # OPMD's advantages are reward minus the group baseline: the loss is not trivially zero
    assert any(abs(r["actor/opmd_loss"]) > 0 for r in rows)
