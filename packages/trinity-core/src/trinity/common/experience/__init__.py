"""Experience: the unit of data exchanged between explorer, buffer and trainer.

An :class:`Experience` is one rollout sample (a prompt plus the model's response, its
log-probabilities, reward, masks, ...). Workflows create them, buffers store them as
bytes, the trainer receives them as one padded :class:`Experiences` batch.

Token layout of one experience::

    tokens:      | p p p p p | r r r r r r |
                 |<- prompt_length ->|<- response_length ->|
    logprobs, action_mask, advantages, returns, token_level_reward,
    teacher_logprobs:        | x x x x x x |   (response tokens only)

Design choices (and why):

* **No pickle.** Experiences travel through storages and Ray object stores that may be
  shared or untrusted, so :meth:`Experience.serialize` packs tensors with *safetensors*
  and every other field as JSON. Values that JSON cannot represent exactly raise a
  ``TypeError`` naming the offending key instead of being silently mangled.
* **One place pads.** :func:`collate_experiences` (alias
  :meth:`Experiences.gather_experiences`) is the only padding code in Trinity. It follows
  verl's convention: prompts are LEFT-padded to the longest prompt, responses RIGHT-padded
  to the longest response, so that column ``P`` is the first response token of every row.
* **Group ids are strings.** :class:`EID` composes ``batch/task/run/step/suffix`` exactly
  as Trinity-RFT does, so group-relative algorithms (GRPO, ...) can bucket experiences
  with :func:`group_by`.

Layout of this package (every public name is importable from ``trinity.common.experience``):

* :mod:`~trinity.common.experience.core` — the :class:`Experience` dataclass, :class:`EID`,
  :class:`CustomField`, field validation and the wire format's encode/decode methods;
* :mod:`~trinity.common.experience.serialization` — JSON/safetensors helpers of the wire format;
* :mod:`~trinity.common.experience.batch` — grouping and the one padding code
  (:class:`Experiences`, :func:`collate_experiences`);
* :mod:`~trinity.common.experience.hf` — HF ``datasets`` conversion, resolved on demand
  (also importable as ``trinity.common.experience_hf``).
"""

from __future__ import annotations

from typing import Any

from trinity.common.experience.batch import (
    Experiences,
    collate_experiences,
    gather_experiences,
    group_by,
    split_dpo_experience_to_single_turn,
)
from trinity.common.experience.core import (
    EID,
    GROUP_ID_TYPES,
    TRUNCATE_STATUSES,
    CustomField,
    Experience,
    ExperienceType,
    GroupIdType,
    InvalidExperienceError,
    TruncateStatus,
    deserialize_experiences,
    serialize_experiences,
)

__all__ = [
    "EID",
    "InvalidExperienceError",
    "CustomField",
    "Experience",
    "Experiences",
    "ExperienceType",
    "TruncateStatus",
    "GroupIdType",
    "TRUNCATE_STATUSES",
    "GROUP_ID_TYPES",
    "group_by",
    "split_dpo_experience_to_single_turn",
    "collate_experiences",
    "gather_experiences",
    "serialize_experiences",
    "deserialize_experiences",
]


def __getattr__(name: str) -> Any:
    # Resolved on demand: the helpers import ``datasets`` (not a core dependency) when run.
    if name in ("to_hf_datasets", "from_hf_datasets"):
        from trinity.common.experience import hf

        return getattr(hf, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
