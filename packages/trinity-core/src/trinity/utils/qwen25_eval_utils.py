"""Trinity-RFT's path before 0.6 of its Qwen2.5-Math style answer extraction and
comparison (0.6: ``trinity.common.rewards.qwen25_eval``): re-exported from trinity-workflows
on first use (see :mod:`trinity.common.rewards._toolbox`)."""

from trinity.common.rewards._toolbox import QWEN25_EVAL, toolbox_exports

__getattr__, __dir__ = toolbox_exports(__name__, QWEN25_EVAL)
