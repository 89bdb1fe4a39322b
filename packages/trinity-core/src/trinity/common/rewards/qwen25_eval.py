"""Trinity-RFT 0.6's module of its Qwen2.5-Math style answer extraction and comparison
(``extract_answer``, ``verify_math_answer``, ``math_equal`` ...): re-exported from trinity-workflows
on first use (see :mod:`trinity.common.rewards._toolbox`)."""

from trinity.common.rewards._toolbox import QWEN25_EVAL, toolbox_exports

__getattr__, __dir__ = toolbox_exports(__name__, QWEN25_EVAL)
