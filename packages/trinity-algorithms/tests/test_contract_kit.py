"""Every built-in algorithm component passes the plugin authors' contract kit (trinity.testing).

One test class per registered name, generated from the registries: a new built-in is checked
the day it is registered. Exemptions are explicit (``skip_rules``) and say why the rule does
not apply.
"""

from __future__ import annotations

import pytest
import torch

from trinity.algorithm.advantage_fn import ADVANTAGE_FN
from trinity.algorithm.entropy_loss_fn import ENTROPY_LOSS_FN
from trinity.algorithm.kl_fn import KL_FN
from trinity.algorithm.policy_loss_fn import POLICY_LOSS_FN
from trinity.algorithm.sample_strategy import SAMPLE_STRATEGY
from trinity.common.experience import Experiences
from trinity.testing import (
    AdvantageFnContract,
    EntropyLossContract,
    KLFnContract,
    PolicyLossContract,
    SampleStrategyContract,
    make_contract_tests,
)

# mix_chord reads the train step of its batch ([batch], every row the same), which the 'mix'
# sample strategy adds; the kit's standard batch has no such field.
_STEP = {"step": lambda inputs: torch.full((inputs["logprob"].shape[0],), 5, dtype=torch.int32)}
globals().update(
    make_contract_tests(
        PolicyLossContract,
        POLICY_LOSS_FN,
        prefix="PolicyLoss",
        attrs={"mix_chord": {"extra_inputs": _STEP}},
    )
)
# Trainer-side advantages that reproduce verl exactly leave values on masked tokens (GAE's
# whitening shifts padding too; ReMax's returns are a reverse cumsum that reaches an environment
# token in mid-response). Nothing reads them: every policy loss aggregates over the action mask,
# which PolicyLossContract's 'masked-tokens' rule checks, and 'masked-values' still holds.
_VERL_MASKING = {
    "masked-tokens": "numerically verl's (tested); values on masked tokens are never read, "
    "every policy loss masks them"
}


def _per_token(scale: float, seed: int):
    """A seeded ``[B, R]`` field of the collated batch (entropies, teacher log-probs ...)."""

    def make(batch: Experiences) -> torch.Tensor:
        gen = torch.Generator().manual_seed(seed)
        return scale * torch.rand(batch.action_mask.shape, generator=gen)

    return make


# Trainer-side advantages that read per-token fields the collated batch of the kit lacks
# (the teacher's log-probs of distillation, the entropies of the Clip_B / Clip_V filters).
_TEACHER = {"teacher_logprobs": _per_token(-3.0, 21)}
_ENTROPY = {"entropy": _per_token(3.0, 22)}
globals().update(
    make_contract_tests(
        AdvantageFnContract,
        ADVANTAGE_FN,
        prefix="Advantage",
        attrs={
            "ppo": {"skip_rules": _VERL_MASKING},
            "remax": {"skip_rules": _VERL_MASKING},
            "on_policy_distill": {"trainer_fields": _TEACHER},
            "jsd": {"trainer_fields": _TEACHER},
            "clipb": {"trainer_fields": _ENTROPY},
            "clipv": {"trainer_fields": {**_ENTROPY, "necs": _per_token(1.0, 23)}},
        },
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
