"""Where the names of Trinity-RFT's math-answer toolbox live, for core's re-export modules.

Trinity-RFT's reward code imports string-level math helpers from six module paths
(``trinity.common.rewards.{eval_utils, qwen25_eval, naive_dapo_score}`` in 0.6, and the older
``trinity.utils.{eval_utils, qwen25_eval_utils, math_utils}``). They need math-verify, which
only trinity-workflows depends on, so they live in ``trinity.workflows.rewards.eval_utils``;
each path here is a module of core's namespace that resolves its names from there on first
use (:func:`toolbox_exports`), without core importing its sibling.
"""

from __future__ import annotations

from typing import Any, Callable

from trinity.utils.lazy import lazy_exports

#: the module that implements every name below, and the distribution shipping it
IMPLEMENTATION = "trinity.workflows.rewards.eval_utils"
PROVIDER = "trinity-workflows"

#: ``eval_utils``: extraction, string normalisation and Countdown helpers
EVAL_UTILS = (
    "ANS_RE",
    "INVALID_ANS",
    "parse_with_timeout",
    "verify_with_timeout",
    "simple_answer_parser",
    "find_boxed_answer",
    "extract_solution",
    "validate_equation",
    "evaluate_equation",
    "validate_think_pattern",
    "compute_score_v0",
    "is_equiv",
    "remove_boxed",
    "last_boxed_only_string",
    "remove_right_units",
    "strip_string",
)
#: ``qwen25_eval``: free-text answer extraction and semantic comparison
QWEN25_EVAL = (
    "verify_math_answer",
    "extract_answer",
    "strip_string",
    "fix_fracs",
    "fix_a_slash_b",
    "fix_sqrt",
    "math_equal",
)
#: ``naive_dapo_score`` (the older ``math_utils``): DAPO-style boxed grading
NAIVE_DAPO_SCORE = ("normalize_final_answer", "grade_answer", "match_answer", "compute_score")


def toolbox_exports(
    module: str, names: tuple[str, ...]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` of re-export module ``module`` for ``names``."""
    return lazy_exports(module, dict.fromkeys(names, IMPLEMENTATION), provider=PROVIDER)
