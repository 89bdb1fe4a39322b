"""Trinity-RFT 0.6's module of its answer extraction and normalisation helpers
(``compute_score_v0``, ``is_equiv``, ``find_boxed_answer`` ...): re-exported from trinity-workflows
on first use (see :mod:`trinity.common.rewards._toolbox`)."""

from trinity.common.rewards._toolbox import EVAL_UTILS, toolbox_exports

__getattr__, __dir__ = toolbox_exports(__name__, EVAL_UTILS)
