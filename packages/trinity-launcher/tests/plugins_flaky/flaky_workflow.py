"""A plugin workflow that fails like real user code does: it raises in 15% of its runs and
hangs in 5% (a blocking ``time.sleep`` inside ``run_async``, which blocks the runner's event
loop so nothing in that process can interrupt it), decided by a hash of
the task's ids so a run is repeatable. Every failure is appended to ``<log_dir>/failures.log``
before it happens, so a test can check that the metrics count each one."""

from __future__ import annotations

import os
import random
import time

from trinity.common.workflows import WORKFLOWS
from trinity.workflows.single_turn import ArithmeticWorkflow


@WORKFLOWS.register_module("flaky_arithmetic")
class FlakyArithmeticWorkflow(ArithmeticWorkflow):
    raise_rate = 0.15
    hang_rate = 0.05

    async def run_async(self):
        task = self.task
        draw = random.Random(f"{task.batch_id}/{task.task_id}").random()
        log_dir = (task.workflow_args or {}).get("log_dir")
        if draw < self.raise_rate + self.hang_rate:
            kind = "raise" if draw < self.raise_rate else "hang"
            if log_dir:
                with open(os.path.join(log_dir, "failures.log"), "a") as f:
                    f.write(f"{kind} {task.batch_id}/{task.task_id}\n")
            if kind == "raise":
                raise RuntimeError(f"flaky workflow: task {task.batch_id}/{task.task_id} fails")
            time.sleep(3600)  # blocks the runner's event loop: only a new process helps
        return await super().run_async()
