"""Mode ``serve``: online RL from live traffic (Trinity-RFT 0.6's ``mode: serve``).

An OpenAI-compatible service in front of the rollout engines records every answer with its
token ids and log-probs; clients send rewards (``/feedback``) and ``/commit`` writes the
rewarded experiences to the run's buffer, which a trainer (mode ``train``) reads; the service
loads each new checkpoint the trainer saves. See :mod:`.app` (HTTP), :mod:`.service` (state),
:mod:`.recorder` (what waits for feedback) and :mod:`.run` (the run).
"""

from trinity.launcher.serve.recorder import SessionRecorder
from trinity.launcher.serve.service import ServeService, latest_trained_step

__all__ = ["ServeService", "SessionRecorder", "latest_trained_step"]
