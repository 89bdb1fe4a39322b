"""Names Trinity-RFT code imports resolve across our package boundaries (docs/compat.md)."""

from __future__ import annotations

import subprocess
import sys


def test_monitor_sinks_resolve_from_core_without_importing_the_launcher():
    """``trinity.utils.monitor.MONITOR`` (core) finds the launcher's sinks by entry point."""
    code = (
        "import sys\n"
        "from trinity.utils.monitor import MONITOR, Monitor\n"
        "assert 'trinity.launcher' not in sys.modules\n"
        "cls = MONITOR.get('tensorboard')\n"
        "assert cls.__module__ == 'trinity.launcher.monitor' and issubclass(cls, Monitor)\n"
        "print(sorted(MONITOR.list()))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "['mlflow', 'swanlab', 'tensorboard', 'wandb']"
