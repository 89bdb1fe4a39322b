"""Trinity-RFT 0.6's module of its DAPO-style boxed-answer grading
(``grade_answer``, ``match_answer``, ``compute_score``): re-exported from trinity-workflows
on first use (see :mod:`trinity.common.rewards._toolbox`)."""

from trinity.common.rewards._toolbox import NAIVE_DAPO_SCORE, toolbox_exports

__getattr__, __dir__ = toolbox_exports(__name__, NAIVE_DAPO_SCORE)
