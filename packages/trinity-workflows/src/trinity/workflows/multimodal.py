"""Vision-language single-turn workflows: Trinity-RFT 0.6's ``simple_mm_workflow`` and
``async_simple_mm_workflow``.

The row's ``format.image_key`` column holds its images (one or a list: paths, bytes, PIL
images, base64 data URLs or ``datasets`` ``Image`` values, see
:mod:`trinity.common.models.mm_utils`); they go into the user message at the prompt's
``<image>`` tags, the ones beyond the tags first. The engine renders them with the model's
image processor, and each Experience carries the processor's inputs for the trainer.

Differences from 0.6, deliberate: 0.6 always sends its math system prompt; here it is the
default only with the default reward (``math_boxed_reward``, which scores the ``\\boxed{}``
answer that prompt asks for), and ``format.system_prompt`` replaces it as in every other
workflow. Videos (``format.video_key``) are not supported yet.
"""

from __future__ import annotations

from typing import Any, Optional

from trinity.common.models.mm_utils import build_mm_message
from trinity.common.workflows import WORKFLOWS, Task
from trinity.workflows.common import require_keys
from trinity.workflows.single_turn import BOXED_THINK_SYSTEM_PROMPT, SimpleWorkflow

__all__ = ["AsyncSimpleMMWorkflow", "SimpleMMWorkflow"]


@WORKFLOWS.register_module("simple_mm_workflow")
class SimpleMMWorkflow(SimpleWorkflow):
    """Ask the task's prompt about the row's images; score every answer with the task's reward
    (default ``math_boxed_reward``)."""

    default_reward_fn = "math_boxed_reward"
    #: the messages hold images: the run's rollout engine must read them (checked at validation)
    reads_images = True

    def check_task(self, task: Task) -> None:
        super().check_task(task)
        key = task.format_args.image_key
        if key:
            require_keys(task.raw_task, {key: "format.image_key"}, self.workflow_name)

    def reset(self, task: Task) -> None:
        super().reset(task)
        key = task.format_args.image_key
        #: the row's images, in prompt order
        self.images: list[Any] = _as_list(self.raw_task.get(key)) if key else []

    def system_prompt_for(self, task: Task) -> Optional[str]:
        reward = task.reward_fn
        if reward is None or reward == "math_boxed_reward":
            return BOXED_THINK_SYSTEM_PROMPT
        return None

    def format_messages(self) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        if self.system_prompt:
            messages.append({"role": "system", "content": self.system_prompt})
        messages.append(build_mm_message(self.task_desc, self.images, []))
        if self.reply_prefix:
            messages.append({"role": "assistant", "content": self.reply_prefix})
        return messages


@WORKFLOWS.register_module("async_simple_mm_workflow")
class AsyncSimpleMMWorkflow(SimpleMMWorkflow):
    """Trinity-RFT's ``async_simple_mm_workflow``: :class:`SimpleMMWorkflow` (async here
    already); the name and class exist so configs and subclasses written for it run."""


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]
