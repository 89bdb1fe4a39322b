"""Trinity-RFT's ``trinity.trainer`` paths that code written for it imports.

The trainer here is :mod:`trinity.launcher.trainer` (verl's FSDP2 engine driven by the run
layer); this package holds only the helpers Trinity-RFT's launcher and tests reach by these
names, such as :func:`get_latest_hf_checkpoint_path` (the previous stage's model for the next
stage of a multi-stage run).
"""

from trinity.trainer.verl.utils import get_latest_hf_checkpoint_path

__all__ = ["get_latest_hf_checkpoint_path"]
