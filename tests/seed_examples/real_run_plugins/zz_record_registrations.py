"""Loaded last: records which classes hold the guide's names in this process.

Writes ``<SEED_PLUGINS_RECORD_DIR>/<pid>.json`` (when that variable is set) mapping
``<registry>/<name>`` to the holder's ``module.QualName``, so the test can check that every
process of the run resolved ``opmd`` and ``reward_filter`` to the guide's classes (which replace
the built-ins of those names), not to the built-ins.
"""

import json
import os

from trinity.algorithm import ALGORITHM_TYPE
from trinity.algorithm.advantage_fn import ADVANTAGE_FN
from trinity.algorithm.policy_loss_fn import POLICY_LOSS_FN
from trinity.buffer.operators import EXPERIENCE_OPERATORS

GUIDE_NAMES = (
    (ALGORITHM_TYPE, "opmd"),
    (ADVANTAGE_FN, "opmd"),
    (POLICY_LOSS_FN, "opmd"),
    (EXPERIENCE_OPERATORS, "reward_filter"),
)

_record_dir = os.environ.get("SEED_PLUGINS_RECORD_DIR")
if _record_dir:
    _record = {}
    for _registry, _name in GUIDE_NAMES:
        _cls = _registry.get(_name)
        _record[f"{_registry.name}/{_name}"] = f"{_cls.__module__}.{_cls.__qualname__}"
    with open(os.path.join(_record_dir, f"{os.getpid()}.json"), "w", encoding="utf-8") as _f:
        json.dump(_record, _f)
