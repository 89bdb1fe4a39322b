"""Trinity-RFT's path before 0.6 of its boxed-answer grading (``grade_answer``,
``match_answer``; 0.6 has them in ``trinity.common.rewards.naive_dapo_score``): re-exported from
trinity-workflows on first use (see :mod:`trinity.common.rewards._toolbox`)."""

from trinity.common.rewards._toolbox import NAIVE_DAPO_SCORE, toolbox_exports

__getattr__, __dir__ = toolbox_exports(__name__, NAIVE_DAPO_SCORE)
