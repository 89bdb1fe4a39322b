"""Every built-in algorithm component passes the plugin authors' contract kit (trinity.testing).

One test class per registered name, generated from the registries: a new built-in is checked
the day it is registered. Exemptions are explicit (``skip_rules``) and say why the rule does
not apply.
"""

from __future__ import annotations

import pytest

from trinity.algorithm.advantage_fn import ADVANTAGE_FN
from trinity.algorithm.entropy_loss_fn import ENTROPY_LOSS_FN
from trinity.algorithm.kl_fn import KL_FN
from trinity.algorithm.policy_loss_fn import POLICY_LOSS_FN
from trinity.algorithm.sample_strategy import SAMPLE_STRATEGY
from trinity.testing import (
    AdvantageFnContract,
    EntropyLossContract,
    KLFnContract,
    PolicyLossContract,
    SampleStrategyContract,
    make_contract_tests,
)

globals().update(make_contract_tests(PolicyLossContract, POLICY_LOSS_FN, prefix="PolicyLoss"))
# Trainer-side advantages that reproduce verl exactly leave values on masked tokens (GAE's
# whitening shifts padding too; ReMax's returns are a reverse cumsum that reaches an environment
# token in mid-response). Nothing reads them: every policy loss aggregates over the action mask,
# which PolicyLossContract's 'masked-tokens' rule checks, and 'masked-values' still holds.
_VERL_MASKING = {
    "masked-tokens": "numerically verl's (tested); values on masked tokens are never read, "
    "every policy loss masks them"
}
globals().update(
    make_contract_tests(
        AdvantageFnContract,
        ADVANTAGE_FN,
        prefix="Advantage",
        attrs={"ppo": {"skip_rules": _VERL_MASKING}, "remax": {"skip_rules": _VERL_MASKING}},
    )
)
globals().update(make_contract_tests(KLFnContract, KL_FN, prefix="KL"))
globals().update(make_contract_tests(EntropyLossContract, ENTROPY_LOSS_FN, prefix="Entropy"))
globals().update(
    make_contract_tests(SampleStrategyContract, SAMPLE_STRATEGY, prefix="SampleStrategy")
)


@pytest.mark.parametrize(
    "registry", [POLICY_LOSS_FN, ADVANTAGE_FN, KL_FN, ENTROPY_LOSS_FN, SAMPLE_STRATEGY]
)
def test_every_registered_name_has_a_contract_class(registry):
    prefixes = {
        "policy_loss_fn": "PolicyLoss",
        "advantage_fn": "Advantage",
        "kl_fn": "KL",
        "entropy_loss_fn": "Entropy",
        "sample_strategy": "SampleStrategy",
    }
    names = registry.list()
    assert names
    for name in names:
        cls = globals()[f"Test{prefixes[registry.name]}_{name}"]
        assert cls.component is registry.get(name)
