"""``trinity.trainer.verl.utils``: where Trinity-RFT keeps ``get_latest_hf_checkpoint_path``.

Its launcher starts each stage of a multi-stage run from the Hugging Face model the previous
stage's trainer saved, and looks that model up here (its tests patch this name), so
:mod:`trinity.cli.launcher` reads it from this module at call time. The checkpoint layout is
ours (:mod:`trinity.launcher.checkpoint`): ``<checkpoint_job_dir>/global_step_N/actor/huggingface``
of the step the ``latest_checkpointed_iteration.txt`` marker names, as verl writes it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from trinity.common.config import Config

__all__ = ["get_latest_hf_checkpoint_path"]


def get_latest_hf_checkpoint_path(config: Config) -> Optional[str]:
    """The Hugging Face model directory of the run's latest complete checkpoint.

    ``None`` when the run left none: no complete checkpoint in its ``checkpoint_job_dir``, or
    one without Hugging Face weights (``trainer.save_hf_checkpoint`` never or not on that
    step). A stage of a multi-stage run saves them on its last step.

    Raises:
        ValueError: ``trainer.trainer_type`` is not ``verl`` (Trinity-RFT's condition: the
            layout is verl's).
    """
    if config.trainer.trainer_type != "verl":
        raise ValueError(
            f"get_latest_hf_checkpoint_path reads verl's checkpoint layout; trainer.trainer_type "
            f"is {config.trainer.trainer_type!r}"
        )
    from trinity.launcher.stages import final_hf_weights

    return final_hf_weights(config)
