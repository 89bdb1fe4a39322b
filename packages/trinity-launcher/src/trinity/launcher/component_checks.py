"""Names and arguments of the components a config refers to, checked against the registries.

:func:`check_component_names` refuses workflow, reward-function, operator, task-selector and
priority-function names nobody registered, and arguments those components do not declare,
before anything starts. Both :mod:`validation` (a whole config) and :mod:`stages` (each stage
as it is built) call it, so it lives below both.
"""

from __future__ import annotations

import re
from typing import Any, Optional, Union

from trinity.common.config import Config, ConfigError, ConfigIssue, check_component_args
from trinity.common.rewards import REWARD_FUNCTIONS
from trinity.common.workflows import WORKFLOWS
from trinity.utils.log import get_logger
from trinity.utils.registry import UnknownModuleError

__all__ = ["check_component_names", "not_shipped_hint"]

logger = get_logger(__name__)

#: Workflows Trinity-RFT 0.6 registers that this release does not ship, each with the reason. A
#: config naming one is told the workflow is not supported yet and why, rather than that it is
#: unknown; a plugin registering the name is used as usual. (A test checks that none of them is
#: registered.)
TRINITY_RFT_WORKFLOWS_NOT_SHIPPED: dict[str, str] = {
    "agentscope_v1_react_search_workflow": (
        "its search tools are MCP servers (tavily-mcp or mcp-searxng over stdio, started with "
        "npx), and agentscope 1.0.x's MCP clients need the MCP SDK 1.x, which cannot be "
        "installed beside vLLM (mcp>=2); a workflow_func of agentscope_workflow_adapter_v1 "
        "can give a ReAct agent other search tools"
    ),
    "agentscopev0_react_math_workflow": (
        "it is written for agentscope 0.x, which cannot be installed beside agentscope 1.x; "
        "agentscope_react_math_workflow is the same task on agentscope 1.x"
    ),
}

#: Reward functions Trinity-RFT's users name that this release does not ship, with the reason.
TRINITY_RFT_REWARDS_NOT_SHIPPED: dict[str, str] = {
    "rm_gallery_reward": (
        "it scores with RM-Gallery's reward models (the rm-gallery package), which is not "
        "installed with this release (nor registered by Trinity-RFT 0.6.0 itself); "
        "llm_judge_reward scores with a judge model served by the run"
    ),
}

#: Algorithm types Trinity-RFT 0.6 registers that this release does not ship (names only).
#: Empty: all 24 are registered.
TRINITY_RFT_ALGORITHMS_NOT_SHIPPED: frozenset[str] = frozenset()


def not_shipped_hint(field: str, name: str) -> str:
    """``"'simple_mm_workflow' is a Trinity-RFT 0.6 workflow that is not supported yet in this
    release: <why>. "`` for a name Trinity-RFT 0.6 registers under ``field`` and this release
    does not ship; ``""`` otherwise (an unknown name keeps its "did you mean" message alone)."""
    if field.endswith("default_workflow_type") and name in TRINITY_RFT_WORKFLOWS_NOT_SHIPPED:
        why = TRINITY_RFT_WORKFLOWS_NOT_SHIPPED[name]
        return (
            f"{name!r} is a Trinity-RFT 0.6 workflow that is not supported yet in this "
            f"release: {why}. "
        )
    if field.endswith("default_reward_fn_type") and name in TRINITY_RFT_REWARDS_NOT_SHIPPED:
        why = TRINITY_RFT_REWARDS_NOT_SHIPPED[name]
        return f"{name!r} is a reward function that is not supported yet in this release: {why}. "
    if field == "algorithm.algorithm_type" and name in TRINITY_RFT_ALGORITHMS_NOT_SHIPPED:
        return f"{name!r} is a Trinity-RFT 0.6 algorithm type that is not supported yet. "
    return ""


def check_component_names(config: Config, warnings: Optional[list[str]] = None) -> None:
    """Refuse workflow / reward-function / operator names nobody registered, and arguments
    those components do not declare, before anything starts.

    A typo would otherwise surface as a failed task in every batch of a started run. Names
    are looked up in the registries, so built-ins (entry points of installed packages) and
    plugins loaded from ``--plugin-dir`` count. Per-row names (``format.workflow_key``) are
    checked when the rows are read. Arguments: ``reward_fn_args`` and experience operators'
    ``args`` against the component's declaration (``Args`` or typed ``__init__``);
    ``workflow_args`` only where the workflow declares an ``Args`` model (they are free-form
    otherwise). ``warnings`` collects one line per undeclared component given arguments.

    Raises:
        ConfigError: one issue per bad name (naming the field, the name and the closest known
            name) or bad argument.
    """
    explorer_input = config.buffer.explorer_input
    sets = [("taskset", explorer_input.taskset)] if explorer_input.taskset is not None else []
    sets += [
        (f"tasksets[{i}]", t)
        for i, t in enumerate(explorer_input.tasksets)
        if t is not explorer_input.taskset  # the mirror of taskset: checked once, as taskset
    ]
    sets += [(f"eval_tasksets[{i}]", t) for i, t in enumerate(explorer_input.eval_tasksets)]
    issues: list[ConfigIssue] = []
    found_warnings: list[str] = []
    for where, taskset in sets:
        for field, args_field, registry, derive in (
            ("default_workflow_type", "workflow_args", WORKFLOWS, False),
            ("default_reward_fn_type", "reward_fn_args", REWARD_FUNCTIONS, True),
        ):
            name = getattr(taskset, field, None)
            if name is None:
                continue
            try:
                cls = registry[name]
            except UnknownModuleError as exc:
                path = f"buffer.explorer_input.{where}.{field}"
                issues.append(
                    ConfigIssue(
                        path=path,
                        message=not_shipped_hint(path, name) + str(exc),
                        value=name,
                        kind="unknown_name",
                    )
                )
                continue
            if isinstance(cls, type) and getattr(cls, "reads_images", False):
                issues += _image_engine_issues(config, where, field, name)
            if isinstance(cls, type):
                loc = ("buffer", "explorer_input", *_where_loc(where), args_field)
                found, warned = check_component_args(
                    cls, getattr(taskset, args_field), loc, label=f"{field} {name!r}", derive=derive
                )
                issues += found
                found_warnings += warned
    issues += _operator_issues(config, found_warnings)
    issues += _buffer_name_issues(config, sets)
    if warnings is not None:
        warnings += found_warnings
    for line in found_warnings:
        logger.warning(line)
    if issues:
        raise ConfigError(issues)


#: engine types that generate from image prompts (docs/vlm.md)
IMAGE_ENGINE_TYPES = ("transformers",)


def _image_engine_issues(config: Config, where: str, field: str, name: str) -> list[ConfigIssue]:
    """A workflow that sends images needs a rollout engine that reads them."""
    engine_type = config.explorer.rollout_model.engine_type
    if engine_type in IMAGE_ENGINE_TYPES:
        return []
    return [
        ConfigIssue(
            path="explorer.rollout_model.engine_type",
            message=(
                f"buffer.explorer_input.{where}.{field} {name!r} sends images, and images "
                f"with engine_type {engine_type!r} are not supported yet; allowed with images: "
                f"{', '.join(IMAGE_ENGINE_TYPES)} (vLLM's image support: docs/vlm.md)"
            ),
            value=engine_type,
            kind="not_supported",
        )
    ]


def _where_loc(where: str) -> tuple[Union[str, int], ...]:
    """``"tasksets[2]"`` -> ``("tasksets", 2)``."""
    match = re.fullmatch(r"(\w+)\[(\d+)\]", where)
    return (match.group(1), int(match.group(2))) if match else (where,)


def _operator_issues(config: Config, warnings: list[str]) -> list[ConfigIssue]:
    """Experience operators: registered names and declared arguments."""
    operators = config.data_processor.experience_pipeline.operators
    if not operators:
        return []
    from trinity.buffer.operators import EXPERIENCE_OPERATORS

    issues: list[ConfigIssue] = []
    for index, op in enumerate(operators):
        loc = ("data_processor", "experience_pipeline", "operators", index)
        try:
            cls = EXPERIENCE_OPERATORS[op.name]
        except UnknownModuleError as exc:
            issues.append(
                ConfigIssue(
                    path=_fmt(loc + ("name",)), message=str(exc), value=op.name, kind="unknown_name"
                )
            )
            continue
        if isinstance(cls, type):
            found, warned = check_component_args(
                cls, op.args, loc + ("args",), label=f"operator {op.name!r}"
            )
            issues += found
            warnings += warned
    return issues


def _buffer_name_issues(config: Config, sets: list[tuple[str, Any]]) -> list[ConfigIssue]:
    """Task selectors of task sets and priority functions of replay queues: registered names."""
    from trinity.buffer.storage.queue import PRIORITY_FN
    from trinity.buffer.taskset import TASK_SELECTORS

    checks: list[tuple[str, Any, Any]] = []
    for where, taskset in sets:
        selector = taskset.data_selector.selector_type
        if selector is not None:
            prefix = f"buffer.explorer_input.{where}.data_selector.selector_type"
            checks.append((prefix, selector, TASK_SELECTORS))
    trainer_input = config.buffer.trainer_input
    buffers = [("experience_buffer", trainer_input.experience_buffer)]
    buffers += [(f"auxiliary_buffers.{n}", b) for n, b in trainer_input.auxiliary_buffers.items()]
    for where, buffer in buffers:
        replay = getattr(buffer, "replay_buffer", None)
        if replay is not None and replay.enable:
            path = f"buffer.trainer_input.{where}.replay_buffer.priority_fn"
            checks.append((path, replay.priority_fn, PRIORITY_FN))
    issues: list[ConfigIssue] = []
    for path, name, registry in checks:
        try:
            registry[name]
        except UnknownModuleError as exc:
            issues.append(ConfigIssue(path=path, message=str(exc), value=name, kind="unknown_name"))
    return issues


def _fmt(loc: tuple[Union[str, int], ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
