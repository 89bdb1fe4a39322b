"""Rules that look outside the config: the model's own context length and usable paths.

* :func:`rule_model_context` (schema level, cheap): when ``model.model_path`` is a readable
  local directory with a ``config.json``, no token limit may exceed what the model can attend
  to (``max_position_embeddings``, times a RoPE scaling ``factor`` where one is configured).
  A hub id or a model that does not exist yet (the quickstart builds its own) is not read.
* :func:`rule_paths` (run level, ``check_and_update``): inputs a run reads must exist and be
  readable; outputs a run writes need a writable place.

  - Models (``model.model_path``, an explicit ``critic_model_path``, ``explorer.rollout_model``
    and ``auxiliary_models[*].model_path``), where the run loads them (the trainer, rollout
    engines that load weights): a directory holding ``config.json``. A value shaped like a
    hub id (``name`` or ``namespace/name``; not ``./``, ``/``, ``~``, and no existing local
    directory as its first part) is accepted when the Hugging Face cache holds it, or when
    ``TRINITY_ALLOW_HUB_MODELS=1`` says the run may download it; otherwise it is refused
    before anything starts (no model hub may be reachable from this machine). Anything
    else that does not exist is a local path with a typo: refused, showing the absolute
    path it resolved to.
  - Data (task sets, eval sets, the data set of mode ``train``, auxiliary buffers of
    ``storage_type: file``): relative paths resolve against the current directory, as the
    task-set loader resolves them (``trinity.buffer.taskset.loading``). A relative name
    the loader would send to the hub (``openai/gsm8k``: one slash at most, no data-file
    suffix, no existing local directory as its first part) is left to it; any other path
    must exist.
* :func:`rule_no_nul` (schema level): no value holds a NUL byte. No file system, process
  argument or environment variable can hold one, so such a path would otherwise be probed as
  "does not exist" (``os.path.exists`` answers ``False``) and fail only when the run opens it.
"""

from __future__ import annotations

import glob
import json
import os
import re
from typing import TYPE_CHECKING, Any, Optional, Union

from ._utils import _Checker

if TYPE_CHECKING:
    from ._core import Config

Loc = tuple[Union[str, int], ...]


def rule_no_nul(c: _Checker, cfg: Config) -> None:
    """Refuse every string of the config (field, list item, mapping key or value) that holds a
    NUL byte, naming where it is. A section shared by two fields (``taskset`` is mirrored into
    ``tasksets``) is reported once."""
    from pydantic import BaseModel

    seen: set[int] = set()

    def walk(value: Any, loc: Loc) -> None:
        if isinstance(value, str):
            if "\x00" in value:
                c.error(
                    loc,
                    value,
                    f"{_short_repr(value)} contains a NUL byte (\\x00), which no path, file "
                    "system, process argument or environment variable can hold: remove it",
                )
        elif isinstance(value, BaseModel):
            if id(value) in seen:
                return
            seen.add(id(value))
            for name in type(value).model_fields:
                walk(getattr(value, name, None), loc + (name,))
            for name, extra in (value.model_extra or {}).items():
                walk(extra, loc + (name,))
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(key, loc + (str(key),))
                walk(item, loc + (str(key),))
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                walk(item, loc + (i,))

    walk(cfg, ())


def _short_repr(value: str, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


def _model_context_limit(model_path: str, rope_scaling: Optional[dict[str, Any]]) -> Optional[int]:
    """``max_position_embeddings`` of a local model (scaled by RoPE ``factor``), else None."""
    if not model_path or not os.path.isdir(model_path):
        return None
    try:
        with open(os.path.join(model_path, "config.json"), encoding="utf-8") as f:
            hf_config = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(hf_config, dict):
        return None
    limit = hf_config.get("max_position_embeddings")
    text_config = hf_config.get("text_config")
    if limit is None and isinstance(text_config, dict):  # multi-modal models
        limit = text_config.get("max_position_embeddings")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        return None
    scaling = rope_scaling if rope_scaling is not None else hf_config.get("rope_scaling")
    factor = scaling.get("factor") if isinstance(scaling, dict) else None
    if isinstance(factor, (int, float)) and not isinstance(factor, bool) and factor > 1:
        limit = int(limit * factor)
    return limit


def rule_model_context(c: _Checker, cfg: Config) -> None:
    """Token limits must fit the local model's context (see the module docstring)."""
    model = cfg.model
    limit = _model_context_limit(model.model_path, model.rope_scaling)
    if limit is None:
        return
    where = f"the context of the model at {model.model_path!r} (max_position_embeddings"
    where += ", times rope_scaling.factor)" if model.rope_scaling else ")"
    fields_set = model.model_fields_set
    if model.max_model_len is not None and model.max_model_len > limit:
        if "max_model_len" in fields_set:
            c.error(
                ("model", "max_model_len"),
                model.max_model_len,
                f"{model.max_model_len} tokens exceeds {where}, {limit} tokens",
            )
        else:  # derived from prompt + response tokens: name what the user wrote
            c.error(
                ("model", "max_response_tokens"),
                model.max_response_tokens,
                f"max_prompt_tokens + max_response_tokens ({model.max_prompt_tokens} + "
                f"{model.max_response_tokens}) exceeds {where}, {limit} tokens",
            )
        return
    for name in ("max_response_tokens", "max_prompt_tokens"):
        value = getattr(model, name)
        if value is not None and value > limit:
            c.error(("model", name), value, f"{value} tokens exceeds {where}, {limit} tokens")
            return
    rollout = cfg.explorer.rollout_model
    if rollout.model_path in (None, "", model.model_path):
        for name in ("max_model_len", "max_response_tokens", "max_prompt_tokens"):
            value = getattr(rollout, name)
            if name in rollout.model_fields_set and value is not None and value > limit:
                c.error(
                    ("explorer", "rollout_model", name),
                    value,
                    f"{value} tokens exceeds {where}, {limit} tokens",
                )


def _explicitly_local(path: str) -> bool:
    return path.startswith(("/", "./", "../", "~")) or path in (".", "..")


#: Set to 1 to let a run download a model named by a hub id (refused by default: see
#: :func:`_check_model`).
ALLOW_HUB_MODELS_ENV = "TRINITY_ALLOW_HUB_MODELS"

# A hub repository id: ``name`` or ``namespace/name``.
_HUB_MODEL_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")
# What the task-set loader sends to the hub (``trinity.buffer.taskset.loading._HUB_NAME``;
# core cannot import the buffer package, so the rule is repeated here).
_HUB_DATA_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
_DATA_FILE_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")
# Engines that load the model's weights from ``model_path`` (``external`` and ``tinker``
# talk to a service; a plugin engine decides for itself).
_WEIGHT_LOADING_ENGINES = frozenset({"vllm", "vllm_async", "transformers", "sglang"})


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _relative_note(path: str) -> str:
    if os.path.isabs(os.path.expanduser(path)):
        return ""
    return f"; relative paths are read from the current directory, {os.getcwd()}"


def _first_part_is_local_dir(path: str) -> bool:
    """``examples/arithmetc``: ``examples`` is a directory here, so this is a local path."""
    head = path.split("/", 1)[0]
    return "/" in path and os.path.isdir(head)


def hub_cache_dir() -> str:
    """The Hugging Face hub cache (``HF_HUB_CACHE``, else ``$HF_HOME/hub``, else
    ``~/.cache/huggingface/hub``), without importing ``huggingface_hub``."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return os.path.expanduser(os.environ[var])
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache"), "huggingface"
    )
    return os.path.join(os.path.expanduser(home), "hub")


def _in_hub_cache(repo_id: str) -> bool:
    """Whether the hub cache holds a snapshot of model ``repo_id`` with its ``config.json``."""
    folder = os.path.join(hub_cache_dir(), "models--" + repo_id.replace("/", "--"), "snapshots")
    return bool(glob.glob(os.path.join(glob.escape(folder), "*", "config.json")))


def _check_model(c: _Checker, loc: Loc, path: Optional[str], kind: str) -> None:
    """A model the run loads: a local Hugging Face model directory, or a hub id the run may
    use (cached, or ``TRINITY_ALLOW_HUB_MODELS=1``); see the module docstring."""
    if not path or "://" in path:  # hdfs://, s3://: fetched by the trainer's own copy step
        return
    full = os.path.abspath(os.path.expanduser(path))
    if os.path.exists(full):
        if not os.path.isdir(full):
            c.error(
                loc, path, f"{kind} must be a Hugging Face model directory, but {full} is a file"
            )
        elif not os.access(full, os.R_OK | os.X_OK):
            c.error(loc, path, f"{kind} at {full} is not readable by this user")
        elif not os.path.isfile(os.path.join(full, "config.json")):
            entries = sorted(os.listdir(full))
            shown = ", ".join(entries[:6]) + (", ..." if len(entries) > 6 else "")
            c.error(
                loc,
                path,
                f"{kind} at {full} is not a Hugging Face model directory: it holds no "
                f"config.json ({'its files: ' + shown if entries else 'it is empty'})",
            )
        return
    hub_shaped = (
        not _explicitly_local(path)
        and bool(_HUB_MODEL_ID.match(path))
        and not _first_part_is_local_dir(path)
    )
    if not hub_shaped:
        c.error(loc, path, f"{kind} does not exist: no directory {full}{_relative_note(path)}")
        return
    if _in_hub_cache(path) or _env_flag(ALLOW_HUB_MODELS_ENV):
        return
    offline = _env_flag("HF_HUB_OFFLINE") or _env_flag("TRANSFORMERS_OFFLINE")
    c.error(
        loc,
        path,
        f"{kind} {path!r} is not a local model directory (no {full}) and not in the Hugging "
        f"Face cache ({hub_cache_dir()}): as a hub id the run would download it when it loads "
        "the model, and fail there if no model hub is reachable from this machine"
        + (" (HF_HUB_OFFLINE is set)" if offline else "")
        + f". Download it first (huggingface-cli download {path}; or add --local-dir DIR and "
        "set the path to DIR) or point to a local model directory; or set "
        f"{ALLOW_HUB_MODELS_ENV}=1 to let the run download it",
    )


def _check_input(c: _Checker, loc: Loc, path: Optional[str], kind: str) -> None:
    """A data path a run reads must exist and be readable, unless the loader would read it
    from the hub (relative paths resolve against the current directory, as the loader's)."""
    if not path or "://" in path:
        return
    full = os.path.abspath(os.path.expanduser(path))
    if os.path.exists(full):
        if not os.access(full, os.R_OK):
            c.error(loc, path, f"{kind} is not readable by this user ({full})")
        return
    hub_shaped = (
        not _explicitly_local(path)
        and not path.lower().endswith(_DATA_FILE_SUFFIXES)
        and bool(_HUB_DATA_NAME.match(path))
        and not _first_part_is_local_dir(path)
    )
    if hub_shaped:  # may be a hub data set: left to the reader
        return
    c.error(loc, path, f"{kind} does not exist (a local path: {full}){_relative_note(path)}")


def _check_output(c: _Checker, loc: Loc, path: Optional[str], kind: str) -> None:
    """An output directory must be a directory, or be creatable in a writable parent."""
    if not path:
        return
    if path.startswith("sqlite:///"):
        path = os.path.dirname(path[len("sqlite:///") :]) or "."
    elif "://" in path:
        return
    full = os.path.abspath(os.path.expanduser(path))
    probe = full
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if not os.path.isdir(probe):
        c.error(loc, path, f"{kind} must be a directory, but {probe} is a file")
    elif not os.access(probe, os.W_OK | os.X_OK):
        what = "is not writable" if probe == full else f"cannot be created: {probe} is read-only"
        c.error(loc, path, f"{kind} {what} for this user")


def _data_set_rows(path: str, name: str) -> Optional[str]:
    """What marks ``path`` as a data set of rows rather than a file of serialized experiences
    (``None``: an experience file, a place one will be written, or unknown).

    An experience file (``storage_type: file``) is a ``.jsonl`` whose lines carry an ``exp``
    field, or a directory holding ``<name>.jsonl`` / ``part-*.parquet``. A data set directory
    holds split files (``train.jsonl``, ``*.parquet``, ``*.csv``) instead.
    """
    full = os.path.abspath(os.path.expanduser(path))
    if os.path.isfile(full) and full.lower().endswith((".jsonl", ".json")):
        try:
            with open(full, encoding="utf-8") as f:
                first = f.readline()
            row = json.loads(first) if first.strip() else None
        except (OSError, ValueError):
            return None
        if isinstance(row, dict) and "exp" not in row:
            return f"its first line has the keys {sorted(row)[:6]}"
        return None
    if os.path.isdir(full):
        entries = os.listdir(full)
        safe = "".join(ch if ch.isalnum() or ch in "_.-" else "_" for ch in name)
        if f"{safe}.jsonl" in entries or any(e.startswith("part-") for e in entries):
            return None
        found = sorted(
            e for e in entries if e.lower().endswith((".jsonl", ".json", ".parquet", ".csv"))
        )
        if found:
            return "its files: " + ", ".join(found[:4])
    return None


def _loaded_models(cfg: Config) -> list[tuple[Loc, str, str]]:
    """``(loc, path, kind)`` of each model this run loads from a path (its tokenizers are
    read from ``model.model_path`` too): the policy where the trainer or a weight-loading
    rollout engine loads it, an explicit critic, rollout or auxiliary model."""
    mode, model = cfg.run_mode, cfg.model
    if model.external_model.enable or model.tinker.enable:  # served elsewhere
        return []
    rollout = cfg.explorer.rollout_model
    engines = mode.uses_rollout_engines
    rollout_loads = engines and rollout.engine_type in _WEIGHT_LOADING_ENGINES
    own_rollout = bool(rollout.model_path) and rollout.model_path != model.model_path
    found: list[tuple[Loc, str, str]] = []
    if mode.trains or (rollout_loads and not own_rollout):
        found.append((("model", "model_path"), model.model_path, "the model"))
    if (
        mode.trains
        and "critic_model_path" in model.model_fields_set
        and model.critic_model_path not in ("", model.model_path)
    ):
        found.append((("model", "critic_model_path"), model.critic_model_path, "the critic model"))
    if rollout_loads and own_rollout:
        loc = ("explorer", "rollout_model", "model_path")
        found.append((loc, str(rollout.model_path), "the rollout model"))
    for i, aux in enumerate(cfg.explorer.auxiliary_models):
        if engines and aux.engine_type in _WEIGHT_LOADING_ENGINES and aux.model_path:
            loc = ("explorer", "auxiliary_models", i, "model_path")
            found.append((loc, aux.model_path, "the auxiliary model"))
    return found


def rule_paths(c: _Checker, cfg: Config) -> None:
    """Inputs exist and are readable, outputs have a writable place (run level)."""
    model = cfg.model
    for loc, path, kind in _loaded_models(cfg):
        _check_model(c, loc, path, kind)
    if model.chat_template_path:
        full = os.path.expanduser(model.chat_template_path)
        if not os.path.isfile(full) or not os.access(full, os.R_OK):
            c.error(
                ("model", "chat_template_path"),
                model.chat_template_path,
                "must be a readable file holding a chat template",
            )
    explorer_input = cfg.buffer.explorer_input
    sets: list[tuple[Loc, Any]] = []
    if explorer_input.taskset is not None:
        sets.append((("buffer", "explorer_input", "taskset"), explorer_input.taskset))
    sets += [
        (("buffer", "explorer_input", "tasksets", i), t)
        for i, t in enumerate(explorer_input.tasksets)
        if t is not explorer_input.taskset  # the mirror of taskset: checked once, as taskset
    ]
    sets += [
        (("buffer", "explorer_input", "eval_tasksets", i), t)
        for i, t in enumerate(explorer_input.eval_tasksets)
    ]
    for loc, taskset in sets:
        if taskset.storage_type == "file":
            _check_input(c, loc + ("path",), taskset.path, "the task set")
    exp = cfg.buffer.trainer_input.experience_buffer
    if exp is not None and cfg.run_mode.trains_on_dataset and exp.storage_type == "file":
        _check_input(
            c, ("buffer", "trainer_input", "experience_buffer", "path"), exp.path, "the data set"
        )
    for name, aux in cfg.buffer.trainer_input.auxiliary_buffers.items():
        if aux.storage_type == "file":
            loc = ("buffer", "trainer_input", "auxiliary_buffers", name, "path")
            _check_input(c, loc, aux.path, "the auxiliary data set")
            if not aux.schema_type and aux.path:
                rows = _data_set_rows(aux.path, aux.name or name)
                if rows:
                    c.error(
                        loc[:-1] + ("schema_type",),
                        aux.schema_type,
                        f"{aux.path} holds rows of a data set ({rows}), not experiences a run "
                        "wrote; set schema_type to 'sft' (or 'dpo') to format them with the "
                        "model's chat template",
                    )
    if cfg.checkpoint_root_dir:
        _check_output(
            c, ("checkpoint_root_dir",), cfg.checkpoint_root_dir, "the checkpoint directory"
        )
