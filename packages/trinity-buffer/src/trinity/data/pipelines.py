"""``trinity.data.pipelines``: the guide's older path of :mod:`trinity.buffer.pipelines`."""

from trinity.buffer.pipelines import ExperiencePipeline, TaskPipeline

__all__ = ["ExperiencePipeline", "TaskPipeline"]
