"""Data pipelines: experiences before training, task sets before exploring."""

from trinity.buffer.pipelines.experience_pipeline import (
    ADVANTAGE_STEP_NAME,
    AdvantageCallable,
    ExperiencePipeline,
    ExperienceWriter,
)
from trinity.buffer.pipelines.task_pipeline import TaskPipeline, check_and_run_task_pipeline

__all__ = [
    "ADVANTAGE_STEP_NAME",
    "AdvantageCallable",
    "ExperiencePipeline",
    "ExperienceWriter",
    "TaskPipeline",
    "check_and_run_task_pipeline",
]
