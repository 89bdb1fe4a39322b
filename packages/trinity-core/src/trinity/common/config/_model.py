"""The ``model`` section and the inference-model settings (``explorer.rollout_model``,
``explorer.auxiliary_models[]``), with LoRA, Tinker and external-model settings. Its own module
so that ``_sections.py`` stays under its size budget; ``from ._sections import X`` keeps working
for each (re-exported there)."""

from __future__ import annotations

from typing import Annotated, Any, Optional

from pydantic import (
    AfterValidator,
    Field,
)

from ._base import (  # noqa: F401 - re-exported (see __all__)
    _NO_GPU_ENGINES,
    _SFT_LIKE,
    DEFAULT_EXPERIENCE_BUFFER_NAME,
    EXPLORER_NAME,
    LOG_DIR_ENV_VAR,
    LOG_LEVEL_ENV_VAR,
    LOG_NODE_IP_ENV_VAR,
    PLUGIN_DIRS_ENV_VAR,
    ROLLOUT_WEIGHT_SYNC_GROUP_NAME,
    TRAINER_NAME,
    ConcurrentMode,
    DType,
    EngineType,
    Float,
    Int,
    LogLevel,
    LossAggMode,
    LRSchedulerType,
    MonitorType,
    PromptTypeName,
    RunMode,
    SaveHFCheckpoint,
    SaveStrategy,
    StorageTypeName,
    SyncMethodName,
    SyncStyleName,
    TrainerStrategy,
    _normalized,
    _Section,
    _stringify_values,
)
from ._cluster import ClusterConfig  # noqa: F401 - re-exported (see __all__)
from ._errors import MAX_CONTEXT_TOKENS
from ._storage import (  # noqa: F401 - re-exported (see __all__)
    _STORAGE_ALIAS,
    DataProcessorConfig,
    DataSelectorConfig,
    ExperienceBufferConfig,
    ExperiencePipelineConfig,
    FormatConfig,
    GenerationConfig,
    OperatorConfig,
    ReplayBufferConfig,
    StorageConfig,
    TaskPipelineConfig,
    TasksetConfig,
)
from ._trainer import (  # noqa: F401 - re-exported (see __all__)
    MegatronParallelConfig,
    TrainerConfig,
)

# --------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------


class LoRAConfig(_Section):
    """A LoRA adapter trained instead of the full model (one per run): the trainer freezes the
    base weights and trains the adapter; the rollout engines serve base + adapter and get the
    adapter alone on sync (``explorer.rollout_model.enable_lora``)."""

    name: Optional[str] = Field(
        None, description="The adapter's name in the engines (vLLM: '<name>-<N>' per sync)."
    )
    path: Optional[str] = Field(
        None, description="A PEFT adapter directory to continue; a new adapter if unset."
    )
    base_model_name: Optional[str] = Field(
        None, description="Base model name in the engines: not supported yet."
    )
    lora_rank: Int = Field(32, ge=1, description="LoRA rank r.")
    lora_alpha: Int = Field(32, ge=1, description="LoRA alpha (the update is scaled by alpha/r).")
    lora_dtype: str = Field("auto", description="Adapter dtype: auto or float32 (the trainer's).")
    target_modules: str = Field(
        "all-linear", description="Modules that get adapters: all-linear or a full-match regex."
    )
    exclude_modules: Optional[str] = Field(
        None, description="Modules left without adapters (a full-match regex)."
    )
    is_dummy: bool = Field(False, description="Trinity-RFT's mark of its blank adapter; false.")


def _tinker_not_supported(value: bool) -> bool:
    """A config may carry Trinity-RFT's ``tinker`` section, but only switched off: nothing here
    talks to the Tinker service, so ``enable: true`` would train locally without saying so."""
    if value:
        raise ValueError(
            "Tinker (Trinity-RFT's remote training and sampling service) is not supported yet; "
            "allowed: false (or leave model.tinker out)"
        )
    return value


class TinkerConfig(_Section):
    """Trinity-RFT's Tinker service settings: accepted switched off only (not supported yet)."""

    enable: Annotated[bool, AfterValidator(_tinker_not_supported)] = Field(
        False, description="Train through Tinker: not supported yet, must stay false."
    )
    rank: Int = Field(16, ge=1, description="LoRA rank used by Tinker.")
    seed: Optional[Int] = Field(None, description="Seed for Tinker.")
    train_mlp: bool = Field(True, description="Train MLP layers.")
    train_attn: bool = Field(True, description="Train attention layers.")
    train_unembed: bool = Field(True, description="Train the unembedding layer.")
    base_url: Optional[str] = Field(None, description="Tinker service URL.")


class ExternalModelConfig(_Section):
    """An OpenAI-compatible API used as the rollout model (bench mode only)."""

    enable: bool = Field(False, description="Benchmark an external API instead of a local model.")
    base_url_env: str = Field("OPENAI_BASE_URL", description="Env var holding the API base URL.")
    api_key_env: str = Field("OPENAI_API_KEY", description="Env var holding the API key.")
    model_name: Optional[str] = Field(None, description="Model name sent to the API.")


class ModelConfig(_Section):
    """The policy model being trained and the defaults its rollout engines inherit."""

    model_path: str = Field("", description="HF model id or local path of the policy model.")
    trust_remote_code: bool = Field(False, description="Allow custom model code from the hub.")
    critic_model_path: str = Field("", description="Critic model; defaults to model_path.")
    custom_chat_template: Optional[str] = Field(
        None, description="Chat template overriding the tokenizer's."
    )
    chat_template_path: Optional[str] = Field(
        None, description="File with a chat template; read when custom_chat_template is unset."
    )
    temperature: Float = Field(1.0, ge=0.0, description="Default sampling temperature.")
    top_p: Float = Field(1.0, gt=0.0, le=1.0, description="Default nucleus sampling threshold.")
    top_k: Int = Field(-1, ge=-1, description="Default top-k; -1 disables it.")
    logprobs: Int = Field(0, ge=0, description="Default number of top logprobs per token.")
    max_model_len: Optional[Int] = Field(
        None,
        ge=1,
        le=MAX_CONTEXT_TOKENS,
        description="Context length; defaults to max_prompt_tokens + max_response_tokens.",
    )
    max_prompt_tokens: Optional[Int] = Field(
        None, ge=1, le=MAX_CONTEXT_TOKENS, description="Maximum prompt tokens."
    )
    max_response_tokens: Optional[Int] = Field(
        None, ge=1, le=MAX_CONTEXT_TOKENS, description="Maximum response tokens."
    )
    min_response_tokens: Int = Field(0, ge=0, description="Minimum response tokens.")
    enable_prompt_truncation: bool = Field(
        True, description="Truncate prompts to max_prompt_tokens (not in OpenAI API mode)."
    )
    repetition_penalty: Float = Field(1.0, gt=0.0, description="Repetition penalty.")
    enable_thinking: Optional[bool] = Field(
        None, description="Thinking mode for Qwen3-style models."
    )
    lora_configs: Optional[list[LoRAConfig]] = Field(
        None, description="The LoRA adapter to train (one entry); unset: full fine-tuning."
    )
    fully_sharded_loras: bool = Field(False, description="Shard LoRA weights in the engine.")
    max_cpu_loras: Optional[Int] = Field(None, ge=1, description="LoRA adapters cached on CPU.")
    rope_scaling: Optional[dict[str, Any]] = Field(None, description="RoPE scaling override.")
    rope_theta: Optional[Float] = Field(None, gt=0.0, description="RoPE theta override.")
    tinker: TinkerConfig = Field(default_factory=TinkerConfig, description="Tinker service.")
    external_model: ExternalModelConfig = Field(
        default_factory=ExternalModelConfig, description="External OpenAI-compatible model."
    )


class InferenceModelConfig(_Section):
    """One kind of inference engine: the rollout model or an auxiliary model."""

    model_path: Optional[str] = Field(
        None, description="Model to serve; the rollout model uses model.model_path."
    )
    name: Optional[str] = Field(None, description="Name workflows use to find this model.")
    trust_remote_code: Optional[bool] = Field(None, description="Defaults to the model section.")
    engine_type: EngineType = Field(
        "vllm",
        description=(
            "vllm, transformers (no vLLM needed), external, or any engine registered in "
            "trinity.common.engines.ENGINES (e.g. by a plugin). The built-in names (also "
            "Trinity-RFT's sglang and tinker, which this release cannot run) always validate; "
            "other names must be registered when the config is loaded."
        ),
    )
    engine_num: Int = Field(1, ge=1, description="Number of engine replicas.")
    tensor_parallel_size: Int = Field(1, ge=0, description="Tensor parallel size per engine.")
    data_parallel_size: Int = Field(1, ge=0, description="Data parallel size per engine.")
    pipeline_parallel_size: Int = Field(1, ge=0, description="Pipeline parallel size per engine.")
    enable_expert_parallel: bool = Field(False, description="Expert parallelism for MoE models.")
    gpu_per_engine: Int = Field(0, ge=0, description="Computed as TP * DP * PP; do not set.")
    extra_engine_args: dict[str, Any] = Field(
        default_factory=dict, description="Extra engine-specific initialisation arguments."
    )
    use_v1: bool = Field(True, description="Use the vLLM v1 engine.")
    enforce_eager: bool = Field(False, description="Disable CUDA graphs.")
    enable_prefix_caching: bool = Field(True, description="Enable prefix caching.")
    enable_chunked_prefill: bool = Field(True, description="Enable chunked prefill.")
    gpu_memory_utilization: Float = Field(
        0.9, gt=0.0, le=1.0, description="Fraction of GPU memory the engine may use."
    )
    dtype: DType = Field("bfloat16", description="Weights / activations dtype.")
    seed: Int = Field(42, description="Sampling seed.")
    temperature: Optional[Float] = Field(None, ge=0.0, description="Defaults to model.temperature.")
    top_p: Optional[Float] = Field(None, gt=0.0, le=1.0, description="Defaults to model.top_p.")
    top_k: Optional[Int] = Field(None, ge=-1, description="Defaults to model.top_k.")
    logprobs: Optional[Int] = Field(None, ge=0, description="Defaults to model.logprobs.")
    max_model_len: Optional[Int] = Field(
        None, ge=1, le=MAX_CONTEXT_TOKENS, description="Defaults to model.max_model_len."
    )
    max_prompt_tokens: Optional[Int] = Field(
        None, ge=1, le=MAX_CONTEXT_TOKENS, description="Defaults to model.max_prompt_tokens."
    )
    max_response_tokens: Optional[Int] = Field(
        None, ge=1, le=MAX_CONTEXT_TOKENS, description="Defaults to model.max_response_tokens."
    )
    min_response_tokens: Optional[Int] = Field(
        None, ge=0, description="Defaults to model.min_response_tokens."
    )
    enable_prompt_truncation: Optional[bool] = Field(
        None, description="Defaults to model.enable_prompt_truncation."
    )
    repetition_penalty: Optional[Float] = Field(
        None, gt=0.0, description="Defaults to model.repetition_penalty."
    )
    ignore_eos: bool = Field(False, description="Ignore EOS (long-generation tests only).")
    enable_multimodal: bool = Field(False, description="Serve a multi-modal model.")
    chat_template: Optional[str] = Field(
        None, description="Chat template; defaults to model.custom_chat_template."
    )
    enable_thinking: Optional[bool] = Field(None, description="Defaults to model.enable_thinking.")
    enable_history: bool = Field(
        False, description="Record every call so workflows can turn it into experiences."
    )
    enable_openai_api: bool = Field(False, description="Expose an OpenAI-compatible server.")
    enable_log_requests: bool = Field(False, description="Log requests in the API server.")
    base_port: Optional[Int] = Field(None, ge=1, le=65535, description="First API server port.")
    api_key: str = Field("EMPTY", description="API key of the OpenAI-compatible server.")
    enable_auto_tool_choice: bool = Field(False, description="Automatic tool choice (OpenAI API).")
    tool_call_parser: Optional[str] = Field(None, description="Tool-call parser name.")
    reasoning_parser: Optional[str] = Field(None, description="Reasoning parser name.")
    external_model_config: ExternalModelConfig = Field(
        default_factory=ExternalModelConfig, description="Copied from model.external_model."
    )
    weight_sync_buffer_size: Int = Field(
        1024, ge=1, description="Buffer (MB) for batched NCCL weight sync."
    )
    rope_scaling: Optional[dict[str, Any]] = Field(None, description="Defaults to the model's.")
    rope_theta: Optional[Float] = Field(None, gt=0.0, description="Defaults to the model's.")
    # set automatically
    nnodes: Int = Field(1, ge=1, description="Nodes spanned by one engine; computed.")
    node_rank: Int = Field(0, ge=0, description="Set by the launcher.")
    enable_return_routed_experts: bool = Field(False, description="From algorithm router replay.")
    bundle_indices: str = Field("", description="Set by the launcher.")
    engine_id: Int = Field(0, ge=0, description="Set by the launcher.")
    ray_namespace: Optional[str] = Field(None, description="Set from Config.ray_namespace.")
    ray_actor_name: Optional[str] = Field(None, description="Set by the launcher.")
    sync_method: Optional[SyncMethodName] = Field(None, description="Set from the synchronizer.")
    checkpoint_job_dir: Optional[str] = Field(None, description="Set from the run.")
    cuda_visible_devices: Optional[str] = Field(None, description="Set by the launcher.")
    enable_lora: bool = Field(
        False,
        description=(
            "Serve base + the run's LoRA adapter (model.lora_configs; on by default then, where "
            "the engine can) and take adapter-only weight syncs; false: merged weights."
        ),
    )
    enable_runtime_lora_updating: bool = Field(False, description="Set by the launcher.")
    lora_modules: Optional[list[dict[str, Any]]] = Field(None, description="Set by the launcher.")
    lora_kwargs: dict[str, Any] = Field(default_factory=dict, description="Set by the launcher.")
