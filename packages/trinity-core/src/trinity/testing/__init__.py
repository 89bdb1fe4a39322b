"""Contract tests for Trinity plugins: subclass a base class, name your component, run pytest.

Install with ``pip install "trinity-core[testing]"`` (it adds pytest), then::

    from trinity.testing import PolicyLossContract
    from my_plugin import MyLoss

    class TestMyLoss(PolicyLossContract):
        component = MyLoss
        component_args = {"tau": 0.5}

Each base class checks what the framework relies on for that kind of component (shapes and
dtypes, masks respected, finite values on edge inputs, determinism, registration ...). A failure
says which rule broke: ``rule 'masked tokens do not change the loss' broke for MyLoss: ...``.
A rule that does not apply is exempted with a reason: ``skip_rules = {"masked-tokens": "why"}``.
See docs/testing-plugins.md for every kind and the list of rules.

Contracts of algorithm and buffer components talk to them by duck typing, so this package (part
of trinity-core) imports no sibling package; registries are looked up lazily and a missing
package skips the registration rule with the reason.
"""

from __future__ import annotations

try:
    import pytest as _pytest  # noqa: F401
except ModuleNotFoundError as exc:  # pragma: no cover - depends on the environment
    raise ModuleNotFoundError(
        "trinity.testing needs pytest, an optional dependency of trinity-core: install it with "
        '`pip install "trinity-core[testing]"` (or `pip install pytest`)',
        name="pytest",
    ) from exc

from trinity.utils.lazy import lazy_exports

# Where each public name lives. Loaded on first use (PEP 562) so that the pytest plugin
# (``trinity.testing.plugin``, loaded by every pytest run in an environment with trinity-core)
# costs nothing until a test uses the kit.
_EXPORTS = {
    "AdvantageFnContract": "trinity.testing.advantages",
    "ComponentContract": "trinity.testing._contract",
    "EntropyLossContract": "trinity.testing.losses",
    "ExperienceOperatorContract": "trinity.testing.operators",
    "KLFnContract": "trinity.testing.losses",
    "ListReader": "trinity.testing.sampling",
    "PolicyLossContract": "trinity.testing.losses",
    "RewardFnContract": "trinity.testing.workflows",
    "RuleBroken": "trinity.testing._contract",
    "SampleStrategyContract": "trinity.testing.sampling",
    "WorkflowContract": "trinity.testing.workflows",
    "build_like_the_framework": "trinity.testing._contract",
    "check_metrics": "trinity.testing._contract",
    "make_contract_tests": "trinity.testing._contract",
    "rule": "trinity.testing._contract",
}


# also sets __all__ to the table's names: a public name is exactly one listed above
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
