"""``trinity.trainer.trainer``: Trinity-RFT 0.6's module of its trainer and of
``get_latest_hf_checkpoint_path`` (0.5 kept it in ``trinity.trainer.verl.utils``; both paths
resolve to the same function). Trinity-RFT's ``Trainer`` class is not here: the trainer is
:mod:`trinity.launcher.trainer` (docs/compat.md, names table).
"""

from trinity.trainer.verl.utils import get_latest_hf_checkpoint_path

__all__ = ["get_latest_hf_checkpoint_path"]
