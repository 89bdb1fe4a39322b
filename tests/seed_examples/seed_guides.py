"""The guides' Python code blocks, cut out of the guide texts at test time and run verbatim.

(A plain module beside the tests; ``conftest.py`` puts this directory on ``sys.path``.)

The developer guides live in ``shared/seeds/`` beside the checkout (``../shared`` in CI; any
parent directory's ``shared/seeds`` is accepted). :func:`guide_blocks` cuts every fenced
```` ```python ```` block out of them; :func:`run_blocks` runs blocks, unchanged, in one fresh
module namespace each, after :data:`PRELUDE` — the imports the guides leave out ("``# import
some packages``"). A block that continues another (the step-by-step ``ExampleWorkflow``) runs
after it in the same namespace, with ``Workflow`` bound to the class the previous block made, so
each step's methods add to the last step's class as the guide means them to.

Classes the blocks register stay registered until :func:`unregister_guide_classes` (the tests
call it after each test), which brings back a built-in they replaced (``"opmd"``,
``"reward_filter"``).
"""

from __future__ import annotations

import hashlib
import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest


def _find_seeds() -> Path | None:
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent / "shared" / "seeds"
        if candidate.is_dir():
            return candidate
    return None


SEEDS = _find_seeds()
SKIP_REASON = "the guides (shared/seeds/ beside the checkout) are not here"

FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```python[ \t]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.S | re.M
)

#: Names the guides use without importing them. Run before every block, in its namespace.
PRELUDE = """\
from abc import ABC, abstractmethod
from typing import Dict, List, Optional, Tuple

import openai
import torch

from trinity.common.experience import Experience, group_by
from trinity.common.models.model import ModelWrapper
from trinity.common.workflows import Task, Workflow
from trinity.common.workflows.workflow import WORKFLOWS
from trinity.algorithm import ALGORITHM_TYPE, AlgorithmType
from trinity.algorithm.advantage_fn import ADVANTAGE_FN, AdvantageFn, GroupAdvantage
from trinity.algorithm.policy_loss_fn import POLICY_LOSS_FN, PolicyLossFn
from trinity.algorithm.utils import masked_loss, masked_mean
from trinity.buffer.operators import EXPERIENCE_OPERATORS, ExperienceOperator
"""

#: Module names of executed blocks start with this (cleanup finds their registrations by it).
MODULE_PREFIX = "guide_block_"


@dataclass(frozen=True)
class Block:
    """One fenced Python block: ``key`` is the first 10 hex digits of its text's SHA-256."""

    key: str
    text: str
    places: tuple[str, ...]  # "000_4e0d32affe87ddca.txt:103" for each place it is printed


def _dedent(indent: str, body: str) -> str:
    return "".join(
        line[len(indent) :] if line.startswith(indent) else line for line in body.splitlines(True)
    )


def guide_blocks() -> dict[str, Block]:
    """Every fenced Python block of the guides, by key (a block printed twice is one entry)."""
    if SEEDS is None:
        pytest.skip(SKIP_REASON, allow_module_level=True)  # also at import time
    found: dict[str, tuple[str, list[str]]] = {}
    for path in sorted(SEEDS.glob("*.txt")):
        text = path.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            body = _dedent(match["indent"], match["body"])
            key = hashlib.sha256(body.encode()).hexdigest()[:10]
            line = text.count("\n", 0, match.start()) + 1
            found.setdefault(key, (body, []))[1].append(f"{path.name}:{line}")
    return {k: Block(k, body, tuple(places)) for k, (body, places) in found.items()}


def run_blocks(*keys: str, name: str | None = None, extra: dict | None = None) -> types.ModuleType:
    """Run the blocks ``keys`` in order in one fresh module (after :data:`PRELUDE`).

    From the second block on, ``Workflow`` is the class the previous block defined last (the
    step-by-step guide's blocks continue one class). ``extra`` adds names a block uses but no
    guide defines. The module is put in ``sys.modules`` (classes pickle, ``inspect`` works).
    """
    blocks = guide_blocks()
    module_name = name or MODULE_PREFIX + "_".join(keys)
    module = types.ModuleType(module_name)
    sys.modules[module_name] = module
    exec(compile(PRELUDE, f"<prelude of {module_name}>", "exec"), module.__dict__)
    module.__dict__.update(extra or {})
    previous: str | None = None
    for key in keys:
        if previous is not None:
            module.__dict__["Workflow"] = module.__dict__[previous]
        block = blocks[key]
        before = {k: v for k, v in module.__dict__.items() if isinstance(v, type)}
        where = f"<guide block {key} at {block.places[0]}>"
        exec(compile(block.text, where, "exec"), module.__dict__)
        made = [
            k for k, v in module.__dict__.items() if isinstance(v, type) and before.get(k) is not v
        ]
        previous = made[-1] if made else previous
    return module


def plugin_source(*keys: str) -> str:
    """A plugin-directory module: :data:`PRELUDE` then the blocks ``keys``, verbatim."""
    blocks = guide_blocks()
    parts = [PRELUDE]
    for key in keys:
        parts.append(f"# ---- guide block {key} ({', '.join(blocks[key].places)}), verbatim ----\n")
        parts.append(blocks[key].text)
    return "\n".join(parts)


def unregister_guide_classes() -> None:
    """Unregister what executed blocks registered (a built-in they replaced comes back)."""
    from trinity.algorithm import ALGORITHM_TYPE
    from trinity.algorithm.advantage_fn import ADVANTAGE_FN
    from trinity.algorithm.policy_loss_fn import POLICY_LOSS_FN
    from trinity.buffer.operators import EXPERIENCE_OPERATORS
    from trinity.common.workflows import WORKFLOWS

    for registry in (WORKFLOWS, ADVANTAGE_FN, POLICY_LOSS_FN, ALGORITHM_TYPE, EXPERIENCE_OPERATORS):
        for reg_name, obj in registry.modules.items():
            if str(getattr(obj, "__module__", "")).startswith(MODULE_PREFIX):
                registry.unregister(reg_name)
    for module_name in [m for m in sys.modules if m.startswith(MODULE_PREFIX)]:
        del sys.modules[module_name]


#: The guides' example code the other tests of this directory use, by the name they use.
#: Keys are blocks of :func:`guide_blocks` (see the table of ``test_guide_blocks_verbatim.py``).
SNIPPETS = {
    # the newest guide's full ExampleWorkflow (000; 002 prints the same)
    "example_workflow_full": ("dfb69e60a8",),
    # the step-by-step ExampleWorkflow: __init__, run, then the decorated resettable/reset
    "example_workflow_steps": ("03f9bd1dd3", "4917fe85a3", "c0ea723e3b"),
    # the older guide's (001) full ExampleWorkflow: __init__(model, task, auxiliary_models)
    "example_workflow_v0": ("3c0cee2d43",),
    "opmd_advantage_003": ("cc93483705",),
    "opmd_policy_loss_000": ("8c6c905625",),  # masked_mean (000, 001, 002)
    "opmd_policy_loss_003": ("5c28a23949",),  # masked_loss with loss_agg_mode (003)
    "opmd_algorithm": ("187213120b",),
    "reward_filter": ("a31976c93c",),
}
