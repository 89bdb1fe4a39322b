"""Trinity-RFT's path before 0.6 of its answer extraction and normalisation helpers
(0.6: ``trinity.common.rewards.eval_utils``): re-exported from trinity-workflows
on first use (see :mod:`trinity.common.rewards._toolbox`)."""

from trinity.common.rewards._toolbox import EVAL_UTILS, toolbox_exports

__getattr__, __dir__ = toolbox_exports(__name__, EVAL_UTILS)
