"""Sample strategies (``SAMPLE_STRATEGY``): how the trainer draws each batch from its buffers."""

from trinity.algorithm.sample_strategy.sample_strategy import (
    DEFAULT_EXPERIENCE_BUFFER_NAME,
    EXPERT_CUSTOM_FIELDS,
    SAMPLE_STRATEGY,
    DefaultSampleStrategy,
    MixSampleStrategy,
    SampleStrategy,
    StaleDataError,
    StalenessControlSampleStrategy,
    WarmupSampleStrategy,
    build_sample_strategy,
    model_version_metrics,
)

__all__ = [
    "DEFAULT_EXPERIENCE_BUFFER_NAME",
    "EXPERT_CUSTOM_FIELDS",
    "SAMPLE_STRATEGY",
    "DefaultSampleStrategy",
    "MixSampleStrategy",
    "SampleStrategy",
    "StaleDataError",
    "StalenessControlSampleStrategy",
    "WarmupSampleStrategy",
    "build_sample_strategy",
    "model_version_metrics",
]
