"""Run an AgentScope agent function as a Trinity workflow (Trinity-RFT 0.6's adapters).

AgentScope's tuner describes an RL task as an async *workflow function* that runs an agent with
the chat model it is given, plus an optional *judge function* that scores what it returned. The
adapters run those functions with a chat model bound to the rollout model (see
:mod:`trinity.workflows.agentscope_support`), then turn the completions the agent requested,
recorded in the model's history, into Experiences that all carry the reward.

* ``agentscope_workflow_adapter_v1`` (:class:`AgentScopeWorkflowAdapterV1`, agentscope >= 1.0.12):
  ``workflow_func(task, model[, auxiliary_models][, logger]) -> WorkflowOutput`` and optional
  ``judge_func(task, response[, auxiliary_models][, logger]) -> JudgeOutput``;
* ``agentscope_workflow_adapter`` (:class:`AgentScopeWorkflowAdapter`, deprecated in 0.6):
  ``workflow_func(task, model) -> float`` with an ``agentscope.model.TrinityChatModel``.

Both read ``workflow_args.workflow_func`` (and ``judge_func``): the function itself, as
AgentScope's ``tune()`` passes it, or a ``"package.module:function"`` string for YAML configs.
The rollout model must record its history (``explorer.rollout_model.enable_history: true`` and
``enable_openai_api: true``); the workflows refuse to start otherwise.
"""

from __future__ import annotations

import inspect
import numbers
import warnings
from typing import Any, Optional

from trinity.common.experience import Experience
from trinity.common.workflows import Task, Workflow
from trinity.workflows.agentscope_support import (
    auxiliary_chat_models,
    call_with_accepted,
    import_agentscope,
    openai_chat_model,
    require_history,
    resolve_callable,
    rollout_generate_kwargs,
)

__all__ = ["AgentScopeWorkflowAdapter", "AgentScopeWorkflowAdapterV1"]


async def _result(value: Any) -> Any:
    """Await ``value`` if it is awaitable: a plain (sync) function works as well."""
    return await value if inspect.isawaitable(value) else value


def _reward(value: Any, source: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{source} must be a number, got {type(value).__name__}: {value!r}")
    return float(value)


async def _call_expecting(
    func: Any, given: dict[str, Any], optional: dict[str, Any], expected: type, what: str
) -> Any:
    """``func`` called with the arguments it accepts (awaited if it is async); its result must
    be an ``agentscope.tuner`` ``expected`` (``WorkflowOutput`` / ``JudgeOutput``)."""
    result = await _result(call_with_accepted(func, given, optional))
    if not isinstance(result, expected):
        raise ValueError(
            f"{what} must return an agentscope.tuner.{expected.__name__}, got "
            f"{type(result).__name__}"
        )
    return result


class _AdapterBase(Workflow):
    """The workflow function, the history check and the rewarding shared by both adapters."""

    is_async: bool = True

    def __init__(
        self,
        *,
        task: Task,
        model: Any,
        auxiliary_models: Optional[list[Any]] = None,
    ) -> None:
        super().__init__(task=task, model=model, auxiliary_models=auxiliary_models)
        name = type(self).__name__
        args = task.workflow_args or {}
        self.workflow_func = resolve_callable(args.get("workflow_func"), "workflow_func", name)
        if self.workflow_func is None:
            raise ValueError(
                f"{name} needs workflow_args.workflow_func: the async agent function to run "
                "(or a 'module:function' string naming it)"
            )
        require_history(self)

    def construct_experiences(
        self, reward: float, metrics: Optional[dict[str, float]] = None
    ) -> list[Experience]:
        """The completions recorded during this run, each rewarded with ``reward``.

        ``metrics`` go to the last Experience only (one set per run, as in Trinity-RFT 0.6).
        """
        exps = self.model.extract_experience_from_history()
        for exp in exps:
            exp.reward = reward
        if exps and metrics:
            exps[-1].metrics = {**(exps[-1].metrics or {}), **metrics}
        return exps


class AgentScopeWorkflowAdapter(_AdapterBase):
    """``workflow_func(task: dict, model: TrinityChatModel) -> float`` as a workflow.

    Trinity-RFT 0.6 keeps it for agentscope 1.0.7 - 1.0.11 and marks it deprecated: new code
    uses :class:`AgentScopeWorkflowAdapterV1`, whose functions return ``WorkflowOutput``.
    """

    _is_deprecated = True

    def __init__(
        self,
        *,
        task: Task,
        model: Any,
        auxiliary_models: Optional[list[Any]] = None,
    ) -> None:
        model_mod = import_agentscope(type(self).__name__, "agentscope.model")
        super().__init__(task=task, model=model, auxiliary_models=auxiliary_models)
        with warnings.catch_warnings():
            # agentscope deprecates TrinityChatModel too; this adapter exists for old code
            warnings.simplefilter("ignore", DeprecationWarning)
            self.chat_model = model_mod.TrinityChatModel(
                model.get_openai_async_client(),
                generate_kwargs=rollout_generate_kwargs(task, model),
            )

    async def run_async(self) -> list[Experience]:
        """Run the agent function; its number is every recorded completion's reward."""
        value = await _result(self.workflow_func(self.task.raw_task, self.chat_model))
        return self.construct_experiences(_reward(value, "workflow_func's return value"))


class AgentScopeWorkflowAdapterV1(_AdapterBase):
    """AgentScope tuner functions (``WorkflowOutput`` / ``JudgeOutput``) as a workflow.

    The reward is the judge's when ``workflow_args.judge_func`` is set (it scores the
    workflow's ``response``), else the workflow output's own ``reward``. Both outputs'
    ``metrics`` are merged onto the run's last Experience. ``auxiliary_models`` reach the
    functions that declare that parameter as AgentScope chat models keyed by model name.
    """

    def __init__(
        self,
        *,
        task: Task,
        model: Any,
        auxiliary_models: Optional[list[Any]] = None,
    ) -> None:
        name = type(self).__name__
        tuner = import_agentscope(name, "agentscope.tuner")
        super().__init__(task=task, model=model, auxiliary_models=auxiliary_models)
        self._workflow_output = tuner.WorkflowOutput
        self._judge_output = tuner.JudgeOutput
        self.judge_func = resolve_callable(
            (task.workflow_args or {}).get("judge_func"), "judge_func", name
        )
        self._openai_client = model.get_openai_async_client()
        self.chat_model = openai_chat_model(
            self._openai_client, rollout_generate_kwargs(task, model), name
        )
        self.auxiliary_chat_models = auxiliary_chat_models(self, name)

    async def run_async(self) -> list[Experience]:
        """Run the workflow function, then the judge (if any); reward the recorded calls."""
        optional = {"auxiliary_models": self.auxiliary_chat_models, "logger": self.logger}
        output = await _call_expecting(
            self.workflow_func,
            {"task": self.task.raw_task, "model": self.chat_model},
            optional,
            self._workflow_output,
            "workflow_func",
        )
        metrics = dict(output.metrics or {})
        if self.judge_func is not None:
            judged = await _call_expecting(
                self.judge_func,
                {"task": self.task.raw_task, "response": output.response},
                optional,
                self._judge_output,
                "judge_func",
            )
            reward = _reward(judged.reward, "JudgeOutput.reward")
            metrics.update(judged.metrics or {})
        elif output.reward is None:
            raise ValueError(
                "WorkflowOutput.reward is None and there is no workflow_args.judge_func: one "
                "of them must give the reward"
            )
        else:
            reward = _reward(output.reward, "WorkflowOutput.reward")
        return self.construct_experiences(reward, metrics)
