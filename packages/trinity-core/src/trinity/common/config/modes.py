"""The run-mode table: what each ``mode:`` does, in one place.

Every question code asks of a mode ("does it explore?", "is there a trainer?", "do the engines
and the trainer take turns?") is a column of :data:`RUN_MODES`, read through
:func:`run_mode_spec` (or ``Config.run_mode``). No other module compares ``config.mode`` with a
mode's name: a new mode is one row here (and, when it runs, one entry of the launcher's
coordinator), not a search through the code for string literals.

========  ========  ======  =======  =========  =========  =====  =========  ==========  ========
mode      explores  trains  taskset  colocated  resumable  saves  ckpt_eval  serves_api  runnable
========  ========  ======  =======  =========  =========  =====  =========  ==========  ========
both      yes       yes     needed   no         yes        yes    no         no          yes
colocate  yes       yes     needed   yes        yes        yes    no         no          yes
explore   yes       no      needed   no         yes        yes    no         no          yes
train     no        yes     no       no         yes        yes    no         no          yes
bench     no        no      no       no         no         yes    yes        no          yes
serve     no        no      no       no         no         no     no         yes         yes
========  ========  ======  =======  =========  =========  =====  =========  ==========  ========

(``taskset`` is the column ``needs_taskset``, ``ckpt_eval`` ``evaluates_checkpoints``.) The
properties of :class:`RunModeSpec` answer the questions that combine columns
(``explores_and_trains``, ``uses_rollout_engines``, ``trains_on_dataset``,
``uses_eval_tasksets``, ``writes_experiences``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RUN_MODES", "RunModeSpec", "run_mode_spec"]


@dataclass(frozen=True)
class RunModeSpec:
    """One row of the run-mode table.

    Attributes:
        name: the ``mode:`` value.
        explores: an explorer runs train task sets and writes experiences.
        trains: a trainer takes optimizer steps.
        needs_taskset: a train task set (``buffer.explorer_input.taskset``) is required.
        colocated: the rollout engines and the trainer share devices and take turns.
        resumable: a killed run resumes from its run directory with the same command.
        saves: the run writes into ``checkpoint_job_dir`` (metrics, checkpoints, logs).
        evaluates_checkpoints: the run evaluates the model and the checkpoints of its
            directory, and nothing else (``bench``).
        serves_api: the rollout engines serve an OpenAI-compatible API to outside clients,
            whose requests become experiences (``serve``).
        runnable: this release runs it (the others are validated only).
    """

    name: str
    explores: bool
    trains: bool
    needs_taskset: bool
    colocated: bool
    resumable: bool
    saves: bool
    evaluates_checkpoints: bool = False
    serves_api: bool = False
    runnable: bool = True

    @property
    def explores_and_trains(self) -> bool:
        """An explorer and a trainer in one run (``both``, ``colocate``): weights are synced."""
        return self.explores and self.trains

    @property
    def uses_rollout_engines(self) -> bool:
        """The run starts rollout engines (everything but pure training)."""
        return not (self.trains and not self.explores)

    @property
    def trains_on_dataset(self) -> bool:
        """A trainer and no explorer (``train``): the trainer reads a prepared data set
        (``buffer.trainer_input.experience_buffer``), in epochs, and nothing writes to it."""
        return self.trains and not self.explores

    @property
    def uses_eval_tasksets(self) -> bool:
        """The run evaluates on ``buffer.explorer_input.eval_tasksets``: every exploring mode
        (at its eval intervals) and the modes that evaluate checkpoints (``bench``)."""
        return self.explores or self.evaluates_checkpoints

    @property
    def writes_experiences(self) -> bool:
        """Experiences come out of the rollout engines, through the experience pipeline: the
        exploring modes, and the modes whose API requests become experiences (``serve``)."""
        return self.explores or self.serves_api


RUN_MODES: dict[str, RunModeSpec] = {
    spec.name: spec
    for spec in (
        RunModeSpec(
            "both", explores=True, trains=True, needs_taskset=True, colocated=False,
            resumable=True, saves=True,
        ),
        RunModeSpec(
            "colocate", explores=True, trains=True, needs_taskset=True, colocated=True,
            resumable=True, saves=True,
        ),
        RunModeSpec(
            "explore", explores=True, trains=False, needs_taskset=True, colocated=False,
            resumable=True, saves=True,
        ),
        RunModeSpec(
            "train", explores=False, trains=True, needs_taskset=False, colocated=False,
            resumable=True, saves=True,
        ),
        RunModeSpec(
            "bench", explores=False, trains=False, needs_taskset=False, colocated=False,
            resumable=False, saves=True, evaluates_checkpoints=True,
        ),
        RunModeSpec(
            "serve", explores=False, trains=False, needs_taskset=False, colocated=False,
            resumable=False, saves=False, serves_api=True,
        ),
    )
}  # fmt: skip


def run_mode_spec(mode: str) -> RunModeSpec:
    """The row of ``mode`` (case-insensitive).

    Raises:
        ValueError: ``mode`` is not a run mode (the message lists the modes).
    """
    try:
        return RUN_MODES[str(mode).strip().lower()]
    except KeyError:
        raise ValueError(
            f"mode: {mode!r} is not a run mode; use one of {', '.join(RUN_MODES)}"
        ) from None
