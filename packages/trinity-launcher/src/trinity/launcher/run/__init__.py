"""The run layer: one coordinator drives every mode.

* :mod:`.clock` -- the sync clock (pure counters and the version an explore step needs);
* :mod:`.policies` -- sync styles and colocation as policies handed to the coordinator;
* :mod:`.coordinator` -- :class:`Coordinator`: the explore loop, the train loop, weight pushes;
* :mod:`.ledger` -- the experiences queued for the trainer and not yet trained;
* :mod:`.records` -- one metrics record per step;
* :mod:`.plan` -- the config a run executes (derived values on a copy);
* :mod:`.ray_session` -- the Ray a run joins or starts;
* :mod:`.preemption` -- a scheduler's stop signal ends a run with a checkpoint.

Beside it, :mod:`trinity.launcher.checkpoint` (:class:`RunCheckpointer`: every mode's run
state, saved and resumed; the trainer writes its part through it) and, above it,
:mod:`trinity.launcher.session` (:class:`RunSession`: a run from a checked config; it builds
the explorer and the trainer). This package imports neither side: they are handed to the
coordinator, so the explorer itself can drive its explore loop with it.
"""

from trinity.utils.lazy import lazy_exports

_EXPORTS = {
    "Coordinator": "trinity.launcher.run.coordinator",
    "ExperienceLedger": "trinity.launcher.run.ledger",
    "ExplorerDrivenSync": "trinity.launcher.run.policies",
    "FixedSync": "trinity.launcher.run.policies",
    "Preempted": "trinity.launcher.run.preemption",
    "PreemptionSettings": "trinity.launcher.run.preemption",
    "RunSettings": "trinity.launcher.run.coordinator",
    "SeparateDevices": "trinity.launcher.run.policies",
    "StepMerger": "trinity.launcher.run.records",
    "StopRequest": "trinity.launcher.run.preemption",
    "SyncClock": "trinity.launcher.run.clock",
    "SyncPolicy": "trinity.launcher.run.policies",
    "TakingTurns": "trinity.launcher.run.policies",
    "TrainerDrivenSync": "trinity.launcher.run.policies",
    "Unsynced": "trinity.launcher.run.policies",
    "required_version": "trinity.launcher.run.clock",
    "sync_policy": "trinity.launcher.run.policies",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
