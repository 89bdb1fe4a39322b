"""Every built-in experience operator passes the plugin authors' contract kit (trinity.testing).

One test class per registered operator, generated from ``EXPERIENCE_OPERATORS``; exemptions are
explicit and say why.
"""

from __future__ import annotations

import importlib.util

from trinity.buffer.operators import EXPERIENCE_OPERATORS, TASKSET_SCHEDULE_METRIC
from trinity.common.constants import SELECTOR_METRIC
from trinity.testing import ExperienceOperatorContract, make_contract_tests

_HAVE_DJ = importlib.util.find_spec("data_juicer") is not None

_ARGS = {
    # a threshold that splits the standard step (rewards 0 .. 1)
    "reward_filter": {"threshold": 0.5},
    "reward_std_filter": {"threshold": 0.1},
    "reward_shaping_mapper": {
        "reward_shaping_configs": [{"stats_key": "quality", "op_type": "ADD", "weight": 0.5}]
    },
    "pass_rate_calculator": {"success_threshold": 0.5},
    # one cheap Data-Juicer filter on the response text
    "data_juicer": {"operators": [{"text_length_filter": {"min_len": 1, "max_len": 100}}]},
}
_ATTRS = {
    # the task-set scheduler reads {task: pass rate} under this key; the pipeline passes it
    # through unprefixed (see ExperiencePipeline), so it is not a number by design
    "pass_rate_calculator": {
        "non_numeric_metrics": frozenset({TASKSET_SCHEDULE_METRIC, SELECTOR_METRIC})
    },
}
if not _HAVE_DJ:
    _reason = "py-data-juicer is not installed (trinity-buffer[data-juicer])"
    _ATTRS["data_juicer"] = {
        "skip_rules": {
            r: _reason
            for r in ("builds", "output", "empty", "edge-inputs", "consistent", "deterministic")
        }
    }

globals().update(
    make_contract_tests(
        ExperienceOperatorContract,
        EXPERIENCE_OPERATORS,
        prefix="Operator",
        args=_ARGS,
        attrs=_ATTRS,
    )
)


def test_every_registered_operator_has_a_contract_class():
    names = EXPERIENCE_OPERATORS.list()
    assert "reward_filter" in names and "data_juicer" in names
    for name in names:
        assert globals()[f"TestOperator_{name}"].component is EXPERIENCE_OPERATORS.get(name)
