"""``trinity view``: browse an experience table in a web page (Trinity-RFT 0.6's command).

The table is one a SQL buffer writer made (``storage_type: sql``): the experience pipeline's
saved input (``data_processor.experience_pipeline.save_input``), a SQL experience buffer, or
``trinity debug``'s ``experiences.db`` (table ``debug_buffer``). ``--url`` names the database (a
SQLAlchemy URL, or a plain path to a SQLite file), ``--table`` the table and ``--tokenizer`` the
tokenizer that decodes the token ids. ``--config`` takes all three from a run's config: the
database the run saves its explorer output to (``input_save_path``, by default
``<checkpoint_job_dir>/buffer/explorer_output.db``), table ``explorer_output`` (the name this
release's experience pipeline writes it under) and ``model.model_path``; an option given as
well wins over the config.

Everything is checked before the page starts (a missing database file or table, a tokenizer
that does not load): bad input exits 2 with a message naming the option and its value. The
page itself (:mod:`trinity.launcher.viewer_app`, Streamlit, the ``studio`` extra) reads the
table through :class:`ExperienceTable` below, which is also usable on its own.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import sys
from typing import Any, Optional

from trinity.launcher.viewer_table import (  # noqa: F401 - re-exported: the page's data side
    ENV_SCHEMA,
    ENV_TABLE,
    ENV_TOKENIZER,
    ENV_URL,
    DecodedExperience,
    ExperienceRow,
    ExperienceTable,
    RowFilter,
    ViewError,
    ViewTarget,
    decode_experience,
    messages_of,
    token_details,
)

__all__ = [
    "DEFAULT_PORT",
    "PIPELINE_INPUT_TABLE",
    "SCHEMAS",
    "DecodedExperience",
    "ExperienceRow",
    "ExperienceTable",
    "RowFilter",
    "ViewError",
    "ViewTarget",
    "add_view_parser",
    "check_target",
    "decode_experience",
    "load_tokenizer",
    "messages_of",
    "resolve_db_url",
    "resolve_target",
    "streamlit_command",
    "target_from_config",
    "token_details",
    "view_main",
]

DEFAULT_PORT = 8502
SCHEMAS = ("experience", "sft")
#: the table the experience pipeline saves its input under in this release
#: (:func:`trinity.launcher.explorer.build_experience_pipeline`; Trinity-RFT 0.6: ``pipeline_input``)
PIPELINE_INPUT_TABLE = "explorer_output"
#: how the CLI hands the checked target to the page (the page reads them at every run)

APP_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "viewer_app.py")
_INPUT_SAVE_PATH = "data_processor.experience_pipeline.input_save_path"
#: files a saved tokenizer directory has at least one of
_TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json", "vocab.json", "tokenizer.model")

_DESCRIPTION = """\
Browse an experience table in a web page (Streamlit; pip install 'trinity-launcher[studio]'):
a page of rows at a time with id, EID, reward, model version, prompt and response; the
selected row's text, metrics and the log-prob of each response token; filters by reward,
model version and EID.

The table is one a SQL buffer writer made: a run's saved explorer output, a SQL experience
buffer, or trinity debug's experiences.db (table debug_buffer). --config takes the database,
table and tokenizer from a run's config (data_processor.experience_pipeline.input_save_path,
by default <checkpoint_job_dir>/buffer/explorer_output.db; table explorer_output;
model.model_path); --url, --table and --tokenizer given as well win.

Everything is checked before the page starts: bad input exits 2 naming the option."""


def resolve_db_url(spec: str) -> str:
    """A database URL for ``--url``: a URL (``sqlite:///...``, ``postgresql://...``) passes
    through; anything else is a path to a SQLite file, made absolute so the page (another
    process, maybe another directory) opens the same file."""
    if "://" in spec:
        return spec
    return "sqlite:///" + os.path.abspath(os.path.expanduser(spec))


def _default_input_save_path(config: Any) -> str:
    """Where a run of ``config`` saves its explorer output when ``input_save_path`` is unset:
    what the run's own checks derive (``<checkpoint_job_dir>/buffer/explorer_output.db``, the
    root made absolute, the current directory when unset), without running those checks (they
    want the model and the task sets, which viewing does not)."""
    root = os.path.abspath(config.checkpoint_root_dir or os.getcwd())
    job_dir = os.path.join(root, config.project, config.group, config.name)
    return "sqlite:///" + os.path.join(job_dir, "buffer", f"{PIPELINE_INPUT_TABLE}.db")


def _renamed_runs(config: Any) -> list[str]:
    """Directories of later runs of ``config`` renamed ``<name>_<timestamp>`` (a run with
    ``continue_from_checkpoint: false`` whose directory was taken is renamed so; its database
    is there, not at the derived path), oldest first."""
    if config.continue_from_checkpoint:
        return []
    root = os.path.abspath(config.checkpoint_root_dir or os.getcwd())
    parent = os.path.join(root, config.project, config.group)
    pattern = re.compile(re.escape(config.name) + r"_\d{14}$")
    try:
        names = sorted(n for n in os.listdir(parent) if pattern.match(n))
    except OSError:
        return []
    return [os.path.join(parent, n) for n in names if os.path.isdir(os.path.join(parent, n))]


def target_from_config(path: str) -> tuple[str, str, str, list[str]]:
    """``(url, table, tokenizer, warnings)`` from a run config: the database its experience
    pipeline saves the explorer output to, table :data:`PIPELINE_INPUT_TABLE`, the run's model.

    The config is loaded (schema checks only: no model or task set has to exist). Raises
    :class:`ViewError` when the run saves no input (``save_input: false``) or names no model.
    """
    from trinity.common.config import load_config

    try:
        config = load_config(path)
    except (ValueError, OSError) as exc:  # ConfigError is a ValueError
        raise ViewError(f"--config {path}: {exc}") from None
    pipeline = config.data_processor.experience_pipeline
    if not pipeline.save_input:
        raise ViewError(
            f"--config {path}: data_processor.experience_pipeline.save_input is false, so the "
            "run saves no experience table to view; set it to true, or give --url and --table"
        )
    warnings: list[str] = []
    if pipeline.input_save_path:
        # the launcher writes the saved input as a SQL table in any case: a plain path is
        # a SQLite file (see trinity.launcher.explorer.build_experience_pipeline)
        url = resolve_db_url(pipeline.input_save_path)
    else:
        url = _default_input_save_path(config)
        later = _renamed_runs(config)
        if later:
            newest = os.path.join(later[-1], "buffer", f"{PIPELINE_INPUT_TABLE}.db")
            warnings.append(
                f"continue_from_checkpoint is false and later runs of this config were "
                f"renamed ({', '.join(os.path.basename(d) for d in later)}); this shows the "
                f"first run's table -- the newest is --url {newest}"
            )
    if not config.model.model_path:
        raise ViewError(
            f"--config {path}: model.model_path is not set, so there is no tokenizer; "
            "give --tokenizer"
        )
    return url, PIPELINE_INPUT_TABLE, str(config.model.model_path), warnings


def resolve_target(
    url: Optional[str] = None,
    table: Optional[str] = None,
    tokenizer: Optional[str] = None,
    config: Optional[str] = None,
    schema: str = "experience",
) -> tuple[ViewTarget, list[str]]:
    """The target of the options (``--config`` first, then each option given over it) and
    any warnings; :class:`ViewError` names what is missing or wrong."""
    schema = (schema or "experience").lower()
    if schema not in SCHEMAS:
        raise ViewError(f"--schema {schema}: allowed: {', '.join(SCHEMAS)}")
    origin: dict[str, str] = {}
    warnings: list[str] = []
    found_url = found_table = found_tokenizer = None
    if config:
        found_url, found_table, found_tokenizer, warnings = target_from_config(config)
        origin = {
            "--url": f"--config {config}: {_INPUT_SAVE_PATH}",
            "--table": f"--config {config}: the experience pipeline's input table",
            "--tokenizer": f"--config {config}: model.model_path",
        }
    if url is not None:
        found_url = resolve_db_url(url)
        origin.pop("--url", None)
    if table is not None:
        found_table = table
        origin.pop("--table", None)
    if tokenizer is not None:
        found_tokenizer = tokenizer
        origin.pop("--tokenizer", None)
    for option, value in (
        ("--url", found_url),
        ("--table", found_table),
        ("--tokenizer", found_tokenizer),
    ):
        if not value:
            raise ViewError(f"{option} is required (or give --config CONFIG, a run's config)")
    target = ViewTarget(
        url=str(found_url),
        table=str(found_table),
        tokenizer=str(found_tokenizer),
        schema=schema,
        origin=origin,
    )
    return target, warnings


def load_tokenizer(path: str) -> Any:
    """The ``transformers`` tokenizer at ``path`` (a local directory, or a hub id already in
    the Hugging Face cache); :class:`ViewError` when it does not load.

    A path that looks local (absolute, ``./``, ``~``) and does not exist is refused without
    asking the hub, and so is a hub id not in the cache unless ``TRINITY_ALLOW_HUB_MODELS=1``:
    a viewer must not start a download.
    """
    expanded = os.path.expanduser(path)
    local_looking = os.path.isabs(expanded) or path.startswith((".", "~"))
    if local_looking and not os.path.exists(expanded):
        raise ViewError(f"--tokenizer {path}: no such directory")
    if os.path.isdir(expanded) and not any(
        os.path.isfile(os.path.join(expanded, name)) for name in _TOKENIZER_FILES
    ):
        raise ViewError(
            f"--tokenizer {path}: not a tokenizer directory (none of {', '.join(_TOKENIZER_FILES)})"
        )
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:  # pragma: no cover - transformers is a dependency
        raise ViewError(f"--tokenizer {path}: transformers is not installed ({exc})") from None
    offline = not os.path.exists(expanded) and os.environ.get("TRINITY_ALLOW_HUB_MODELS") != "1"
    try:
        return AutoTokenizer.from_pretrained(expanded, local_files_only=offline)
    except Exception as exc:  # noqa: BLE001 - any failure to load is bad input here
        reason = " ".join(str(exc).split())[:300] or type(exc).__name__
        hint = (
            " (not a local directory, and not in the Hugging Face cache: download it first, "
            "or set TRINITY_ALLOW_HUB_MODELS=1)"
            if offline
            else ""
        )
        raise ViewError(f"--tokenizer {path}: cannot load a tokenizer: {reason}{hint}") from None


# ------------------------------------------------------------------ the command


def check_target(target: ViewTarget) -> None:
    """Everything the page needs, checked before it starts: the database file, the table (an
    experience table) and the tokenizer. Raises :class:`ViewError`."""
    ExperienceTable(target.url, target.table, target).close()
    try:
        load_tokenizer(target.tokenizer)
    except ViewError as exc:
        text = str(exc)
        prefix = f"--tokenizer {target.tokenizer}"
        if text.startswith(prefix):
            text = target.describe("--tokenizer", target.tokenizer) + text[len(prefix) :]
        raise ViewError(text) from None


def streamlit_command(port: int = DEFAULT_PORT, address: str = "127.0.0.1") -> list[str]:
    """The ``python -m streamlit run`` command line that serves the viewer page (no file
    watcher: the page's code does not change while it runs)."""
    from trinity.launcher.streamlit_run import streamlit_command as command

    return command(APP_PATH, port, address, extra=("--server.fileWatcherType", "none"))


def add_view_parser(sub: argparse._SubParsersAction) -> None:
    """The ``trinity view`` sub-command's options (Trinity-RFT 0.6's names, plus
    ``--address``)."""
    view = sub.add_parser(
        "view",
        help="browse an experience table in a web page (pip install 'trinity-launcher[studio]')",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    view.add_argument(
        "--url",
        default=None,
        help="the database: a URL (sqlite:////abs/path.db, postgresql://...) or a path to a "
        "SQLite file; optional with --config",
    )
    view.add_argument("--table", default=None, help="the experience table; optional with --config")
    view.add_argument(
        "--tokenizer",
        default=None,
        help="tokenizer (model directory) that decodes the token ids; optional with --config",
    )
    view.add_argument(
        "--config",
        default=None,
        help="a run's config: its saved explorer output (data_processor.experience_pipeline."
        "input_save_path, table explorer_output) and model.model_path; options given as "
        "well win",
    )
    view.add_argument(
        "--schema",
        type=str.lower,
        choices=SCHEMAS,
        default="experience",
        help="experience (tokens, rewards, log-probs) or sft (the conversation of each row)",
    )
    view.add_argument("--port", "-p", type=int, default=DEFAULT_PORT, help=f"port ({DEFAULT_PORT})")
    view.add_argument(
        "--address",
        default="127.0.0.1",
        help="address to listen on (127.0.0.1: this machine; 0.0.0.0: every interface)",
    )


def view_main(args: argparse.Namespace) -> int:
    """``trinity view``: check the target, then replace this process with the Streamlit
    server (returns only on bad input: 2, the message on stderr)."""
    try:
        target, warnings = resolve_target(
            args.url, args.table, args.tokenizer, args.config, args.schema
        )
        for warning in warnings:
            print(f"warning: {warning}", file=sys.stderr)
        check_target(target)
    except ViewError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if importlib.util.find_spec("streamlit") is None:
        print(
            "error: trinity view needs Streamlit: pip install 'trinity-launcher[studio]'",
            file=sys.stderr,
        )
        return 2
    print(
        f"Experience viewer of table {target.table!r} in {target.url} on "
        f"http://{args.address}:{args.port}",
        flush=True,
    )
    command = streamlit_command(args.port, args.address)
    os.execve(command[0], command, {**os.environ, **target.environment()})
    return 0  # pragma: no cover - execve does not return
