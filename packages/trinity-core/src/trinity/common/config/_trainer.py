"""The ``trainer`` section. Its own module so that ``_sections.py`` stays under its size budget;
``from ._sections import TrainerConfig`` keeps working (re-exported there).

``ppo_max_token_len_per_gpu`` is the key older Trinity-RFT examples write under ``trainer:``
(the verl actor's name for the budget). It is read as ``max_token_len_per_gpu`` -- the value
becomes the user's own ``max_token_len_per_gpu``, as if written under that name -- and the rule
in :mod:`._compat` warns that the key is deprecated, or refuses it where both keys are given
with different values.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

from pydantic import AfterValidator, Field, model_validator

from ._base import (
    TRAINER_NAME,
    Float,
    Int,
    SaveHFCheckpoint,
    SaveStrategy,
    TrainerStrategy,
    _Section,
)
from ._trainer_view import TrainerConfigDict, as_trainer_config

#: Trinity-RFT's older name of ``trainer.max_token_len_per_gpu``
DEPRECATED_MAX_TOKEN_KEY = "ppo_max_token_len_per_gpu"


class MegatronParallelConfig(_Section):
    """Megatron-Core parallelism (trainer_strategy: megatron)."""

    tensor_model_parallel_size: Int = Field(1, ge=1)
    pipeline_model_parallel_size: Int = Field(1, ge=1)
    virtual_pipeline_model_parallel_size: Optional[Int] = Field(None, ge=1)
    expert_model_parallel_size: Int = Field(1, ge=1)
    expert_tensor_parallel_size: Optional[Int] = Field(None, ge=1)
    context_parallel_size: Int = Field(1, ge=1)
    sequence_parallel: bool = True


class TrainerConfig(_Section):
    """The trainer, engine-independent part; engine specifics go to ``trainer_config``."""

    name: str = Field(TRAINER_NAME, description="Ray actor name of the trainer.")
    trainer_type: str = Field(
        "verl", description="Training backend: verl (Trinity-RFT's tinker is not supported yet)."
    )
    trainer_strategy: TrainerStrategy = Field(
        "fsdp2", description="fsdp or fsdp2 (Trinity-RFT's megatron is not supported yet)."
    )
    save_interval: Int = Field(
        0, ge=0, description="Save a checkpoint every N steps; 0 = end only."
    )
    enable_preview: bool = Field(True, description="Log rollout previews to the monitor.")
    total_steps: Optional[Int] = Field(None, ge=1, description="Stop training after N steps.")
    save_hf_checkpoint: SaveHFCheckpoint = Field(
        "last", description="Save HF-format weights: last, always or never."
    )
    grad_clip: Float = Field(1.0, gt=0.0, description="Gradient clipping norm.")
    use_dynamic_bsz: bool = Field(True, description="Pack micro batches by token count.")
    use_remove_padding: bool = Field(True, description="Remove padding in the forward pass.")
    balance_batch: bool = Field(True, description="Balance tokens across data-parallel ranks.")
    critic_warmup: Int = Field(0, ge=0, description="Steps training only the critic.")
    max_token_len_per_gpu: Optional[Int] = Field(
        None, ge=1, description="Tokens per GPU micro batch; defaults to 2 * max_model_len / SP."
    )
    ppo_max_token_len_per_gpu: Optional[Int] = Field(
        None,
        ge=1,
        description="Deprecated (Trinity-RFT's older key); read as max_token_len_per_gpu.",
    )
    ulysses_sequence_parallel_size: Int = Field(1, ge=1, description="Sequence parallel size.")
    fix_actor_microbatch_loss_scale: bool = Field(False, description="Experimental.")
    param_offload: bool = Field(False, description="Offload parameters to CPU.")
    optimizer_offload: bool = Field(False, description="Offload optimizer states to CPU.")
    grad_offload: bool = Field(False, description="Offload gradients to CPU.")
    offload_policy: bool = Field(False, description="FSDP2 CPU offload policy.")
    save_strategy: SaveStrategy = Field(
        "unrestricted", description="How concurrent checkpoint saves are serialised."
    )
    max_checkpoints_to_keep: Int = Field(0, ge=0, description="0 keeps all checkpoints.")
    megatron: MegatronParallelConfig = Field(
        default_factory=MegatronParallelConfig, description="Megatron parallelism."
    )
    trust_remote_code: bool = Field(False, description="Copied from the model section.")
    trainer_config: Optional[Annotated[dict[str, Any], AfterValidator(as_trainer_config)]] = Field(
        default_factory=TrainerConfigDict,
        description="Backend config passed through verbatim (e.g. verl); after check_and_update "
        "its attributes read the settings the trainer derives (TrainerConfigDict).",
    )
    trainer_config_path: str = Field("", description="Deprecated; use trainer_config.")

    def __setattr__(self, name: str, value: Any) -> None:
        # the sections do not re-validate assignments; a dict assigned here still gets the
        # field's type (its derived view unbound until the next check_and_update)
        if name == "trainer_config":
            value = as_trainer_config(value)
        super().__setattr__(name, value)

    @model_validator(mode="before")
    @classmethod
    def _read_deprecated_max_token_key(cls, data: Any) -> Any:
        """``ppo_max_token_len_per_gpu`` alone is the user's ``max_token_len_per_gpu``: copied
        in the input, so the trainer treats the budget as given, not derived (a derived one may
        be raised to fit the model). Both keys are kept for the rule that warns or refuses."""
        if (
            isinstance(data, dict)
            and data.get(DEPRECATED_MAX_TOKEN_KEY) is not None
            and data.get("max_token_len_per_gpu") is None
        ):
            data = {**data, "max_token_len_per_gpu": data[DEPRECATED_MAX_TOKEN_KEY]}
        return data
