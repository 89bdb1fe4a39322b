"""Property: any mutation of an example config ends in acceptance or in located ConfigErrors.

Each example in ``examples/*.yaml`` is mutated (a value replaced by another type, a non-finite
or negative number, a random string; a key deleted; an unknown key added; 1-3 mutations) and
run through :func:`trinity.launcher.validation.validate_config` -- the validation
``trinity-launch`` and the Studio run. It must either accept the config or raise a
``ConfigError`` whose every issue names a field (and a message); any other exception is a
traceback a user would see instead of an answer.

Bounded: a fixed number of examples (no deadline per example: the machine is shared), seeded
by hypothesis' database-free derandomized mode so CI runs are reproducible.
"""

from __future__ import annotations

import copy
import math
import os
from pathlib import Path
from typing import Any, Union

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trinity.common.config import ConfigError
from trinity.launcher.validation import validate_config

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
RAW = {p.stem: yaml.safe_load(p.read_text(encoding="utf-8")) for p in EXAMPLES}
ENV_VARS = ("TRINITY_MODEL_PATH", "TRINITY_CHECKPOINT_ROOT_DIR", "TRINITY_QUICKSTART_MODEL")
ALLOW_HUB_MODELS = "TRINITY_ALLOW_HUB_MODELS"

pytestmark = pytest.mark.skipif(not EXAMPLES, reason="needs the repository checkout")

Loc = tuple[Union[str, int], ...]


def _locations(node: Any, loc: Loc = ()) -> list[Loc]:
    """Every key / list index of the tree (the root excluded)."""
    found: list[Loc] = []
    if isinstance(node, dict):
        for key, value in node.items():
            found.append(loc + (key,))
            found += _locations(value, loc + (key,))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found.append(loc + (index,))
            found += _locations(value, loc + (index,))
    return found


def _mappings(node: Any, loc: Loc = ()) -> list[Loc]:
    found = [loc] if isinstance(node, dict) else []
    if isinstance(node, dict):
        for key, value in node.items():
            found += _mappings(value, loc + (key,))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _mappings(value, loc + (index,))
    return found


def _get(node: Any, loc: Loc) -> Any:
    for part in loc:
        node = node[part]
    return node


other_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**12), max_value=10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, -1, -0.5, 0, -(10**9)]),
    st.text(max_size=12),
    st.lists(st.integers(-3, 3), max_size=3),
    st.dictionaries(st.text(min_size=1, max_size=6), st.integers(-3, 3), max_size=2),
)


@st.composite
def mutated_examples(draw: st.DrawFn) -> tuple[str, dict[str, Any], list[str]]:
    stem = draw(st.sampled_from(sorted(RAW)))
    data = copy.deepcopy(RAW[stem])
    done: list[str] = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        if kind == "add":
            where = draw(st.sampled_from(_mappings(data)))
            key = draw(st.text(min_size=1, max_size=10))
            _get(data, where)[key] = draw(other_values)
            done.append(f"add {where}.{key!r}")
            continue
        locs = _locations(data)
        if not locs:
            continue
        loc = draw(st.sampled_from(locs))
        parent = _get(data, loc[:-1])
        if kind == "delete":
            del parent[loc[-1]]
            done.append(f"delete {loc}")
        else:
            parent[loc[-1]] = draw(other_values)
            done.append(f"replace {loc}")
    return stem, data, done


@pytest.fixture(scope="module", autouse=True)
def _at_repository_root():
    """Examples name data by repository-relative paths; their env defaults count."""
    cwd, saved = os.getcwd(), {v: os.environ.pop(v, None) for v in ENV_VARS}
    os.chdir(REPO)
    # the GPU examples' hub model is not on this machine: without this every one of them is
    # refused for its model_path, and the accepting side of the property goes untested
    saved[ALLOW_HUB_MODELS] = os.environ.get(ALLOW_HUB_MODELS)
    os.environ[ALLOW_HUB_MODELS] = "1"
    yield
    os.chdir(cwd)
    os.environ.pop(ALLOW_HUB_MODELS, None)
    for var, value in saved.items():
        if value is not None:
            os.environ[var] = value


@settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(mutated_examples())
def test_any_mutation_of_an_example_is_accepted_or_refused_with_located_errors(case):
    stem, data, mutations = case
    try:
        validate_config(data)
    except ConfigError as exc:
        assert exc.errors, (stem, mutations)
        for issue in exc.errors:
            assert issue.message, (stem, mutations, str(exc))
            assert issue.path or issue.kind in ("syntax", "io"), (stem, mutations, str(exc))
