"""Experience operators: the steps of the experience pipeline.

``ExperienceOperator`` is the guide's one-method contract (``process(exps) -> (exps,
metrics)``), ``ExperienceOperatorV1`` Trinity-RFT 0.6's asynchronous one (what
``create_operators`` returns; ``build_operators`` gives the operators as built);
``EXPERIENCE_OPERATORS`` maps the names used in
``data_processor.experience_pipeline.operators`` to classes. Importing this package registers
the built-ins: ``reward_filter``, ``reward_std_filter``, ``dapo_dynamic_sampling``,
``invalid_reward_filter``, ``mask_response_truncated``, ``reward_shaping_mapper``,
``pass_rate_calculator`` and ``data_juicer`` (the last needs ``trinity-buffer[data-juicer]``
when built, not when imported).
"""

from trinity.buffer.operators.data_juicer import (
    DATA_JUICER_INSTALL_HINT,
    DataJuicerOperator,
    DataJuicerRunner,
)
from trinity.buffer.operators.experience_operator import (
    EXPERIENCE_OPERATORS,
    ExperienceOperator,
    ExperienceOperatorError,
    ExperienceOperatorV1,
    ExperienceOperatorV1Wrapper,
    OperatorSpec,
    build_operators,
    create_operators,
    ensure_v1_operator,
    operator_config,
)
from trinity.buffer.operators.filters import (
    DAPODynamicSamplingFilter,
    InvalidRewardFilter,
    MaskResponseTruncatedOperator,
    RewardFilter,
    RewardSTDFilter,
)
from trinity.buffer.operators.mappers import (
    TASKSET_SCHEDULE_METRIC,
    PassRateCalculator,
    RewardShapingMapper,
)

__all__ = [
    "EXPERIENCE_OPERATORS",
    "ExperienceOperator",
    "ExperienceOperatorError",
    "ExperienceOperatorV1",
    "ExperienceOperatorV1Wrapper",
    "OperatorSpec",
    "build_operators",
    "create_operators",
    "ensure_v1_operator",
    "operator_config",
    "RewardFilter",
    "RewardSTDFilter",
    "DAPODynamicSamplingFilter",
    "InvalidRewardFilter",
    "MaskResponseTruncatedOperator",
    "RewardShapingMapper",
    "PassRateCalculator",
    "TASKSET_SCHEDULE_METRIC",
    "DataJuicerOperator",
    "DataJuicerRunner",
    "DATA_JUICER_INSTALL_HINT",
]
