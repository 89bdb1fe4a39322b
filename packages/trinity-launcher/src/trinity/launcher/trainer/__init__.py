"""Trinity's trainer building blocks on verl's FSDP2 engine.

* :mod:`.verl_compat` - the adapter that lets verl 0.9.1's engine run on CPU (gloo) as well as on
  CUDA (NCCL); every verl-version-specific patch lives there.
* :mod:`.verl_engine` - :class:`VerlTrainEngine`: log-probs, train steps with Trinity's losses
  (:class:`TrinityLoss`), full state dicts for weight sync, checkpoints and HF export.
* :mod:`.critic` - :class:`VerlCriticEngine`: PPO's value model on verl's value-model engine.

Importing this package does not import verl (it is an optional dependency:
``trinity-launcher[verl]``); building an engine does.
"""

from trinity.launcher.trainer.critic import VerlCriticEngine
from trinity.launcher.trainer.verl_compat import (
    SUPPORTED_VERL_VERSION,
    UnsupportedVerlVersion,
    apply_verl_compat,
)
from trinity.launcher.trainer.verl_engine import TrinityLoss, VerlEngineSettings, VerlTrainEngine

__all__ = [
    "SUPPORTED_VERL_VERSION",
    "TrinityLoss",
    "UnsupportedVerlVersion",
    "VerlCriticEngine",
    "VerlEngineSettings",
    "VerlTrainEngine",
    "apply_verl_compat",
]
