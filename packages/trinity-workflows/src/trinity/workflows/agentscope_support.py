"""What the AgentScope workflows share: importing agentscope, AgentScope chat models that talk to
Trinity's rollout model, and the checks a run needs before it starts.

An AgentScope agent calls its model through the OpenAI API. The adapters hand it an
``agentscope.model.OpenAIChatModel`` whose client is the rollout model's own
(:meth:`~trinity.common.models.model.ModelWrapper.get_openai_async_client`): with
``explorer.rollout_model.enable_history`` on, every completion the agent asks for is recorded
as an Experience (the engine's token ids and logprobs), and the workflow collects them with
``extract_experience_from_history()`` after the agent finished. The agent code is AgentScope's,
unchanged; only the transport is Trinity's.

agentscope is an optional dependency (``pip install 'trinity-workflows[agentscope]'``): it is
imported when a workflow is built, never when ``trinity.workflows`` is, and its absence fails
the build with that command.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any, Optional

from trinity.common.workflows import Task, Workflow
from trinity.common.workflows.step_wise_workflow import HistoryDisabledError
from trinity.workflows._agentscope_mcp import bridge_mcp_for_agentscope
from trinity.workflows.envs.base import import_env_module

__all__ = [
    "AGENTSCOPE_INSTALL",
    "DEFAULT_MAX_TOKENS",
    "auxiliary_chat_models",
    "call_with_accepted",
    "import_agentscope",
    "openai_chat_model",
    "require_history",
    "resolve_callable",
    "rollout_generate_kwargs",
]

AGENTSCOPE_INSTALL = "Install it with: pip install 'trinity-workflows[agentscope]'"

#: Trinity-RFT 0.6's response budget when neither the task nor the model sets max_tokens
DEFAULT_MAX_TOKENS = 4096


def import_agentscope(workflow: str, module: str = "agentscope") -> ModuleType:
    """Import ``module`` of agentscope, or fail with the install command.

    Raises:
        EnvironmentNotInstalledError: (an ``ImportError``) agentscope, or the part of it the
            workflow needs (``agentscope.tuner`` came with 1.0.12), cannot be imported.
    """
    bridge_mcp_for_agentscope()
    return import_env_module(module, workflow, AGENTSCOPE_INSTALL)


def require_history(workflow: Workflow) -> None:
    """Refuse, at construction, a rollout model that does not record its history.

    The AgentScope workflows build their Experiences from the model's history; without it the
    agent would run a whole episode before ``extract_experience_from_history`` failed. A
    duck-typed model that has no ``enable_history`` attribute is let through.
    """
    if getattr(workflow.model, "enable_history", True) is False:
        raise HistoryDisabledError(
            f"{type(workflow).__name__} trains on the completions the agent requested, read "
            "from the model's history, which is off: set "
            "explorer.rollout_model.enable_history: true (and enable_openai_api: true)"
        )


def _model_max_tokens(model: Any) -> Optional[int]:
    kwargs = getattr(model, "generate_kwargs", None)
    value = kwargs.get("max_tokens") if isinstance(kwargs, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def rollout_generate_kwargs(
    task: Task, model: Any, *, logprobs: bool = True, top_p: bool = True
) -> dict[str, Any]:
    """The OpenAI request parameters of the agent's calls, from the task's ``rollout_args``.

    ``max_tokens`` falls back to the model's default response length, then to 4096 (Trinity-RFT
    0.6's constant). ``logprobs`` / ``top_p`` are left out for the ReAct workflows, which send
    only ``temperature`` and ``max_tokens`` as 0.6 does (the history records logprobs anyway).
    """
    args = task.rollout_args
    kwargs: dict[str, Any] = {
        "temperature": args.temperature,
        "max_tokens": args.max_tokens or _model_max_tokens(model) or DEFAULT_MAX_TOKENS,
    }
    if top_p:
        kwargs["top_p"] = args.top_p
    if logprobs:
        kwargs["logprobs"] = True
        if args.logprobs is not None:
            kwargs["top_logprobs"] = args.logprobs
    return kwargs


def openai_chat_model(client: Any, generate_kwargs: Mapping[str, Any], workflow: str) -> Any:
    """An ``agentscope.model.OpenAIChatModel`` sending its requests through ``client``.

    ``client`` is a model's OpenAI client (``client.model_path`` names the served model);
    streaming is off, since the history records only whole completions.
    """
    model_mod = import_agentscope(workflow, "agentscope.model")
    chat_model = model_mod.OpenAIChatModel(
        model_name=client.model_path,
        api_key="EMPTY",
        stream=False,
        generate_kwargs=dict(generate_kwargs),
    )
    chat_model.client = client  # the rollout model's client, recorded into its history
    return chat_model


def auxiliary_chat_models(workflow: Workflow, name: str) -> dict[str, Any]:
    """The workflow's auxiliary models as AgentScope chat models, by model name.

    Keys are the ``explorer.auxiliary_models[*].name`` of each model (its display name);
    auxiliary models given as OpenAI clients (the older API) are keyed by ``model_path``.
    """
    models: dict[str, Any] = {}
    for wrapper in workflow.auxiliary_model_wrappers or []:
        client = wrapper.get_openai_async_client()
        config_name = getattr(getattr(wrapper, "config", None), "name", None)
        key = config_name or wrapper.model_name
        models[key] = openai_chat_model(client, wrapper.generate_kwargs, name)
    if workflow.auxiliary_model_wrappers is None:
        for client in workflow.auxiliary_models or []:
            if hasattr(client, "model_path") and hasattr(client, "chat"):
                models[client.model_path] = openai_chat_model(client, {}, name)
    return models


def resolve_callable(value: Any, key: str, workflow: str) -> Optional[Callable[..., Any]]:
    """``workflow_args[key]``: a callable, or a ``"package.module:function"`` string naming one.

    The string form lets a YAML config name the function (Trinity-RFT 0.6 takes only the
    function object, which AgentScope's ``tune()`` passes in code).
    """
    if value is None or callable(value):
        return value
    if not isinstance(value, str) or not value.strip():
        raise TypeError(
            f"{workflow}: workflow_args.{key} must be an async function or a "
            f"'module:function' string, got {type(value).__name__}"
        )
    module_name, sep, attr = value.strip().partition(":")
    if not sep:
        module_name, _, attr = module_name.rpartition(".")
    if not module_name or not attr:
        raise ValueError(f"{workflow}: workflow_args.{key}={value!r} is not 'module:function'")
    target: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"{workflow}: workflow_args.{key}={value!r} is not callable")
    return target


def call_with_accepted(func: Callable[..., Any], required: dict, optional: dict) -> Any:
    """``func(**required, **the optional ones its signature names)``.

    AgentScope's workflow and judge functions take ``auxiliary_models`` and ``logger`` only
    when they declare them.
    """
    params = inspect.signature(func).parameters
    kwargs = dict(required)
    kwargs.update({k: v for k, v in optional.items() if k in params})
    return func(**kwargs)
