"""Rules that look outside the config: the model's own context length and usable paths.

* :func:`rule_model_context` (schema level, cheap): when ``model.model_path`` is a readable
  local directory with a ``config.json``, no token limit may exceed what the model can attend
  to (``max_position_embeddings``, times a RoPE scaling ``factor`` where one is configured).
  A hub id or a model that does not exist yet (the quickstart builds its own) is not read.
* :func:`rule_paths` (run level, ``check_and_update``): inputs a run reads must exist and be
  readable; outputs a run writes need a writable place. Only paths that are unmistakably local
  are checked (absolute, ``./``, ``../`` or ``~``): a relative name such as ``openai/gsm8k``
  may be a hub data set and is left to the reader.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any, Optional, Union

from ._utils import _Checker

if TYPE_CHECKING:
    from ._core import Config

Loc = tuple[Union[str, int], ...]


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


def _check_input(c: _Checker, loc: Loc, path: Optional[str], kind: str) -> None:
    """An input path that is unmistakably local must exist and be readable."""
    if not path or "://" in path or not _explicitly_local(path):
        return
    full = os.path.expanduser(path)
    if not os.path.exists(full):
        c.error(loc, path, f"{kind} does not exist (a local path: {os.path.abspath(full)})")
    elif not os.access(full, os.R_OK):
        c.error(loc, path, f"{kind} is not readable by this user")


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


def rule_paths(c: _Checker, cfg: Config) -> None:
    """Inputs exist and are readable, outputs have a writable place (run level)."""
    model = cfg.model
    if model.model_path and os.path.exists(os.path.expanduser(model.model_path)):
        _check_input(c, ("model", "model_path"), os.path.abspath(model.model_path), "the model")
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
