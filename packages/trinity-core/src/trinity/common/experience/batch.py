"""Grouping and batching of experiences: the only padding code in Trinity.

This module owns :func:`group_by` (bucketing by task / run / step / batch id),
:func:`split_dpo_experience_to_single_turn`, the padded batch :class:`Experiences` and
:func:`collate_experiences` (prompts LEFT-padded, responses RIGHT-padded, verl's convention).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch import Tensor

from trinity.common.experience.core import (
    EID,
    GROUP_ID_TYPES,
    CustomField,
    Experience,
    GroupIdType,
)

# --------------------------------------------------------------------------------------
# Grouping
# --------------------------------------------------------------------------------------

_GROUP_ATTR = {"task": "tid", "run": "rid", "step": "sid"}


def group_by(
    experiences: Sequence[Experience], id_type: GroupIdType
) -> dict[str, list[Experience]]:
    """Bucket experiences by ``eid.tid`` ("task"), ``eid.rid`` ("run"), ``eid.sid``
    ("step") or ``str(eid.batch)`` ("batch").

    Group order follows first appearance and order inside a group is preserved, so
    results are deterministic for advantage computation.
    """
    if id_type not in GROUP_ID_TYPES:
        raise ValueError(f"Unknown id_type: {id_type!r}; expected one of {GROUP_ID_TYPES}")
    grouped: dict[str, list[Experience]] = {}
    for exp in experiences:
        key = str(exp.eid.batch) if id_type == "batch" else getattr(exp.eid, _GROUP_ATTR[id_type])
        grouped.setdefault(key, []).append(exp)
    return grouped


# --------------------------------------------------------------------------------------
# DPO
# --------------------------------------------------------------------------------------


def split_dpo_experience_to_single_turn(experiences: Sequence[Experience]) -> list[Experience]:
    """Turn each DPO pair into two single-turn experiences ``[chosen, rejected]``.

    The output is ordered ``[chosen_0, rejected_0, chosen_1, rejected_1, ...]`` (Trinity-RFT's
    convention; DPO losses take even rows as chosen and odd rows as rejected). Each half
    gets a fresh EID with the same batch/task/run/step, so ``tid``/``rid``/``sid`` still
    match the source while ``uid`` stays unique.
    """
    out: list[Experience] = []
    for exp in experiences:
        if exp.chosen is None or exp.rejected is None:
            raise ValueError(f"experience {exp.eid} is not a DPO pair (chosen/rejected unset)")
        for response, messages in (
            (exp.chosen, exp.chosen_messages),
            (exp.rejected, exp.rejected_messages),
        ):
            out.append(
                Experience(
                    eid=EID(
                        batch=exp.eid.batch, task=exp.eid.task, run=exp.eid.run, step=exp.eid.step
                    ),
                    tokens=torch.cat([exp.tokens, response]),
                    prompt_length=exp.tokens.shape[0],
                    reward=exp.reward,
                    info=exp.info,
                    metrics=exp.metrics,
                    prompt_text=exp.prompt_text,
                    messages=messages,
                    model_version=exp.model_version,
                )
            )
    return out


# --------------------------------------------------------------------------------------
# Collate (the only padding code in Trinity)
# --------------------------------------------------------------------------------------


@dataclass(eq=False)
class Experiences:
    """A padded batch of experiences, ready for the trainer (verl layout).

    With ``B`` rows, ``P`` = longest prompt, ``R`` = longest response::

                      |<------ P ------>|<------ R ------>|
        tokens:       |. . . p p p p p p|r r r r . . . . .|   prompt LEFT-padded,
        attention:    |0 0 0 1 1 1 1 1 1|1 1 1 1 0 0 0 0 0|   response RIGHT-padded
        position_ids: |0 0 0 0 1 2 3 4 5|6 7 8 9 9 9 9 9 9|
        action_mask:                    |1 1 0 1 0 0 0 0 0|

    Fields (``None`` means *no experience set it*, never zeros):

    * ``eids``: ``list[EID]`` of length B
    * ``tokens``: int64 ``[B, P+R]``, padded with ``pad_token_id``
    * ``attention_mask``: bool ``[B, P+R]``, True on real tokens
    * ``position_ids``: int64 ``[B, P+R]``, ``clip(cumsum(attention_mask) - 1, min=0)``
      exactly like verl's ``compute_position_id_with_mask``
    * ``action_mask``: bool ``[B, R]``, False on padding (always set: single-turn
      experiences default to ones over their response)
    * ``logprobs``: float ``[B, R]`` or None, padded with 0
    * ``rewards``: float32 ``[B]`` or None (None only if no experience has a reward; an
      experience with ``reward=None`` in a batch where others have one counts as 0.0,
      because verl builds token-level scores from a dense reward vector)
    * ``token_level_rewards``, ``advantages``, ``returns``, ``teacher_logprobs``: float
      ``[B, R]`` or None, padded with 0
    * ``prompt_length``: ``P``; ``response_length``: ``R``
    * ``model_versions``: int64 ``[B]`` (-1 where an experience has no recorded version)
    * ``multi_modal_inputs``: ``dict[str, list[Tensor]]`` (unpadded, per row) or None
    * ``custom_fields``: ``dict[str, Tensor]`` of shape ``[B, ...]`` from ``CustomField``
    """

    eids: list[EID]
    tokens: Tensor
    attention_mask: Tensor
    position_ids: Tensor
    action_mask: Tensor
    prompt_length: int
    response_length: int
    model_versions: Tensor
    logprobs: Optional[Tensor] = None
    rewards: Optional[Tensor] = None
    token_level_rewards: Optional[Tensor] = None
    advantages: Optional[Tensor] = None
    returns: Optional[Tensor] = None
    teacher_logprobs: Optional[Tensor] = None
    multi_modal_inputs: Optional[dict[str, list[Tensor]]] = None
    custom_fields: dict[str, Tensor] = field(default_factory=dict)

    @property
    def batch_size(self) -> int:
        """Number of rows B (2x the number of pairs for DPO)."""
        return int(self.tokens.shape[0])

    @property
    def attention_masks(self) -> Tensor:
        """Trinity-RFT's name for :attr:`attention_mask`."""
        return self.attention_mask

    @property
    def action_masks(self) -> Tensor:
        """Trinity-RFT's name for :attr:`action_mask`."""
        return self.action_mask

    @property
    def responses(self) -> Tensor:
        """Response part of ``tokens``: ``[B, R]`` (verl's ``responses``)."""
        return self.tokens[:, self.prompt_length :]

    @property
    def prompts(self) -> Tensor:
        """Prompt part of ``tokens``: ``[B, P]`` (verl's ``prompts``)."""
        return self.tokens[:, : self.prompt_length]

    def __getattr__(self, name: str) -> Tensor:
        # Custom fields read as attributes (``batch.a``), as in Trinity-RFT.
        custom = self.__dict__.get("custom_fields") or {}
        if name in custom:
            return custom[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @classmethod
    def empty(cls) -> Experiences:
        """A batch of 0 rows (what gathering an empty list gives in Trinity-RFT)."""
        none = torch.zeros((0, 0), dtype=torch.int64)
        return cls(
            eids=[],
            tokens=none,
            attention_mask=none.bool(),
            position_ids=none.clone(),
            action_mask=none.bool(),
            prompt_length=0,
            response_length=0,
            model_versions=torch.zeros(0, dtype=torch.int64),
            rewards=torch.zeros(0, dtype=torch.float32),
        )

    @classmethod
    def gather_experiences(
        cls,
        experiences: Sequence[Experience],
        pad_token_id: int = 0,
        custom_fields: Optional[Sequence[CustomField]] = None,
    ) -> Experiences:
        """Collate experiences into one padded batch; see :func:`collate_experiences`.

        An empty list gives :meth:`empty` (Trinity-RFT's behaviour);
        :func:`collate_experiences` itself refuses one, so the trainer never trains on an
        empty batch by accident.
        """
        if len(experiences) == 0:
            return cls.empty()
        return collate_experiences(experiences, pad_token_id, custom_fields)


def _flat_positions(lengths: Tensor) -> tuple[Tensor, Tensor]:
    """For concatenated sequences of ``lengths``: (row index, position inside row)."""
    rows = torch.repeat_interleave(torch.arange(lengths.shape[0]), lengths)
    starts = torch.cumsum(lengths, 0) - lengths
    within = torch.arange(rows.shape[0]) - starts[rows]
    return rows, within


def _pad_response_field(
    experiences: Sequence[Experience],
    name: str,
    dest: Tensor,
    shape: tuple[int, int],
    dtype: Optional[torch.dtype] = None,
) -> Optional[Tensor]:
    values = [getattr(e, name) for e in experiences]
    n_set = sum(v is not None for v in values)
    if n_set == 0:
        return None
    if n_set != len(values):
        missing = next(i for i, v in enumerate(values) if v is None)
        raise ValueError(
            f"{name} is set on {n_set} of {len(values)} experiences (missing on row "
            f"{missing}, eid {experiences[missing].eid}); set it on all or none"
        )
    flat = torch.cat(values)
    if dtype is not None:
        flat = flat.to(dtype)
    out = torch.zeros(shape, dtype=flat.dtype)
    out.view(-1)[dest] = flat
    return out


def collate_experiences(
    experiences: Sequence[Experience],
    pad_token_id: int = 0,
    custom_fields: Optional[Sequence[CustomField]] = None,
) -> Experiences:
    """Pad a list of experiences into one :class:`Experiences` batch (verl layout).

    The ONLY padding code in Trinity: prompts are left-padded to the longest prompt ``P``,
    responses right-padded to the longest response ``R``, so ``tokens[:, P:]`` are the
    responses aligned with ``logprobs``/``action_mask``/``advantages`` ``[B, R]``. See
    :class:`Experiences` for every output field and its shape.

    DPO experiences (all or none of the batch) are first split with
    :func:`split_dpo_experience_to_single_turn`, giving ``2 * len(experiences)`` rows in
    the order ``[chosen_0, rejected_0, chosen_1, rejected_1, ...]``.

    Per-response optional fields must be set on all experiences or on none (a mix raises
    ``ValueError``), so a missing value is never silently read as zeros.

    ``custom_fields`` (default: those of the first experience) copy scalars from
    ``info`` into ``Experiences.custom_fields``.

    The work is vectorised: one ``torch.cat`` and one scatter per field.
    """
    exps = list(experiences)
    if not exps:
        raise ValueError("cannot collate an empty list of experiences")
    n_dpo = sum(e.experience_type == "dpo" for e in exps)
    if n_dpo:
        if n_dpo != len(exps):
            raise ValueError(
                f"cannot mix DPO and non-DPO experiences in one batch ({n_dpo} of {len(exps)} "
                "are DPO)"
            )
        exps = split_dpo_experience_to_single_turn(exps)
    if custom_fields is None:
        custom_fields = exps[0].custom_fields

    b = len(exps)
    prompt_lens = torch.tensor([e.prompt_length for e in exps], dtype=torch.int64)
    seq_lens = torch.tensor([e.tokens.shape[0] for e in exps], dtype=torch.int64)
    resp_lens = seq_lens - prompt_lens
    p = int(prompt_lens.max())
    r = int(resp_lens.max())
    width = p + r
    left_pad = p - prompt_lens  # [B]

    # tokens: scatter every token to row * width + left_pad + index
    rows, within = _flat_positions(seq_lens)
    tokens = torch.full((b, width), pad_token_id, dtype=torch.int64)
    tokens.view(-1)[rows * width + left_pad[rows] + within] = torch.cat([e.tokens for e in exps])

    cols = torch.arange(width)
    attention_mask = (cols >= left_pad[:, None]) & (cols < (left_pad + seq_lens)[:, None])
    position_ids = torch.clamp(torch.cumsum(attention_mask, dim=-1, dtype=torch.int64) - 1, min=0)

    # response fields: scatter to row * R + index
    r_rows, r_within = _flat_positions(resp_lens)
    r_dest = r_rows * r + r_within
    shape = (b, r)
    action_mask = _pad_response_field(exps, "action_mask", r_dest, shape, torch.bool)
    if action_mask is None:  # only possible for hand-built experience_type overrides
        action_mask = torch.zeros(shape, dtype=torch.bool)

    rewards_list = [e.reward for e in exps]
    rewards = (
        None
        if all(x is None for x in rewards_list)
        else torch.tensor([0.0 if x is None else x for x in rewards_list], dtype=torch.float32)
    )

    extra = _custom_field_tensors(exps, custom_fields)
    mm = _multi_modal_lists(exps)

    return Experiences(
        eids=[e.eid for e in exps],
        tokens=tokens,
        attention_mask=attention_mask,
        position_ids=position_ids,
        action_mask=action_mask,
        prompt_length=p,
        response_length=r,
        model_versions=torch.tensor(
            [-1 if e.model_version is None else e.model_version for e in exps], dtype=torch.int64
        ),
        logprobs=_pad_response_field(exps, "logprobs", r_dest, shape),
        rewards=rewards,
        token_level_rewards=_pad_response_field(exps, "token_level_reward", r_dest, shape),
        advantages=_pad_response_field(exps, "advantages", r_dest, shape),
        returns=_pad_response_field(exps, "returns", r_dest, shape),
        teacher_logprobs=_pad_response_field(exps, "teacher_logprobs", r_dest, shape),
        multi_modal_inputs=mm,
        custom_fields=extra,
    )


def _custom_field_tensors(
    exps: Sequence[Experience], custom_fields: Sequence[CustomField]
) -> dict[str, Tensor]:
    """``{destination_field: [B] tensor}`` of each custom field's ``info`` scalars."""
    extra: dict[str, Tensor] = {}
    for cf in custom_fields:
        try:
            values = [e.info[cf.source_field] for e in exps]
        except KeyError as err:
            raise ValueError(
                f"custom field {cf.destination_field!r}: info[{cf.source_field!r}] missing "
                "on some experience"
            ) from err
        extra[cf.destination_field] = torch.tensor(values, dtype=cf.data_type)
    return extra


def _multi_modal_lists(exps: Sequence[Experience]) -> Optional[dict[str, list[Any]]]:
    """``{key: [value of each experience]}`` of the multi-modal inputs (set on all
    experiences or on none), or ``None`` where none has them."""
    if not any(e.multi_modal_inputs is not None for e in exps):
        return None
    if not all(e.multi_modal_inputs is not None for e in exps):
        raise ValueError("multi_modal_inputs is set on some experiences but not all")
    keys = list(exps[0].multi_modal_inputs)  # type: ignore[arg-type]
    return {k: [e.multi_modal_inputs[k] for e in exps] for k in keys}  # type: ignore[index]


#: Trinity-RFT style module-level name for :func:`collate_experiences`.
gather_experiences = collate_experiences
