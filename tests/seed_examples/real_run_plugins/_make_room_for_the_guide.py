"""Loaded first (plugin modules load in file-name order, and ``_`` sorts before letters).

The guide's snippets register under the names the installed built-ins already hold (``opmd``
in ``ALGORITHM_TYPE``, ``ADVANTAGE_FN`` and ``POLICY_LOSS_FN``; ``reward_filter`` in
``EXPERIENCE_OPERATORS``), and a registry refuses a second class under a taken name. This
module takes those built-ins out, in every process that loads the plugin directory, so the
guide's classes are what the run resolves by name -- what the ``guide`` fixtures of
``test_algorithm_guide.py`` and ``test_operator_guide.py`` do inside one process.
"""

import trinity.algorithm  # noqa: F401  (imports, hence registers, every built-in component)
import trinity.buffer.operators  # noqa: F401
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

for registry, name in GUIDE_NAMES:
    holder = registry.get(name)
    if holder.__module__.startswith("trinity."):  # a built-in, not (yet) the guide's
        registry.unregister(name)
