"""Task sets: every file kind, splits/subsets, row -> Task, epochs, seeds, resume, malformed
rows and up-front errors."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import datasets
import pytest

from trinity.buffer.taskset import (
    SELECTOR_METRIC,
    TASK_SELECTORS,
    TASKSET_SCHEDULE_METRIC,
    TaskSelector,
    TasksetKeyError,
    TasksetLoadError,
    TasksetNotFoundError,
    TasksetReader,
    TasksetScheduler,
    feedback_from_metrics,
    get_taskset_reader,
    get_taskset_scheduler,
)
from trinity.common.config import FormatConfig, GenerationConfig, TasksetConfig
from trinity.common.workflows import Task

N = 10


def _rows(n: int = N, tag: str = "q") -> list[dict]:
    return [{"question": f"{tag}{i}", "answer": str(i), "difficulty": i / n} for i in range(n)]


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _config(path, **kw) -> TasksetConfig:
    base = dict(
        path=str(path),
        format={"prompt_key": "question", "response_key": "answer"},
        default_workflow_type="math_workflow",
        batch_size=3,
    )
    base.update(kw)
    return TasksetConfig(**base)


def _questions(tasks: list[Task]) -> list[str]:
    return [t.raw_task["question"] for t in tasks]


def _read_all(reader, batch_size=None) -> list[list[str]]:
    out = []
    while True:
        try:
            out.append(_questions(reader.read(batch_size)))
        except StopIteration:
            return out


# --------------------------------------------------------------------------------------
# file kinds, splits, subsets
# --------------------------------------------------------------------------------------


@pytest.fixture
def files(tmp_path):
    rows = _rows()
    ds = datasets.Dataset.from_list(rows)
    out = {"jsonl": _write_jsonl(tmp_path / "t.jsonl", rows)}
    out["json"] = tmp_path / "t.json"
    out["json"].write_text(json.dumps(rows))
    out["parquet"] = tmp_path / "t.parquet"
    ds.to_parquet(str(out["parquet"]))
    out["csv"] = tmp_path / "t.csv"
    ds.to_csv(str(out["csv"]), index=False)
    out["disk"] = tmp_path / "saved"
    ds.save_to_disk(str(out["disk"]))
    return out


@pytest.mark.parametrize("kind", ["jsonl", "json", "parquet", "csv", "disk"])
def test_every_file_kind_reads_the_same_tasks(files, kind):
    reader = get_taskset_reader(_config(files[kind]))
    assert len(reader) == N
    tasks = reader.read()
    assert _questions(tasks) == ["q0", "q1", "q2"]
    assert [t.task_desc for t in tasks] == ["q0", "q1", "q2"]
    assert [str(t.truth) for t in tasks] == ["0", "1", "2"]
    assert reader.malformed_rows == []


def test_row_becomes_a_task_with_the_taskset_settings(tmp_path):
    path = _write_jsonl(tmp_path / "t.jsonl", _rows(4))
    cfg = _config(
        path,
        name="math",
        default_reward_fn_type="math_reward",
        repeat_times=4,
        rollout_args={"temperature": 0.7, "max_tokens": 64},
        workflow_args={"use_tools": True, "nested": {"a": 1}},
        reward_fn_args={"scale": 2.0},
        format={"prompt_key": "question", "response_key": "answer", "system_prompt": "Be brief."},
    )
    tasks = get_taskset_reader(cfg, taskset_id=2).read(2)
    t = tasks[1]
    assert isinstance(t, Task)
    assert t.workflow == "math_workflow" and t.reward_fn == "math_reward"
    assert t.repeat_times == 4
    assert isinstance(t.format_args, FormatConfig) and t.format_args.system_prompt == "Be brief."
    assert isinstance(t.rollout_args, GenerationConfig) and t.rollout_args.temperature == 0.7
    assert t.workflow_args == {"use_tools": True, "nested": {"a": 1}}
    assert t.reward_fn_args == {"scale": 2.0}
    assert t.is_eval is False
    assert t.raw_task == {"question": "q1", "answer": "1", "difficulty": 0.25}
    assert t.task_id == 1
    assert t.index == {"taskset_id": 2, "index": 1, "taskset_name": "math"}
    # arguments are per task: a workflow editing them does not leak into other tasks
    tasks[0].workflow_args["nested"]["a"] = 99
    assert tasks[1].workflow_args["nested"]["a"] == 1
    tasks[0].rollout_args.n = 8  # the explorer sets n per task
    assert tasks[1].rollout_args.n == 1 and cfg.rollout_args.n == 1
    tasks[0].raw_task["question"] = "edited"
    assert get_taskset_reader(cfg).read_with_indices([0])[0].raw_task["question"] == "q0"


def test_per_row_workflow_and_reward_fn_override_the_defaults(tmp_path):
    rows = [
        {"question": "a", "wf": "special_workflow", "rf": "special_reward"},
        {"question": "b", "wf": None},
        {"question": "c"},
    ]
    path = _write_jsonl(tmp_path / "t.jsonl", rows)
    cfg = _config(
        path,
        default_reward_fn_type="math_reward",
        format={"prompt_key": "question", "workflow_key": "wf", "reward_fn_key": "rf"},
    )
    tasks = get_taskset_reader(cfg).read(3)
    assert [t.workflow for t in tasks] == ["special_workflow", "math_workflow", "math_workflow"]
    assert [t.reward_fn for t in tasks] == ["special_reward", "math_reward", "math_reward"]


def test_directory_with_split_files(tmp_path):
    _write_jsonl(tmp_path / "ds" / "train.jsonl", _rows(6, "train"))
    _write_jsonl(tmp_path / "ds" / "test.jsonl", _rows(2, "test"))
    train = get_taskset_reader(_config(tmp_path / "ds", split="train"))
    test = get_taskset_reader(_config(tmp_path / "ds", split="test", is_eval=True))
    assert len(train) == 6 and len(test) == 2
    assert _questions(test.read()) == ["test0", "test1"]
    with pytest.raises(
        TasksetNotFoundError, match=r"split 'validation'.*splits found: \['test', 'train'\]"
    ):
        get_taskset_reader(_config(tmp_path / "ds", split="validation"))


def test_hub_layout_with_subset_and_sharded_parquet(tmp_path):
    root = tmp_path / "gsm8k"
    for subset, tag in (("main", "m"), ("socratic", "s")):
        (root / subset).mkdir(parents=True)
        for shard in range(2):
            rows = _rows(3, f"{tag}{shard}_")
            datasets.Dataset.from_list(rows).to_parquet(
                str(root / subset / f"train-0000{shard}-of-00002.parquet")
            )
        datasets.Dataset.from_list(_rows(2, f"{tag}test")).to_parquet(
            str(root / subset / "test-00000-of-00001.parquet")
        )
    reader = get_taskset_reader(_config(root, subset_name="socratic", split="train"))
    assert len(reader) == 6
    assert _questions(reader.read(4)) == ["s0_0", "s0_1", "s0_2", "s1_0"]
    assert reader.data.origin(3) == (str(root / "socratic" / "train-00001-of-00002.parquet"), 1)
    test = get_taskset_reader(_config(root, subset_name="main", split="test"))
    assert _questions(test.read(2)) == ["mtest0", "mtest1"]
    with pytest.raises(TasksetNotFoundError, match=r"subset_name 'nope'.*\['main', 'socratic'\]"):
        get_taskset_reader(_config(root, subset_name="nope"))


def test_a_hub_name_goes_through_load_dataset(monkeypatch, tmp_path):
    calls = []

    def fake_load_dataset(path, name=None, split=None):
        calls.append((path, name, split))
        if path == "org/missing":
            raise ConnectionError("offline")
        return datasets.Dataset.from_list(_rows(3, "hub"))

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    reader = get_taskset_reader(_config("openai/gsm8k", subset_name="main", split="test"))
    assert calls == [("openai/gsm8k", "main", "test")]
    assert _questions(reader.read(2)) == ["hub0", "hub1"]
    with pytest.raises(TasksetNotFoundError, match="not a local file.*ConnectionError: offline"):
        get_taskset_reader(_config("org/missing"))


def test_save_to_disk_dataset_dict_split(tmp_path):
    dd = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_list(_rows(5, "tr")),
            "test": datasets.Dataset.from_list(_rows(3, "te")),
        }
    )
    dd.save_to_disk(str(tmp_path / "dd"))
    assert len(get_taskset_reader(_config(tmp_path / "dd", split="test"))) == 3
    assert _questions(get_taskset_reader(_config(tmp_path / "dd")).read(1)) == ["tr0"]
    with pytest.raises(TasksetNotFoundError, match=r"split 'dev'.*\['test', 'train'\]"):
        get_taskset_reader(_config(tmp_path / "dd", split="dev"))


# --------------------------------------------------------------------------------------
# epochs, steps, eval sets
# --------------------------------------------------------------------------------------


def test_epochs_wrap_across_batches_and_drop_the_final_partial_batch(tmp_path):
    path = _write_jsonl(tmp_path / "t.jsonl", _rows(5))
    reader = get_taskset_reader(_config(path, batch_size=2, total_epochs=2))
    assert reader.total_steps == 5
    assert _read_all(reader) == [
        ["q0", "q1"],
        ["q2", "q3"],
        ["q4", "q0"],
        ["q1", "q2"],
        ["q3", "q4"],
    ]
    one_epoch = get_taskset_reader(_config(path, batch_size=2, total_epochs=1))
    assert one_epoch.total_steps == 2
    assert len(_read_all(one_epoch)) == 2  # [q4] alone is not a full step


def test_total_steps_wins_over_epochs(tmp_path):
    path = _write_jsonl(tmp_path / "t.jsonl", _rows(4))
    reader = get_taskset_reader(_config(path, batch_size=3, total_epochs=1, total_steps=3))
    assert reader.total_steps == 3
    batches = _read_all(reader)
    assert batches == [["q0", "q1", "q2"], ["q3", "q0", "q1"], ["q2", "q3", "q0"]]
    assert reader.epoch == 2


def test_eval_taskset_reads_once_in_order_with_a_partial_last_batch(tmp_path):
    path = _write_jsonl(tmp_path / "t.jsonl", _rows(5))
    cfg = _config(path, batch_size=2, is_eval=True, data_selector={"selector_type": "shuffle"})
    reader = get_taskset_reader(cfg)
    assert reader.total_steps == 3
    assert _read_all(reader) == [["q0", "q1"], ["q2", "q3"], ["q4"]]
    assert all(t.is_eval for t in reader.read_with_indices([0]))
    reader.reset()
    assert _questions(reader.read()) == ["q0", "q1"]


def test_read_async_and_stop_async_iteration(tmp_path):
    path = _write_jsonl(tmp_path / "t.jsonl", _rows(4))
    reader = get_taskset_reader(_config(path, batch_size=2))

    async def consume():
        out = []
        while True:
            try:
                out.append(_questions(await reader.read_async()))
            except StopAsyncIteration:
                return out

    assert asyncio.run(consume()) == [["q0", "q1"], ["q2", "q3"]]


def test_missing_batch_size_is_a_clear_error(tmp_path):
    path = _write_jsonl(tmp_path / "t.jsonl", _rows(4))
    reader = get_taskset_reader(_config(path, batch_size=0))
    with pytest.raises(ValueError, match="no batch size"):
        reader.read()
    assert len(reader.read(2)) == 2


# --------------------------------------------------------------------------------------
# shuffling with a seed
# --------------------------------------------------------------------------------------


def _shuffle_cfg(path, seed, **kw):
    return _config(
        path, data_selector={"selector_type": "shuffle", "seed": seed}, batch_size=5, **kw
    )


def test_shuffle_is_seeded_and_reshuffled_per_epoch(tmp_path):
    path = _write_jsonl(tmp_path / "t.jsonl", _rows(N))
    a = _read_all(get_taskset_reader(_shuffle_cfg(path, 7, total_epochs=3)))
    b = _read_all(get_taskset_reader(_shuffle_cfg(path, 7, total_epochs=3)))
    c = _read_all(get_taskset_reader(_shuffle_cfg(path, 8, total_epochs=3)))
    assert a == b
    assert a != c
    epochs = [a[0] + a[1], a[2] + a[3], a[4] + a[5]]
    for epoch in epochs:
        assert sorted(epoch) == sorted(f"q{i}" for i in range(N))
    assert epochs[0] != epochs[1] != epochs[2]
    assert epochs[0] != [f"q{i}" for i in range(N)]


def test_deprecated_task_selector_is_honoured(tmp_path):
    path = _write_jsonl(tmp_path / "t.jsonl", _rows(N))
    old = _config(path, task_selector={"selector_type": "shuffle", "seed": 3})
    new = _config(path, data_selector={"selector_type": "shuffle", "seed": 3})
    assert _read_all(get_taskset_reader(old)) == _read_all(get_taskset_reader(new))


# --------------------------------------------------------------------------------------
# resume
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "selector",
    [
        {"selector_type": "sequential"},
        {"selector_type": "shuffle", "seed": 1},
        {"selector_type": "random", "seed": 2},
        {"selector_type": "offline_easy2hard", "feature_keys": ["difficulty"]},
        {"selector_type": "difficulty_based", "feature_keys": ["difficulty"], "seed": 3},
    ],
)
def test_resume_continues_with_exactly_the_next_batch(tmp_path, selector):
    path = _write_jsonl(tmp_path / "t.jsonl", _rows(7))
    cfg = _config(path, batch_size=3, total_epochs=4, data_selector=selector)

    uninterrupted = get_taskset_reader(cfg)
    expected = []
    for step in range(6):
        batch = uninterrupted.read()
        expected.append(_questions(batch))
        if step == 1:  # adaptive selectors learn from feedback; it must survive the restart
            uninterrupted.feedback([t.task_id for t in batch], [0.0, 0.5, 1.0])

    first = get_taskset_reader(cfg)
    seen = []
    for step in range(3):
        batch = first.read()
        seen.append(_questions(batch))
        if step == 1:
            first.feedback([t.task_id for t in batch], [0.0, 0.5, 1.0])
    saved = json.loads(json.dumps(first.state_dict()))  # what a checkpoint stores
    assert saved["step"] == 3 and saved["current_index"] == 9

    resumed = get_taskset_reader(cfg, state=saved)
    assert resumed.step == 3
    seen += [_questions(resumed.read()) for _ in range(3)]
    assert seen == expected


def test_trinity_rft_style_position_is_accepted(tmp_path):
    path = _write_jsonl(tmp_path / "t.jsonl", _rows(6))
    reader = get_taskset_reader(_config(path, batch_size=2), state={"latest_task_index": 4})
    assert _questions(reader.read()) == ["q4", "q5"]
    from_index = get_taskset_reader(_config(path, batch_size=2, index=2))
    assert from_index.step == 1
    assert _questions(from_index.read()) == ["q2", "q3"]


# --------------------------------------------------------------------------------------
# malformed rows and up-front errors
# --------------------------------------------------------------------------------------


def test_malformed_rows_are_skipped_counted_and_reported_with_file_and_line(tmp_path, caplog):
    path = tmp_path / "bad.jsonl"
    lines = [
        json.dumps({"question": "q0", "answer": "0"}),
        "{this is not json",
        json.dumps({"question": "q1", "answer": "1"}),
        json.dumps(["a", "list"]),
        "",
        json.dumps({"question": 42, "answer": "2"}),
        json.dumps({"answer": "3"}),
        json.dumps({"question": "q2", "answer": "4"}),
    ]
    path.write_text("\n".join(lines) + "\n")
    with caplog.at_level(logging.WARNING, logger="trinity"):
        reader = get_taskset_reader(_config(path, batch_size=3))
    bad = reader.malformed_rows
    assert [(b.file, b.line) for b in bad] == [
        (str(path), 2),
        (str(path), 4),
        (str(path), 6),
        (str(path), 7),
    ]
    assert "invalid JSON" in bad[0].reason
    assert "not an object" in bad[1].reason
    assert "'question' is a number" in bad[2].reason
    assert "missing value for 'question'" in bad[3].reason
    assert reader.metrics()["taskset/taskset_0/skipped_rows"] == 4
    log = caplog.text
    assert "skipped 4 malformed row(s)" in log
    for line in (2, 4, 6, 7):
        assert f"{path}:{line}" in log
    # the run goes on with the good rows; their origin is still known
    assert _questions(reader.read()) == ["q0", "q1", "q2"]
    assert reader.data.origin(2) == (str(path), 8)


def test_malformed_csv_line_and_parquet_nulls(tmp_path):
    csv_path = tmp_path / "t.csv"
    csv_path.write_text("question,answer\nq0,0\nq1,1,extra\nq2,2\n,3\n")
    reader = get_taskset_reader(_config(csv_path, batch_size=2))
    assert [(b.line, b.reason) for b in reader.malformed_rows] == [
        (3, "3 fields where the header has 2"),
        (5, "missing value for 'question'"),
    ]
    assert _questions(reader.read()) == ["q0", "q2"]

    pq_path = tmp_path / "t.parquet"
    datasets.Dataset.from_list(
        [
            {"question": "a", "answer": "1"},
            {"question": None, "answer": "2"},
            {"question": "c", "answer": "3"},
        ]
    ).to_parquet(str(pq_path))
    reader = get_taskset_reader(_config(pq_path, batch_size=2))
    assert [(b.file, b.line) for b in reader.malformed_rows] == [(str(pq_path), 2)]
    assert _questions(reader.read()) == ["a", "c"]
    assert [t.task_id for t in reader.read_with_indices([0, 1])] == [0, 1]


def test_missing_file_is_an_error_before_reading(tmp_path):
    with pytest.raises(TasksetNotFoundError, match="does not exist"):
        get_taskset_reader(_config(tmp_path / "nope.jsonl"))
    with pytest.raises(FileNotFoundError):  # also a FileNotFoundError for generic handlers
        get_taskset_reader(_config(tmp_path / "missing" / "dir"))
    empty = tmp_path / "empty_dir"
    empty.mkdir()
    with pytest.raises(TasksetNotFoundError, match="no data files"):
        get_taskset_reader(_config(empty))
    unsupported = tmp_path / "t.txt"
    unsupported.write_text("hello")
    with pytest.raises(TasksetLoadError, match="unsupported type"):
        get_taskset_reader(_config(unsupported))


@pytest.mark.parametrize("kind", ["jsonl", "parquet", "csv", "disk"])
def test_missing_key_names_file_key_and_columns(files, kind):
    cfg = _config(files[kind], format={"prompt_key": "prompt", "response_key": "answer"})
    with pytest.raises(TasksetKeyError) as err:
        get_taskset_reader(cfg)
    msg = str(err.value)
    assert str(files[kind]) in msg
    assert "'prompt'" in msg and "prompt_key" in msg
    assert "['answer', 'difficulty', 'question']" in msg
    cfg = _config(files[kind], format={"prompt_key": "question", "response_key": "solution"})
    with pytest.raises(KeyError, match="'solution'.*response_key"):
        get_taskset_reader(cfg)


def test_response_key_is_only_required_when_configured(tmp_path):
    path = _write_jsonl(tmp_path / "t.jsonl", [{"question": "q", "env_seed": 1}])
    reader = get_taskset_reader(_config(path, format={"prompt_key": "question"}))
    assert reader.read(1)[0].truth is None
    # prompt_key "" opts out of the prompt column (environment tasks)
    reader = get_taskset_reader(_config(path, format={"prompt_key": ""}, batch_size=1))
    assert reader.read()[0].raw_task == {"question": "q", "env_seed": 1}


def test_workflow_key_column_missing_without_default_is_an_error(tmp_path):
    path = _write_jsonl(tmp_path / "t.jsonl", _rows(2))
    cfg = _config(
        path, default_workflow_type=None, format={"prompt_key": "question", "workflow_key": "wf"}
    )
    with pytest.raises(TasksetKeyError, match="'wf'"):
        get_taskset_reader(cfg)


def test_all_rows_malformed_is_an_error(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("nope\nstill nope\n")
    with pytest.raises(TasksetLoadError, match="no valid rows"):
        get_taskset_reader(_config(path))


def test_unknown_selector_is_an_error_before_reading(tmp_path):
    path = _write_jsonl(tmp_path / "t.jsonl", _rows(3))
    with pytest.raises(ValueError, match="Unknown task_selectors name 'shufle'.*'shuffle'"):
        get_taskset_reader(_config(path, data_selector={"selector_type": "shufle"}))


# --------------------------------------------------------------------------------------
# feedback, custom selectors, several task sets
# --------------------------------------------------------------------------------------


def test_feedback_reaches_the_selector_through_pipeline_metrics(tmp_path):
    path = _write_jsonl(tmp_path / "t.jsonl", _rows(4))
    cfg = _config(
        path,
        batch_size=1,
        data_selector={
            "selector_type": "difficulty_based",
            "kwargs": {"target_reward": 0.9, "tau": 0},
        },
    )
    reader = get_taskset_reader(cfg, taskset_id=1)
    before = reader.selector.predict_pass_rate().copy()
    reader.update({SELECTOR_METRIC: {1: {"indices": [3], "values": [0.9]}}, "other": 1})
    after = reader.selector.predict_pass_rate()
    assert after[3] != before[3]
    assert reader.read()[0].task_id == 3  # the task observed at the target pass rate


def test_pass_rate_calculator_metric_shape_is_understood(tmp_path):
    metrics = {
        TASKSET_SCHEDULE_METRIC: {(0, 2): 1.0, (1, 0): 0.25, 3: 0.5, "1/1": 0.75, "x": 1.0},
        SELECTOR_METRIC: {1: {"indices": [4], "values": [0.0]}},
    }
    assert feedback_from_metrics(metrics) == {
        0: ([2, 3], [1.0, 0.5]),
        1: ([4, 0, 1], [0.0, 0.25, 0.75]),
    }
    assert feedback_from_metrics(metrics, default_taskset_id=None)[0] == ([2], [1.0])

    a = _write_jsonl(tmp_path / "a.jsonl", _rows(4, "a"))
    b = _write_jsonl(tmp_path / "b.jsonl", _rows(4, "b"))
    cfg = {"selector_type": "difficulty_based", "kwargs": {"target_reward": 0.9, "tau": 0}}
    sched = get_taskset_scheduler(
        [_config(a, batch_size=2, data_selector=cfg), _config(b, batch_size=2, data_selector=cfg)]
    )
    sched.update({TASKSET_SCHEDULE_METRIC: {(1, 2): 0.9, 0: 0.9}})  # bare key: ambiguous, ignored
    assert sched.readers[0].selector.observed_mean is None
    assert sched.readers[1].selector.observed_mean == 0.9
    assert sched.readers[1].draw(1)[0].task_id == 2


def test_a_registered_custom_selector_is_used_by_name(tmp_path):
    @TASK_SELECTORS.register_module("reverse_for_test")
    class Reverse(TaskSelector):
        def _select(self, batch_size):
            n = self.dataset_size
            return [n - 1 - (self.current_index + k) % n for k in range(batch_size)]

    try:
        path = _write_jsonl(tmp_path / "t.jsonl", _rows(4))
        reader = get_taskset_reader(
            _config(path, batch_size=2, data_selector={"selector_type": "reverse_for_test"})
        )
        assert _read_all(reader) == [["q3", "q2"], ["q1", "q0"]]
    finally:
        TASK_SELECTORS.unregister("reverse_for_test")


def test_scheduler_interleaves_tasksets_in_proportion_and_resumes(tmp_path):
    a = _write_jsonl(tmp_path / "a.jsonl", _rows(6, "a"))
    b = _write_jsonl(tmp_path / "b.jsonl", _rows(2, "b"))
    configs = [
        _config(a, name="a", batch_size=4, total_epochs=2),
        _config(b, name="b", batch_size=4, total_epochs=2),
    ]
    sched = get_taskset_scheduler(configs)
    assert isinstance(sched, TasksetScheduler) and len(sched) == 8
    batches = []
    while True:
        try:
            batches.append(sched.read())
        except StopIteration:
            break
    assert len(batches) == 4
    first_epoch = [q for batch in batches[:2] for q in _questions(batch)]
    assert sorted(first_epoch) == sorted([f"a{i}" for i in range(6)] + ["b0", "b1"])
    assert {t.index["taskset_id"] for batch in batches for t in batch} == {0, 1}

    again = get_taskset_scheduler(configs)
    again.read()
    state = json.loads(json.dumps(again.state_dict()))
    resumed = get_taskset_scheduler(configs, state=state)
    assert [_questions(resumed.read()) for _ in range(3)] == [_questions(b) for b in batches[1:]]


def test_reader_class_is_usable_directly(tmp_path):
    path = _write_jsonl(tmp_path / "t.jsonl", _rows(3))
    reader = TasksetReader(_config(path))
    assert "TasksetReader(name='taskset_0', tasks=3" in repr(reader)
