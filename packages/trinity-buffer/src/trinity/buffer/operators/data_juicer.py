"""Data-Juicer operators for experiences (``data_juicer``) and task sets (:class:`DataJuicerRunner`).

Data-Juicer (``py-data-juicer``) is an optional dependency — it is large and pulls its own
stack — so it is imported only when a Data-Juicer operator is built, and a missing install
raises :class:`ImportError` with the extra to install (``trinity-buffer[data-juicer]``).

Trinity-RFT runs Data-Juicer behind a separate service; here the operators run in-process
(``service_config`` is accepted for config compatibility and ignored). Operators are listed
by their Data-Juicer name, in either spelling::

    operators:
      - text_length_filter: {min_len: 10}            # Data-Juicer's own "process" list form
      - name: words_num_filter                        # Trinity's OperatorConfig form
        args: {min_num: 3}

Note: Data-Juicer installs some operators' third-party dependencies on first use (e.g.
``clean_html_mapper`` → ``selectolax``); pre-install those where the network is closed.
"""

from __future__ import annotations

import copy
import difflib
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

from trinity.buffer.operators.experience_operator import EXPERIENCE_OPERATORS, ExperienceOperator
from trinity.common.config import OperatorConfig
from trinity.common.experience import Experience
from trinity.utils.log import get_logger

__all__ = [
    "DATA_JUICER_INSTALL_HINT",
    "DataJuicerOperator",
    "DataJuicerRunner",
    "import_data_juicer",
    "normalize_dj_process",
]

DATA_JUICER_INSTALL_HINT = (
    "Data-Juicer operators need the 'py-data-juicer' package: "
    "pip install 'trinity-buffer[data-juicer]'"
)

# Data-Juicer's internal columns (Fields.stats / Fields.meta); literal so that modules that
# only post-process rows need not import Data-Juicer.
DJ_STATS_KEY = "__dj__stats__"
DJ_META_KEY = "__dj__meta__"
_ROW_INDEX = "__trinity_index__"

logger = get_logger(__name__)


def import_data_juicer() -> Any:
    """Import and return the ``data_juicer`` package, or raise ImportError with the install hint."""
    try:
        import data_juicer  # noqa: F401
        import data_juicer.core.data  # noqa: F401
        import data_juicer.ops  # noqa: F401
    except ImportError as exc:
        raise ImportError(f"{DATA_JUICER_INSTALL_HINT} ({exc})") from exc
    return data_juicer


def normalize_dj_process(
    operators: Optional[Sequence[Any]] = None, config_path: Optional[str] = None
) -> tuple[list[dict[str, dict[str, Any]]], Optional[int]]:
    """Turn an operator list (or a Data-Juicer config file) into Data-Juicer's ``process`` list.

    Returns ``(process, np)``: ``process`` is ``[{op_name: args}, ...]``; ``np`` is the
    config file's process count, if it sets one. ``config_path`` wins over ``operators``
    (Trinity-RFT's precedence).
    """
    if config_path:
        import yaml

        path = Path(config_path)
        if not path.is_file():
            raise FileNotFoundError(f"Data-Juicer config file not found: {config_path}")
        recipe = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if not isinstance(recipe, Mapping) or not isinstance(recipe.get("process"), list):
            raise ValueError(f"{config_path}: a Data-Juicer config needs a 'process' list")
        process, _ = normalize_dj_process(recipe["process"])
        np_value = recipe.get("np")
        return process, int(np_value) if np_value is not None else None

    process: list[dict[str, dict[str, Any]]] = []
    for i, entry in enumerate(operators or []):
        if isinstance(entry, OperatorConfig):
            name, args = entry.name, dict(entry.args)
        elif isinstance(entry, str):
            name, args = entry, {}
        elif isinstance(entry, Mapping) and "name" in entry:
            extra = set(entry) - {"name", "args"}
            if extra:
                raise ValueError(
                    f"operators[{i}]: unexpected keys {sorted(extra)} beside name/args"
                )
            name, args = str(entry["name"]), dict(entry.get("args") or {})
        elif isinstance(entry, Mapping) and len(entry) == 1:
            name, raw_args = next(iter(entry.items()))
            args = dict(raw_args or {})
        else:
            raise ValueError(
                f"operators[{i}] must be 'op_name', {{op_name: {{args}}}} or "
                f"{{'name': op_name, 'args': {{...}}}}, got {entry!r}"
            )
        process.append({str(name): args})
    return process, None


class DataJuicerRunner:
    """Builds Data-Juicer operators once and runs them over lists of rows (dicts).

    Shared by the experience operator and the task pipeline. ``np`` is the worker-process
    count of each operator (``num_proc``); 1 keeps everything in this process, which is the
    fast choice for the few hundred rows of one explore step.
    """

    def __init__(self, process: Sequence[Mapping[str, Mapping[str, Any]]], np: int = 1) -> None:
        import_data_juicer()
        from data_juicer.ops import OPERATORS, load_ops

        if not process:
            raise ValueError("no Data-Juicer operators given (operators or config_path)")
        known = sorted(OPERATORS.modules)
        prepared = []
        for i, entry in enumerate(process):
            ((name, args),) = entry.items()
            if name not in OPERATORS.modules:
                close = difflib.get_close_matches(name, known, n=3)
                hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
                raise ValueError(f"operators[{i}]: unknown Data-Juicer operator {name!r}.{hint}")
            args = dict(args)
            args.setdefault("num_proc", int(np))
            prepared.append({name: args})
        self.process_list = prepared
        self.np = int(np)
        self.ops = load_ops(prepared)

    def run(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Run the operators over ``rows`` and return the surviving (possibly edited) rows."""
        if not rows:
            return []
        from data_juicer.core.data import NestedDataset

        dataset = NestedDataset.from_list(rows)
        result = dataset.process(self.ops, open_monitor=False)
        return result.to_list()


def _stat_number(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


@EXPERIENCE_OPERATORS.register_module("data_juicer")
class DataJuicerOperator(ExperienceOperator):
    """Run Data-Juicer operators over experiences.

    Each experience becomes one row: ``text`` = the response text, ``prompt`` = the prompt
    text, ``reward``. Operators read ``text`` by default (set an operator's ``text_key:
    prompt`` to judge prompts). Filters drop experiences; text mappers rewrite
    ``response_text`` / ``prompt_text`` (token ids stay as generated). Statistics computed by
    filters (e.g. ``text_len``) and meta tags are copied into ``exp.info`` so later operators
    (``reward_shaping_mapper``) can use them.

    Args:
        operators: Data-Juicer operators, ``[{name: args}]`` or ``[{name, args}]``.
        config_path: a Data-Juicer config file whose ``process`` list is used instead.
        np: worker processes per operator (default 1: in-process).
        service_config: Trinity-RFT's Data-Juicer service settings; accepted and ignored
            (operators run in-process here).
    """

    def __init__(
        self,
        operators: Optional[list[Any]] = None,
        config_path: Optional[str] = None,
        np: int = 1,
        service_config: Any = None,
    ) -> None:
        if service_config is not None and getattr(service_config, "server_url", None):
            logger.warning(
                "data_juicer operator: service_config.server_url is ignored; Data-Juicer "
                "operators run in-process"
            )
        process, file_np = normalize_dj_process(operators, config_path)
        self.runner = DataJuicerRunner(process, np=file_np or np)
        self._warned_no_text = False

    def process(self, exps: list[Experience]) -> tuple[list[Experience], dict]:
        if not exps:
            return [], {"filtered_count": 0}
        if not self._warned_no_text and any(e.response_text is None for e in exps):
            self._warned_no_text = True
            logger.warning(
                "data_juicer operator: some experiences have no response_text; Data-Juicer "
                "sees an empty text for them"
            )
        rows = [
            {
                "text": exp.response_text or "",
                "prompt": exp.prompt_text or "",
                "reward": exp.reward,
                _ROW_INDEX: i,
            }
            for i, exp in enumerate(exps)
        ]
        out_rows = self.runner.run(rows)

        result: list[Experience] = []
        seen: set[int] = set()
        stat_values: dict[str, list[float]] = {}
        for row in out_rows:
            index = row.get(_ROW_INDEX)
            if index is None:
                continue  # a row made up by the operator: it has no experience behind it
            exp = exps[int(index)]
            if int(index) in seen:  # an operator duplicated the row: duplicate the experience
                exp = copy.deepcopy(exp)
            seen.add(int(index))
            if row.get("text", "") != (exp.response_text or ""):
                exp.response_text = row["text"]
            if row.get("prompt", "") != (exp.prompt_text or ""):
                exp.prompt_text = row["prompt"]
            for key in (DJ_STATS_KEY, DJ_META_KEY):
                extra = row.get(key)
                if isinstance(extra, Mapping):
                    exp.info.update(extra)
                    if key == DJ_STATS_KEY:
                        for name, value in extra.items():
                            number = _stat_number(value)
                            if number is not None:
                                stat_values.setdefault(name, []).append(number)
            result.append(exp)
        metrics: dict[str, float] = {"filtered_count": len(exps) - len(seen)}
        for name, values in stat_values.items():
            metrics[f"{name}/mean"] = sum(values) / len(values)
        return result, metrics
