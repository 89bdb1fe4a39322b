"""The data sections: formats, rollout arguments, task sets and experience buffers (storages),
and the data processor's pipelines."""

from __future__ import annotations

from typing import Any, Optional

from pydantic import (
    AliasChoices,
    Field,
)

from ._base import (
    Float,
    Int,
    PromptTypeName,
    StorageTypeName,
    _Section,
)
from ._errors import MAX_CONTEXT_TOKENS

# --------------------------------------------------------------------------------------
# Data formats and rollout arguments
# --------------------------------------------------------------------------------------


class FormatConfig(_Section):
    """How raw records of a data set map onto prompts, responses and messages."""

    prompt_type: PromptTypeName = Field(
        "messages", description="'messages' (a list of chat messages) or 'plaintext'."
    )
    prompt_key: str = Field("prompt", description="Record key holding the user prompt.")
    response_key: str = Field(
        "response", description="Record key holding the reference / assistant response."
    )
    system_prompt_key: Optional[str] = Field(
        None, description="Record key holding a per-sample system prompt (wins over system_prompt)."
    )
    system_prompt: Optional[str] = Field(None, description="System prompt used for every sample.")
    messages_key: str = Field("message", description="Record key holding a list of messages.")
    tools_key: str = Field("tools", description="Record key holding tool schemas.")
    image_key: Optional[str] = Field(None, description="Record key holding images (multi-modal).")
    video_key: Optional[str] = Field(None, description="Record key holding videos (multi-modal).")
    reply_prefix: Optional[str] = Field(
        None, description="Text prepended to the assistant reply (e.g. a thinking tag)."
    )
    workflow_key: str = Field(
        "", description="Record key naming a per-sample workflow (overrides the default)."
    )
    reward_fn_key: str = Field(
        "", description="Record key naming a per-sample reward function (overrides the default)."
    )
    chosen_key: str = Field("chosen", description="Record key of the preferred response (DPO).")
    rejected_key: str = Field("rejected", description="Record key of the rejected response (DPO).")
    enable_concatenated_multi_turn: bool = Field(
        False, description="Train on every assistant turn of a multi-turn SFT sample."
    )
    chat_template: Optional[str] = Field(
        None, description="Chat template for SFT/DPO data; defaults to model.custom_chat_template."
    )
    enable_thinking: Optional[bool] = Field(
        None, description="Pass enable_thinking to the chat template (Qwen3-style models)."
    )


class GenerationConfig(_Section):
    """Sampling arguments for rollouts of one task set.

    ``temperature``, ``top_p``, ``top_k`` and ``logprobs`` not given explicitly are taken
    from the ``model`` section; ``max_tokens`` defaults to ``model.max_response_tokens``.
    """

    temperature: Float = Field(1.0, ge=0.0, description="Sampling temperature.")
    top_p: Float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling threshold.")
    top_k: Int = Field(-1, ge=-1, description="Top-k sampling; -1 disables it.")
    logprobs: Optional[Int] = Field(
        0, ge=0, description="Number of top logprobs to return per token (the engine returns +1)."
    )
    max_tokens: Optional[Int] = Field(
        None,
        ge=1,
        le=MAX_CONTEXT_TOKENS,
        description="Maximum response tokens; defaults to model.max_response_tokens.",
    )
    n: Int = Field(
        1,
        ge=1,
        description="Responses per request. Set by the explorer from repeat_times; do not set.",
    )

    # Trinity-RFT workflows call ``model.chat(messages, **self.rollout_args)`` (its
    # ``rollout_args`` is ``dataclasses.asdict(task.rollout_args)``): the read side of a
    # mapping (``keys``, ``[]``, ``get``, ``items``, ``in``) makes ``**task.rollout_args`` and
    # dict-style reads work, while the guides' ``rollout_args.n`` stays an attribute.
    def keys(self) -> list[str]:
        """The field names (what ``**rollout_args`` passes)."""
        return list(type(self).model_fields)

    def __getitem__(self, key: str) -> Any:
        if key not in type(self).model_fields:
            raise KeyError(key)
        return getattr(self, key)

    def __contains__(self, key: object) -> bool:
        return key in type(self).model_fields

    def get(self, key: str, default: Any = None) -> Any:
        """``rollout_args.get("temperature")``, as on Trinity-RFT's dict."""
        return self[key] if key in self else default

    def items(self) -> list[tuple[str, Any]]:
        return [(k, getattr(self, k)) for k in type(self).model_fields]

    def values(self) -> list[Any]:
        return [getattr(self, k) for k in type(self).model_fields]


class DataSelectorConfig(_Section):
    """Order in which samples are drawn from a data set (sequential, shuffle, ...)."""

    selector_type: Optional[str] = Field(
        "sequential", description="Registered selector name (resolved by trinity-buffer)."
    )
    seed: Int = Field(42, description="Seed for random selectors.")
    feature_keys: list[str] = Field(
        default_factory=list, description="Sample features used by difficulty-based selectors."
    )
    kwargs: dict[str, Any] = Field(default_factory=dict, description="Extra selector arguments.")


class ReplayBufferConfig(_Section):
    """Priority replay on top of a queue storage (re-use experiences with a priority)."""

    enable: bool = Field(False, description="Enable priority replay for this queue.")
    priority_fn: str = Field("linear_decay", description="Registered priority function name.")
    reuse_cooldown_time: Optional[Float] = Field(
        None, ge=0.0, description="Seconds before a used experience may be sampled again."
    )
    priority_fn_args: dict[str, Any] = Field(
        default_factory=lambda: {"decay": 2.0}, description="Arguments of the priority function."
    )


_STORAGE_ALIAS = AliasChoices("default_workflow_type", "default_workflow")


class StorageConfig(_Section):
    """One storage: a task set the explorer reads or an experience buffer the trainer reads.

    The same shape serves both roles (as in Trinity-RFT); ``TasksetConfig`` and
    ``ExperienceBufferConfig`` only differ in the default ``storage_type``.
    """

    name: str = Field("", description="Storage name; task sets default to 'taskset_<i>'.")
    storage_type: StorageTypeName = Field(
        "file",
        description=(
            "file (local/HF data set), queue, priority_queue, sql, or any storage whose reader "
            "or writer is registered in trinity.common.storage.READER / WRITER (e.g. by a "
            "plugin). The built-in names always validate; other names must be registered when "
            "the config is loaded."
        ),
    )
    path: Optional[str] = Field(
        None, description="Data set path / HF name (file), database URL (sql) or backing file."
    )
    split: str = Field("train", description="Data set split to read (file storage).")
    subset_name: Optional[str] = Field(None, description="Data set subset/config name (file).")
    format: FormatConfig = Field(
        default_factory=FormatConfig, description="How records map onto prompts and responses."
    )
    repeat_times: Optional[Int] = Field(
        None,
        ge=1,
        description=(
            "Rollouts per task. Train task sets always use algorithm.repeat_times; "
            "eval task sets default to 1."
        ),
    )
    index: Int = Field(0, ge=0, description="Read position; restored from checkpoints.")

    # rollout tasks
    default_workflow_type: Optional[str] = Field(
        None,
        validation_alias=_STORAGE_ALIAS,
        description="Workflow used for samples that name none (alias: default_workflow).",
    )
    default_reward_fn_type: Optional[str] = Field(
        None, description="Reward function used for samples that name none."
    )
    rollout_args: GenerationConfig = Field(
        default_factory=GenerationConfig, description="Sampling arguments for this task set."
    )
    workflow_args: dict[str, Any] = Field(
        default_factory=dict, description="Free-form arguments passed to every workflow."
    )
    reward_fn_args: dict[str, Any] = Field(
        default_factory=dict, description="Free-form arguments passed to the reward function."
    )
    data_selector: DataSelectorConfig = Field(
        default_factory=DataSelectorConfig, description="Sample selection strategy."
    )
    task_selector: Optional[DataSelectorConfig] = Field(
        None, description="Deprecated spelling of data_selector."
    )
    enable_progress_bar: bool = Field(False, description="Show a progress bar while reading.")

    # queue storage
    capacity: Int = Field(10000, ge=1, description="Maximum number of items held by a queue.")
    max_read_timeout: Float = Field(
        1800, gt=0, description="Seconds a reader waits for enough items before giving up."
    )
    replay_buffer: Optional[ReplayBufferConfig] = Field(
        default_factory=ReplayBufferConfig, description="Priority replay settings (queue)."
    )

    # sql storage
    max_retry_times: Int = Field(3, ge=0, description="Retries of a failed SQL operation.")
    max_retry_interval: Int = Field(1, ge=0, description="Seconds between SQL retries.")

    # set automatically (Trinity-RFT: "DO NOT SET")
    ray_namespace: Optional[str] = Field(None, description="Ray namespace; set automatically.")
    wrap_in_ray: bool = Field(True, description="Serve the storage from a Ray actor.")
    schema_type: Optional[str] = Field(
        None, description="Experience schema; set from the algorithm by the trainer."
    )
    total_epochs: Int = Field(1, ge=1, description="Set from buffer.total_epochs.")
    total_steps: Optional[Int] = Field(None, ge=1, description="Set from buffer.total_steps.")
    batch_size: Int = Field(0, ge=0, description="Set from buffer.(train_)batch_size.")
    min_batch_size: Int = Field(
        0,
        ge=0,
        description=(
            "Set from explorer.min_batch_fraction: at an explore step's end a queue read may "
            "return this many experiences instead of a full batch."
        ),
    )
    tokenizer_path: Optional[str] = Field(None, description="Set from model.model_path.")
    is_eval: bool = Field(False, description="Set for eval task sets.")

    def to_storage_config(self) -> StorageConfig:
        """Return a plain ``StorageConfig`` copy (readers and writers take this type)."""
        return StorageConfig.model_validate(self.model_dump())


class TasksetConfig(StorageConfig):
    """A task set read by the explorer (``buffer.explorer_input.taskset`` / ``eval_tasksets``)."""

    storage_type: StorageTypeName = Field("file", description="Task sets are usually files.")


class ExperienceBufferConfig(StorageConfig):
    """An experience buffer read by the trainer (``buffer.trainer_input.experience_buffer``)."""

    storage_type: StorageTypeName = Field(
        "queue", description="queue for online RFT; sql/file for offline data."
    )


# --------------------------------------------------------------------------------------
# Data processor
# --------------------------------------------------------------------------------------


class OperatorConfig(_Section):
    """One operator of a data pipeline: a registered name plus its arguments."""

    name: str = Field(..., description="Registered operator name, e.g. 'reward_filter'.")
    args: dict[str, Any] = Field(default_factory=dict, description="Operator arguments.")


class ExperiencePipelineConfig(_Section):
    """Operators applied to rollout experiences before the trainer sees them."""

    operators: list[OperatorConfig] = Field(
        default_factory=list, description="Operators, applied in order."
    )
    save_input: bool = Field(True, description="Save the raw explorer output before processing.")
    input_save_path: Optional[str] = Field(
        None, description="Where raw experiences are saved; defaults into buffer.cache_dir."
    )
    inputs: dict[str, ExperienceBufferConfig] = Field(
        default_factory=dict, description="Extra input buffers, by name (experimental)."
    )
    output: Optional[ExperienceBufferConfig] = Field(
        None, description="Output buffer; the trainer's experience buffer when unset."
    )


class TaskPipelineConfig(_Section):
    """Operators (Data-Juicer) that turn raw data sets into the task set."""

    operators: list[OperatorConfig] = Field(
        default_factory=list, description="Operators, applied in order."
    )
    num_process: Int = Field(4, ge=1, description="Worker processes.")
    config_path: Optional[str] = Field(
        None, description="A Data-Juicer config file; overrides operators and num_process."
    )
    inputs: list[str] = Field(default_factory=list, description="Raw input files.")
    output: Optional[TasksetConfig] = Field(
        None, description="Output task set; defaults to the first train task set."
    )
    target_fields: list[str] = Field(
        default_factory=list, description="Fields carried into the output task set."
    )
    priority_weights: dict[str, Float] = Field(
        default_factory=dict, description="Weights (difficulty, diversity, ...) for priorities."
    )
    top_k: Int = Field(
        -1, ge=-1, description="Keep the top-k samples after processing; -1 keeps all."
    )


class DataProcessorConfig(_Section):
    """Data pipelines for tasks (before exploring) and experiences (before training)."""

    task_pipeline: Optional[TaskPipelineConfig] = Field(
        None, description="Pre-processing of raw task data sets."
    )
    experience_pipeline: ExperiencePipelineConfig = Field(
        default_factory=ExperiencePipelineConfig, description="Processing of rollout experiences."
    )
