"""The config a run actually executes: the user's config plus values derived for this run.

A config is a value: nothing here writes into the caller's object (or into any pydantic
model's ``__dict__``). A derived value goes on a copy (``model_copy``), set through the
config's one API for derived values (:func:`trinity.common.config.set_derived`: not marked as
user-set), so a config saved from the caller's object still says what the user wrote (compat
D8), and the run gets the copy.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

from trinity.common.config import Config, set_derived

_M = TypeVar("_M", bound=BaseModel)

__all__ = ["run_config_for", "with_queue_in_process"]


def with_queue_in_process(config: Config) -> Config:
    """``config`` with the trainer's input queue (or SQL table) in this process, where nothing
    else needs it.

    In runs that explore and train, the explorer's pipeline writes the queue and the trainer
    reads it, both in this process (the driver): the same queue class in-process, with no Ray
    actor to encode every batch for, send it to and decode it from (~17 ms of the CPU
    quickstart's ~0.2 s step). A ``sql`` experience buffer is likewise opened by the driver
    itself rather than through its ``sql-<name>`` actor (compat D9). It applies to a ``queue``
    / ``priority_queue`` / ``sql`` storage whose ``wrap_in_ray`` the config does not set and
    that the pipeline writes (no ``experience_pipeline.output`` of its own).

    Only the path down to the queue is copied (a deep copy would fail on any object in the
    config that ``copy.deepcopy`` refuses, e.g. a lock in a workflow's arguments); every
    reader of the queue's config goes through this path.
    """
    exp = config.buffer.trainer_input.experience_buffer
    if (
        exp is None
        or str(exp.storage_type).lower() not in ("queue", "priority_queue", "sql")
        or "wrap_in_ray" in exp.model_fields_set
        or config.data_processor.experience_pipeline.output is not None
    ):
        return config
    exp = _derived(exp, wrap_in_ray=False)
    trainer_input = _derived(config.buffer.trainer_input, experience_buffer=exp)
    buffer = _derived(config.buffer, trainer_input=trainer_input)
    return _derived(config, buffer=buffer)


def _derived(model: _M, **values: Any) -> _M:
    """A copy of ``model`` holding ``values`` as derived values (the config's one API for
    them, :func:`trinity.common.config.set_derived`: not marked as what the user wrote)."""
    copy = model.model_copy()
    for name, value in values.items():
        set_derived(copy, name, value)
    return copy


def run_config_for(config: Config) -> Config:
    """The config the run executes (see the module docstring): ``config`` itself, or a copy
    with the values derived for this run."""
    from trinity.common.config import run_mode_spec

    if run_mode_spec(config.mode).explores_and_trains:
        return with_queue_in_process(config)
    return config
