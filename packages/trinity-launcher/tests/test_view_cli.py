"""``trinity view``: the options resolved (``--config`` and what overrides it), bad input refused
before any page starts (exit 2, the option and value named, no traceback), the data layer on a
real SQLite table written by the buffer writer, and the Streamlit page itself, headless
(``AppTest``: the real script, no browser)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from trinity.launcher import viewer
from trinity.launcher.cli import main
from trinity.launcher.viewer import (
    PIPELINE_INPUT_TABLE,
    ExperienceTable,
    RowFilter,
    ViewError,
    decode_experience,
    messages_of,
    resolve_db_url,
    resolve_target,
    token_details,
)

TRINITY = str(Path(sys.executable).parent / "trinity")

#: what the fixture table holds: (batch, reward, model_version); row ids 1..5 in this order
ROWS = [(1, 0.0, 0), (1, 1.0, 0), (2, 0.5, 1), (2, 1.0, 1), (3, -1.0, 2)]
PROMPT = "1+2="
RESPONSE = "3"


@pytest.fixture(scope="module")
def tokenizer(model_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_path)


@pytest.fixture(scope="module")
def table_db(tmp_path_factory, tokenizer) -> str:
    """A SQLite file with table ``explorer_output`` written by the buffer's own SQL writer (as
    a run's experience pipeline saves its input); returns the file's path. The last row
    carries ``messages`` (a conversation), the others do not."""
    from trinity.buffer.buffer_writer import get_buffer_writer
    from trinity.common.config import ExperienceBufferConfig
    from trinity.common.experience import EID, Experience

    path = tmp_path_factory.mktemp("view") / "buffer.db"
    prompt = tokenizer.encode(
        tokenizer.apply_chat_template(
            [{"role": "user", "content": PROMPT}], add_generation_prompt=True, tokenize=False
        )
    )
    response = tokenizer.encode(RESPONSE) + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    exps = []
    for index, (batch, reward, version) in enumerate(ROWS):
        last = index == len(ROWS) - 1
        exps.append(
            Experience(
                eid=EID(batch=batch, task=index),
                tokens=prompt + response,
                prompt_length=len(prompt),
                logprobs=[-0.25 * (index + 1)] * len(response),
                reward=reward,
                model_version=version,
                metrics={"accuracy": reward},
                info={"row": index},
                messages=[
                    {"role": "user", "content": PROMPT},
                    {"role": "assistant", "content": "three"},
                ]
                if last
                else None,
            )
        )
    writer = get_buffer_writer(
        ExperienceBufferConfig(
            name=PIPELINE_INPUT_TABLE, storage_type="sql", path=f"sqlite:///{path}"
        )
    )
    writer.write(exps)
    writer.release()
    return str(path)


@pytest.fixture
def no_exec(monkeypatch):
    """Fail instead of replacing the process with Streamlit; a good start records the call."""
    calls: list[tuple[list[str], dict[str, str]]] = []

    def fake_execve(path, argv, env):
        calls.append((list(argv), dict(env)))

    monkeypatch.setattr(viewer.os, "execve", fake_execve)
    return calls


def _config(tmp_path: Path, model_path: str, **pipeline) -> Path:
    data = {
        "project": "proj",
        "group": "grp",
        "name": "exp",
        "checkpoint_root_dir": str(tmp_path / "ckpt"),
        "model": {"model_path": model_path},
    }
    if pipeline:
        data["data_processor"] = {"experience_pipeline": pipeline}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


# ------------------------------------------------------------------ resolving the options


def test_config_resolves_our_pipeline_table_and_options_override_it(tmp_path, model_path):
    """``--config``: the run's default saved-input database, table ``explorer_output`` (this
    release's name; 0.6: ``pipeline_input``), ``model.model_path``; each option wins."""
    config = _config(tmp_path, model_path)
    target, warnings = resolve_target(config=str(config))
    job = tmp_path / "ckpt" / "proj" / "grp" / "exp"
    assert target.url == f"sqlite:///{job}/buffer/explorer_output.db"
    assert (target.table, target.tokenizer, target.schema) == (
        "explorer_output",
        model_path,
        "experience",
    )
    assert warnings == []
    assert "input_save_path" in target.origin["--url"]

    other, _ = resolve_target(
        url="other.db", table="t2", tokenizer="tok", config=str(config), schema="SFT"
    )
    assert other.url == "sqlite:///" + os.path.abspath("other.db")
    assert (other.table, other.tokenizer, other.schema) == ("t2", "tok", "sft")
    assert other.origin == {}  # every value typed


def test_config_with_its_own_input_save_path(tmp_path, model_path):
    """A set ``input_save_path`` is used as the launcher writes it: a URL as is, a plain path
    as a SQLite file."""
    url = f"sqlite:///{tmp_path}/in.db"
    target, _ = resolve_target(config=str(_config(tmp_path, model_path, input_save_path=url)))
    assert target.url == url
    plain = _config(tmp_path, model_path, input_save_path=str(tmp_path / "raw.db"))
    assert resolve_target(config=str(plain))[0].url == f"sqlite:///{tmp_path}/raw.db"


def test_config_warns_about_renamed_later_runs(tmp_path, model_path):
    config = yaml.safe_load(_config(tmp_path, model_path).read_text())
    config["continue_from_checkpoint"] = False
    path = tmp_path / "fresh.yaml"
    path.write_text(yaml.safe_dump(config))
    (tmp_path / "ckpt" / "proj" / "grp" / "exp_20250101120000" / "buffer").mkdir(parents=True)
    _, warnings = resolve_target(config=str(path))
    assert len(warnings) == 1 and "exp_20250101120000/buffer/explorer_output.db" in warnings[0]


def test_config_without_saved_input_is_refused(tmp_path, model_path):
    with pytest.raises(ViewError, match="save_input is false"):
        resolve_target(config=str(_config(tmp_path, model_path, save_input=False)))


def test_plain_paths_become_sqlite_urls():
    assert resolve_db_url("postgresql://u@h/db") == "postgresql://u@h/db"
    assert resolve_db_url("sqlite:////a/b.db") == "sqlite:////a/b.db"
    assert resolve_db_url("x/b.db") == "sqlite:///" + os.path.abspath("x/b.db")


@pytest.mark.parametrize(
    ("args", "missing"),
    [
        ([], "--url"),
        (["--url", "a.db"], "--table"),
        (["--url", "a.db", "--table", "t"], "--tokenizer"),
    ],
)
def test_each_missing_option_is_named(args, missing, capsys, no_exec):
    assert main(["view", *args]) == 2
    err = capsys.readouterr().err
    assert f"error: {missing} is required" in err and "--config" in err
    assert not no_exec


# ------------------------------------------------------------------ bad input: exit 2, no page


def test_bad_input_exits_2_naming_option_and_value(tmp_path, table_db, model_path, capsys, no_exec):
    missing_db = str(tmp_path / "nope.db")
    not_a_db = tmp_path / "text.db"
    not_a_db.write_text("hello")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "tokenizer.json").write_text("{not json")
    cases = [
        (
            ["--url", missing_db, "--table", "t", "--tokenizer", model_path],
            f"--url sqlite:///{missing_db}: no such database file",
        ),
        (
            ["--url", table_db, "--table", "nosuch", "--tokenizer", model_path],
            "--table nosuch: no such table",
        ),
        (
            ["--url", table_db, "--table", "explorer_output", "--tokenizer", str(tmp_path / "tok")],
            f"--tokenizer {tmp_path / 'tok'}: no such directory",
        ),
        (
            ["--url", table_db, "--table", "explorer_output", "--tokenizer", str(tmp_path)],
            f"--tokenizer {tmp_path}: not a tokenizer directory",
        ),
        (
            ["--url", table_db, "--table", "explorer_output", "--tokenizer", str(broken)],
            f"--tokenizer {broken}: cannot load a tokenizer",
        ),
        (
            ["--url", "notadb://x", "--table", "t", "--tokenizer", model_path],
            "--url notadb://x: cannot open",
        ),
        (
            ["--url", str(not_a_db), "--table", "t", "--tokenizer", model_path],
            f"--url sqlite:///{not_a_db}: cannot open",
        ),
    ]
    for args, message in cases:
        assert main(["view", *args]) == 2, args
        err = capsys.readouterr().err
        assert message in err, err
        assert "Traceback" not in err
    assert "tables there: explorer_output" in _err_of(
        ["--url", table_db, "--table", "nosuch", "--tokenizer", model_path], capsys
    )
    assert not no_exec  # no Streamlit was started


def _err_of(args: list[str], capsys) -> str:
    main(["view", *args])
    return capsys.readouterr().err


def test_config_errors_say_where_the_value_came_from(tmp_path, model_path, capsys, no_exec):
    """The run has not saved anything yet: the message names the config field it came from."""
    config = _config(tmp_path, model_path)
    assert main(["view", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "no such database file" in err
    assert f"(from --config {config}: data_processor.experience_pipeline.input_save_path)" in err
    assert main(["view", "--config", str(tmp_path / "missing.yaml")]) == 2
    assert "--config" in capsys.readouterr().err
    assert not no_exec


def test_a_task_table_is_not_an_experience_table(tmp_path):
    from trinity.buffer.buffer_writer import get_buffer_writer
    from trinity.common.config import ExperienceBufferConfig

    db = tmp_path / "tasks.db"
    writer = get_buffer_writer(
        ExperienceBufferConfig(name="tasks", storage_type="sql", path=f"sqlite:///{db}")
    )
    writer.write([{"question": "1+1", "answer": "2"}])
    writer.release()
    with pytest.raises(ViewError, match="--table tasks: holds task rows"):
        ExperienceTable(f"sqlite:///{db}", "tasks")


def test_the_command_line_refuses_a_missing_database(tmp_path, model_path):
    """The installed ``trinity`` itself: exit 2, one line, no traceback."""
    out = subprocess.run(
        [
            TRINITY,
            "view",
            "--url",
            str(tmp_path / "x.db"),
            "--table",
            "t",
            "--tokenizer",
            model_path,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2, out.stderr
    assert "--url sqlite:///" in out.stderr and "no such database file" in out.stderr
    assert "Traceback" not in out.stderr


# ------------------------------------------------------------------ starting the page


def test_good_input_starts_streamlit_with_the_target(table_db, model_path, capsys, no_exec):
    main(
        [
            "view",
            "--url",
            table_db,
            "--table",
            "explorer_output",
            "--tokenizer",
            model_path,
            "-p",
            "9123",
        ]
    )
    [(argv, env)] = no_exec
    assert argv[1:5] == ["-m", "streamlit", "run", viewer.APP_PATH]
    assert argv[argv.index("--server.port") + 1] == "9123"
    assert argv[argv.index("--server.address") + 1] == "127.0.0.1"
    assert env[viewer.ENV_URL] == f"sqlite:///{table_db}"
    assert (env[viewer.ENV_TABLE], env[viewer.ENV_TOKENIZER], env[viewer.ENV_SCHEMA]) == (
        "explorer_output",
        model_path,
        "experience",
    )
    assert "http://127.0.0.1:9123" in capsys.readouterr().out


def test_without_streamlit_it_says_how_to_install_it(
    table_db, model_path, capsys, no_exec, monkeypatch
):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        viewer.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "streamlit" else real(name, *a),
    )
    args = ["view", "--url", table_db, "--table", "explorer_output", "--tokenizer", model_path]
    assert main(args) == 2
    assert "pip install 'trinity-launcher[studio]'" in capsys.readouterr().err
    assert not no_exec


# ------------------------------------------------------------------ the data layer


def test_the_table_pages_filters_and_decodes(table_db, tokenizer):
    with ExperienceTable(resolve_db_url(table_db), "explorer_output") as table:
        assert table.count() == len(ROWS)
        rows = table.rows(0, 10)
        assert [r.id for r in rows] == [1, 2, 3, 4, 5]
        assert [(r.reward, r.model_version) for r in rows] == [(r, v) for _, r, v in ROWS]
        assert rows[2].eid.startswith("2/2/")
        assert [r.id for r in table.rows(1, 2)] == [2, 3]
        assert [r.id for r in table.rows(0, 2, newest_first=True)] == [5, 4]
        good = RowFilter(reward_min=0.5, reward_max=1.0)
        assert table.count(good) == 3
        assert [r.id for r in table.rows(0, 10, good)] == [2, 3, 4]
        assert [r.id for r in table.rows(0, 10, RowFilter(version_min=1, version_max=1))] == [3, 4]
        assert [r.id for r in table.rows(0, 10, RowFilter(eid_contains="3/4/"))] == [5]
        assert table.row(4).reward == 1.0 and table.row(99) is None

        exp = rows[0].experience
        decoded = decode_experience(exp, tokenizer)
        assert PROMPT in decoded.prompt_text and "<|im_start|>assistant" in decoded.prompt_text
        assert decoded.response_text == RESPONSE + "<|im_end|>"
        assert (decoded.prompt_length, decoded.response_length) == (exp.prompt_length, 2)
        tokens = token_details(exp, tokenizer)
        assert [t["text"] for t in tokens] == [RESPONSE, "<|im_end|>"]
        assert [t["logprob"] for t in tokens] == [-0.25, -0.25]
        assert all(t["generated"] for t in tokens)

        # --schema sft: the stored conversation, else the decoded prompt and response
        assert messages_of(rows[4].experience, tokenizer)[-1] == {
            "role": "assistant",
            "content": "three",
        }
        fallback = messages_of(exp, tokenizer)
        assert [m["role"] for m in fallback] == ["user", "assistant"]
        assert fallback[1]["content"] == decoded.response_text


# ------------------------------------------------------------------ the page (AppTest)


@pytest.fixture
def page(monkeypatch, table_db, model_path):
    """The viewer page on the fixture table, run once; ``page("sft")`` for the sft schema."""
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    def start(schema: str = "experience") -> AppTest:
        target, _ = resolve_target(resolve_db_url(table_db), PIPELINE_INPUT_TABLE, model_path)
        for key, value in target.environment().items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv(viewer.ENV_SCHEMA, schema)
        at = AppTest.from_file(viewer.APP_PATH, default_timeout=60)
        at.run()
        assert not at.exception, at.exception
        return at

    return start


def _frame(at, column: str):
    """The page's table that has ``column`` (the rows: ``eid``; the tokens: ``logprob``),
    ``None`` when there is none."""
    for element in at.dataframe:
        if column in element.value.columns:
            return element.value
    return None


def _ids(at) -> list[int]:
    frame = _frame(at, "eid")
    return [] if frame is None else list(frame["id"])


def test_the_page_shows_filters_pages_and_token_logprobs(page):
    at = page()
    assert not at.error
    frame = _frame(at, "eid")
    assert list(frame["id"]) == [1, 2, 3, 4, 5]
    assert list(frame["reward"]) == [r for _, r, _ in ROWS]
    assert RESPONSE in frame["response"][0] and PROMPT in frame["prompt"][0]
    assert "5 of 5 experiences" in " ".join(c.value for c in at.caption)
    # the selected row (first by default): its response tokens and their log-probs
    tokens = _frame(at, "logprob")
    assert list(tokens["logprob"]) == [-0.25, -0.25]
    at.selectbox(key="selected").set_value(3).run()
    assert list(_frame(at, "logprob")["logprob"]) == [-0.75, -0.75]
    assert "Experience #3" in at.subheader[0].value

    # reward range filter
    at.text_input(key="reward_min").input("0.5").run()
    at.text_input(key="reward_max").input("1").run()
    assert _ids(at) == [2, 3, 4]
    at.text_input(key="reward_min").input("abc").run()
    assert any("not a number" in e.value for e in at.sidebar.error)
    assert _ids(at) == [1, 2, 3, 4, 5]  # the bad bound is ignored: reward <= 1
    at.text_input(key="reward_min").input("").run()
    at.text_input(key="reward_max").input("").run()

    # pages of two: Next, then the last page; Refresh keeps the page
    at.number_input(key="per_page").set_value(2).run()
    assert _ids(at) == [1, 2]
    at.button(key="next").click().run()
    assert _ids(at) == [3, 4]
    at.button(key="next").click().run()
    assert _ids(at) == [5]
    at.button(key="refresh").click().run()
    assert _ids(at) == [5] and not at.exception
    at.checkbox(key="newest_first").check().run()
    assert _ids(at) == [1]  # page 3 of the newest-first order

    at.text_input(key="reward_min").input("5").run()
    assert _frame(at, "eid") is None and "No experiences match" in at.info[0].value


def test_the_sft_schema_shows_conversations(page):
    at = page("sft")
    frame = _frame(at, "eid")
    assert list(frame["turns"]) == [2, 2, 2, 2, 2]
    assert frame["last message"][4] == "three"
    at.selectbox(key="selected").set_value(5).run()
    assert [m.name for m in at.chat_message] == ["user", "assistant"]
    assert at.chat_message[1].text[0].value == "three"


def test_the_page_without_a_target_says_how_to_start_it(monkeypatch):
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    for key in (viewer.ENV_URL, viewer.ENV_TABLE, viewer.ENV_TOKENIZER):
        monkeypatch.delenv(key, raising=False)
    at = AppTest.from_file(viewer.APP_PATH, default_timeout=60)
    at.run()
    assert "trinity view --url" in at.error[0].value
