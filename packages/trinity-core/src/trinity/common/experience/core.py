"""The :class:`Experience` dataclass and its identity types.

This module owns one rollout sample: :class:`Experience` (fields, validation of lengths and
dtypes at construction, the Trinity-RFT attribute aliases, and the byte encoding
``serialize``/``deserialize``), its id :class:`EID`, :class:`CustomField` and
:class:`InvalidExperienceError`. Batching lives in :mod:`trinity.common.experience.batch`, the
JSON/safetensors helpers of the wire format in :mod:`trinity.common.experience.serialization`;
both sit beside this module, and ``trinity.common.experience`` re-exports everything.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Union

import numpy as np
import torch
from torch import Tensor

from trinity.common.experience.serialization import _dtype_from_name, _jsonable, pack, unpack


class InvalidExperienceError(ValueError, AssertionError):
    """An :class:`Experience` built with inconsistent fields.

    A ``ValueError`` (bad input) that is also an ``AssertionError``, because Trinity-RFT
    checks these with ``assert`` and code written for it catches ``AssertionError``.
    """


ExperienceType = Literal["single_turn", "multi_turn", "dpo"]
TruncateStatus = Literal["prompt_truncated", "response_truncated"]
GroupIdType = Literal["task", "run", "step", "batch"]

#: Allowed values of :attr:`Experience.truncate_status` besides ``None``.
TRUNCATE_STATUSES: tuple[str, ...] = ("prompt_truncated", "response_truncated")
#: Allowed ``id_type`` values of :func:`group_by`.
GROUP_ID_TYPES: tuple[str, ...] = ("task", "run", "step", "batch")
_EXPERIENCE_TYPES: tuple[str, ...] = ("single_turn", "multi_turn", "dpo")


# --------------------------------------------------------------------------------------
# EID
# --------------------------------------------------------------------------------------


def _new_suffix() -> str:
    # A full uuid4: the suffix is what makes ``uid`` unique when several experiences
    # share batch/task/run/step (e.g. repeated samples), so don't shorten it.
    return uuid.uuid4().hex


@dataclass(unsafe_hash=True)
class EID:
    """Experience id: locates an experience inside the exploration.

    The workflow runner sets ``batch`` (explorer step) and ``task`` (index of the task in
    the batch); workflows set ``run`` (which repeat of the task) and ``step`` (turn index
    inside a multi-step run). The derived ids are slash-joined strings, identical to
    Trinity-RFT's, so they can be logged, used as dict keys and compared across processes.

    EIDs are mutable (the runner fills ``batch``/``task`` after creation) yet hashable by
    value; do not mutate one while it is a dict key or in a set.
    """

    batch: Union[int, str] = ""
    task: Union[int, str] = ""
    run: int = 0
    step: int = 0
    suffix: str = field(default_factory=_new_suffix)

    @property
    def uid(self) -> str:
        """Unique id of the experience: ``"{batch}/{task}/{run}/{step}/{suffix}"``."""
        return f"{self.batch}/{self.task}/{self.run}/{self.step}/{self.suffix}"

    @property
    def sid(self) -> str:
        """Step id ``"{batch}/{task}/{step}"``: all runs of a task at the same step."""
        return f"{self.batch}/{self.task}/{self.step}"

    @property
    def rid(self) -> str:
        """Run id ``"{batch}/{task}/{run}"``: all steps of one run of a task."""
        return f"{self.batch}/{self.task}/{self.run}"

    @property
    def tid(self) -> str:
        """Task id ``"{batch}/{task}"``: every run of a task (the GRPO group)."""
        return f"{self.batch}/{self.task}"

    def __str__(self) -> str:
        return self.uid

    def __repr__(self) -> str:
        # Trinity-RFT's format (values unquoted, the suffix shown as ``uuid``).
        return (
            f"EID(batch={self.batch}, task={self.task}, run={self.run}, "
            f"step={self.step}, uuid={self.suffix})"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict with the five fields (inverse of :meth:`from_dict`)."""
        return {
            "batch": self.batch,
            "task": self.task,
            "run": self.run,
            "step": self.step,
            "suffix": self.suffix,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EID:
        """Build an EID from :meth:`to_dict` output; unknown keys raise ``ValueError``."""
        unknown = set(data) - {"batch", "task", "run", "step", "suffix"}
        if unknown:
            raise ValueError(f"EID.from_dict: unknown keys {sorted(unknown)}")
        return cls(**dict(data))


@dataclass(frozen=True)
class CustomField:
    """Copies a per-experience value from ``Experience.info`` into the collated batch.

    ``Experiences.custom_fields[destination_field]`` becomes
    ``torch.tensor([exp.info[source_field] for exp in batch], dtype=data_type)``.
    """

    source_field: str
    destination_field: str
    data_type: torch.dtype


# --------------------------------------------------------------------------------------
# Tensor coercion helpers
# --------------------------------------------------------------------------------------


def _as_int_tensor(name: str, value: Any) -> Tensor:
    """Token ids: always a 1-D int64 tensor (verl's ``input_ids`` dtype).

    Floating values are accepted when every one is a whole number (``torch.zeros(5)`` is a
    valid placeholder in Trinity-RFT's tests); a fractional or non-finite id is refused.
    """
    t = value.detach() if isinstance(value, Tensor) else torch.as_tensor(np.asarray(value))
    if t.is_complex() or t.dtype == torch.bool:
        raise InvalidExperienceError(f"{name} must hold integer token ids, got dtype {t.dtype}")
    if t.is_floating_point():
        bad = ~torch.isfinite(t) | (t != torch.round(t))
        if bool(bad.any()):
            raise InvalidExperienceError(
                f"{name} must hold integer token ids, got the non-integral value "
                f"{t[bad][0].item()!r} (dtype {t.dtype})"
            )
    t = t.to(torch.int64)
    if t.dim() != 1:
        raise InvalidExperienceError(f"{name} must be 1-D, got shape {tuple(t.shape)}")
    return t


def _as_float_tensor(name: str, value: Any) -> Optional[Tensor]:
    """Per-token floats; tensors keep a floating dtype, anything else becomes float32."""
    if value is None:
        return None
    if isinstance(value, Tensor):
        t = value.detach()
        if not t.is_floating_point():
            t = t.to(torch.float32)
    else:
        t = torch.as_tensor(np.asarray(value, dtype=np.float32))
    if t.dim() != 1:
        raise InvalidExperienceError(f"{name} must be 1-D, got shape {tuple(t.shape)}")
    return t


def _as_mask_tensor(name: str, value: Any) -> Optional[Tensor]:
    """Masks: bool or integer tensors are kept as given; lists and float 0/1 tensors become
    bool (any other float value is refused: a mask is not a weight)."""
    if value is None:
        return None
    if isinstance(value, Tensor):
        t = value.detach()
        if t.is_complex():
            raise InvalidExperienceError(f"{name} must be a 0/1 mask, got dtype {t.dtype}")
        if t.is_floating_point():
            bad = (t != 0) & (t != 1)
            if bool(bad.any()):
                raise InvalidExperienceError(
                    f"{name} must hold only 0 and 1, got {t[bad][0].item()!r}"
                )
            t = t.to(torch.bool)
    else:
        t = torch.as_tensor(np.asarray(value, dtype=bool))
    if t.dim() != 1:
        raise InvalidExperienceError(f"{name} must be 1-D, got shape {tuple(t.shape)}")
    return t


def _check_len(name: str, t: Optional[Tensor], expected: int, what: str) -> None:
    if t is not None and t.shape[0] != expected:
        raise InvalidExperienceError(
            f"{name} has length {t.shape[0]}, expected {expected} ({what}) or len(tokens) "
            f"(then the prompt part is dropped); per-token fields cover the response tokens"
        )


# --------------------------------------------------------------------------------------
# Experience
# --------------------------------------------------------------------------------------

# Fields stored in the safetensors part of the wire format.
_TENSOR_FIELDS: tuple[str, ...] = (
    "tokens",
    "logprobs",
    "token_level_reward",
    "advantages",
    "returns",
    "action_mask",
    "chosen",
    "rejected",
    "teacher_logprobs",
    "routed_experts",
)
# Fields stored in the JSON part of the wire format.
_META_FIELDS: tuple[str, ...] = (
    "prompt_length",
    "reward",
    "truncate_status",
    "info",
    "metrics",
    "response_text",
    "prompt_text",
    "messages",
    "tools",
    "chosen_messages",
    "rejected_messages",
    "experience_type",
    "model_version",
)
# Per-response-token tensors that must have length == response_length.
_RESPONSE_FIELDS: tuple[str, ...] = (
    "logprobs",
    "action_mask",
    "token_level_reward",
    "advantages",
    "returns",
    "teacher_logprobs",
)


@dataclass(kw_only=True, eq=False)
class Experience:
    """One rollout sample.

    Construct with keywords only, e.g.
    ``Experience(tokens=resp.tokens, prompt_length=resp.prompt_length, reward=r,
    logprobs=resp.logprobs)``.

    Kinds (``experience_type``, inferred when not given, as in Trinity-RFT):

    * ``"single_turn"`` – ``tokens`` = prompt + one response; ``action_mask`` defaults to
      ones over the response (zeros when ``truncate_status == "prompt_truncated"``, so a
      truncated prompt contributes no gradient).
    * ``"multi_turn"`` – an ``action_mask`` is given: it marks which response tokens the
      model generated (1) versus tool/user/env tokens spliced in (0).
    * ``"dpo"`` – ``chosen`` and ``rejected`` response token ids are given; ``tokens``
      holds the prompt only and ``prompt_length`` is set to ``len(tokens)``.

    Tensor shapes (``R = len(tokens) - prompt_length``):

    * ``tokens``: int64 ``[prompt_length + R]``
    * ``logprobs``, ``token_level_reward``, ``advantages``, ``returns``,
      ``teacher_logprobs``: float ``[R]``
    * ``action_mask``: bool/int ``[R]``
    * ``chosen``, ``rejected``: int64 ``[R_chosen]``, ``[R_rejected]``
    * ``routed_experts``: ``[len(tokens) - 1, n_layers, top_k]`` (MoE router replay;
      stored and serialized, not collated)

    Lists and numpy arrays are converted: token ids to int64, floats to float32, masks
    to bool. Inconsistent shapes raise ``ValueError`` naming the field, its length and
    the expected length.
    """

    eid: EID = field(default_factory=EID)
    tokens: Tensor
    prompt_length: int = 1
    logprobs: Optional[Tensor] = None
    reward: Optional[float] = None
    token_level_reward: Optional[Tensor] = None
    advantages: Optional[Tensor] = None
    returns: Optional[Tensor] = None
    # None | "prompt_truncated" | "response_truncated"
    truncate_status: Optional[str] = None
    # Free-form extra data; must be JSON-able to be serialized.
    info: dict[str, Any] = field(default_factory=dict)
    # Scalars reported to the monitor.
    metrics: dict[str, float] = field(default_factory=dict)

    # single-turn
    response_text: Optional[str] = None
    prompt_text: Optional[str] = None

    # multi-turn: which response tokens the model generated
    action_mask: Optional[Tensor] = None
    messages: Optional[list[dict[str, Any]]] = None
    tools: Optional[list[dict[str, Any]]] = None

    # DPO pairs: response token ids, and the full message lists (prompt included)
    chosen: Optional[Tensor] = None
    rejected: Optional[Tensor] = None
    chosen_messages: Optional[list[dict[str, Any]]] = None
    rejected_messages: Optional[list[dict[str, Any]]] = None

    # multi-modal inputs for the trainer (e.g. pixel_values), passed through as-is
    multi_modal_inputs: Optional[dict[str, Tensor]] = None
    # the raw multi-modal data a workflow gave the engine (images, ...): kept on the object
    # for the workflow's own use, as in Trinity-RFT, but not serialized (it is often not
    # JSON-able and the trainer reads ``multi_modal_inputs``), so it does not travel through
    # the buffer
    multi_modal_data: Optional[dict[str, Any]] = None

    # on-policy distillation
    teacher_logprobs: Optional[Tensor] = None

    # MoE router replay: [len(tokens) - 1, n_layers, top_k]
    routed_experts: Optional[Tensor] = None

    custom_fields: list[CustomField] = field(default_factory=list)

    # "single_turn" | "multi_turn" | "dpo"; None = infer (see class docstring)
    experience_type: Optional[str] = None

    # Version (trainer step) of the policy that generated this experience; the buffer
    # compares it with the current version for staleness control. None = not recorded yet:
    # the runner stamps the version of the model the workflow ran with.
    model_version: Optional[int] = None

    def __post_init__(self) -> None:
        self._coerce_fields()
        self._settle_kind()
        self._check_lengths()

    def _coerce_fields(self) -> None:
        """Every field into its one stored type (tensors, ints, floats, dicts), or TypeError /
        :class:`InvalidExperienceError` naming the field."""
        # eid
        if self.eid is None:
            self.eid = EID()
        elif isinstance(self.eid, Mapping):
            self.eid = EID.from_dict(self.eid)
        elif not isinstance(self.eid, EID):
            raise TypeError(f"eid must be an EID or a dict, got {type(self.eid).__name__}")

        # tensors
        self.tokens = _as_int_tensor("tokens", self.tokens)
        self.logprobs = _as_float_tensor("logprobs", self.logprobs)
        self.token_level_reward = _as_float_tensor("token_level_reward", self.token_level_reward)
        self.advantages = _as_float_tensor("advantages", self.advantages)
        self.returns = _as_float_tensor("returns", self.returns)
        self.teacher_logprobs = _as_float_tensor("teacher_logprobs", self.teacher_logprobs)
        self.action_mask = _as_mask_tensor("action_mask", self.action_mask)
        if self.chosen is not None:
            self.chosen = _as_int_tensor("chosen", self.chosen)
        if self.rejected is not None:
            self.rejected = _as_int_tensor("rejected", self.rejected)
        if self.routed_experts is not None and not isinstance(self.routed_experts, Tensor):
            self.routed_experts = torch.as_tensor(np.asarray(self.routed_experts, dtype=np.uint8))
        if self.multi_modal_inputs is not None:
            self.multi_modal_inputs = {
                str(k): v if isinstance(v, Tensor) else torch.as_tensor(np.asarray(v))
                for k, v in self.multi_modal_inputs.items()
            }

        # scalars
        if self.reward is not None:
            self.reward = float(self.reward)
        if isinstance(self.prompt_length, bool) or not isinstance(
            self.prompt_length, (int, np.integer)
        ):
            raise TypeError(f"prompt_length must be an int, got {type(self.prompt_length)}")
        self.prompt_length = int(self.prompt_length)
        if self.model_version is not None:
            self.model_version = int(self.model_version)
        self.info = {} if self.info is None else self.info
        self.metrics = {} if self.metrics is None else self.metrics
        self.custom_fields = list(self.custom_fields or [])
        if self.truncate_status is not None and self.truncate_status not in TRUNCATE_STATUSES:
            raise InvalidExperienceError(
                f"truncate_status must be None or one of {TRUNCATE_STATUSES}, "
                f"got {self.truncate_status!r}"
            )

    def _settle_kind(self) -> None:
        """``experience_type`` from the fields given where unset, else checked."""
        if (self.chosen is None) != (self.rejected is None):
            raise InvalidExperienceError("chosen and rejected must be given together (DPO pair)")
        if self.experience_type is None:
            if self.action_mask is not None:
                self.experience_type = "multi_turn"
            elif self.chosen is not None:
                self.experience_type = "dpo"
            else:
                self.experience_type = "single_turn"
        elif self.experience_type not in _EXPERIENCE_TYPES:
            raise InvalidExperienceError(
                f"experience_type must be one of {_EXPERIENCE_TYPES}, got {self.experience_type!r}"
            )

    def _check_lengths(self) -> None:
        """Per-response fields of the response's length (whole-sequence ones cut to it), a
        default ``action_mask`` where the kind allows one."""
        n = self.tokens.shape[0]
        if self.experience_type == "dpo":
            if self.chosen is None:
                raise InvalidExperienceError(
                    "a 'dpo' experience needs chosen and rejected token ids"
                )
            for name in ("chosen", "rejected"):
                if getattr(self, name).shape[0] == 0:
                    raise InvalidExperienceError(f"{name} has length 0, expected at least 1 token")
            # tokens hold only the prompt for DPO (Trinity-RFT convention)
            self.prompt_length = n

        if not 1 <= self.prompt_length <= n:
            raise InvalidExperienceError(
                f"prompt_length is {self.prompt_length}, expected 1 <= prompt_length <= "
                f"len(tokens) = {n}"
            )
        resp_len = n - self.prompt_length

        if self.experience_type == "single_turn" and self.action_mask is None:
            if self.truncate_status == "prompt_truncated":
                self.action_mask = torch.zeros(resp_len, dtype=torch.bool)
            else:
                if resp_len < 1:
                    raise InvalidExperienceError(
                        f"tokens has length {n}, expected more than prompt_length = "
                        f"{self.prompt_length} (a single-turn experience needs a response)"
                    )
                self.action_mask = torch.ones(resp_len, dtype=torch.bool)
        elif self.experience_type == "multi_turn" and self.action_mask is None:
            raise InvalidExperienceError("a 'multi_turn' experience needs an action_mask")

        what = f"len(tokens) {n} - prompt_length {self.prompt_length}"
        for name in _RESPONSE_FIELDS:
            value = getattr(self, name)
            # Trinity-RFT also takes per-token fields over the whole sequence; keep one
            # layout (response tokens only) so collation never misaligns them.
            if value is not None and value.shape[0] == n and n != resp_len:
                value = value[self.prompt_length :]
                setattr(self, name, value)
            _check_len(name, value, resp_len, what)
        if self.routed_experts is not None and self.routed_experts.shape[0] != n - 1:
            raise InvalidExperienceError(
                f"routed_experts has length {self.routed_experts.shape[0]}, expected "
                f"len(tokens) - 1 = {n - 1}"
            )

    # ---- convenience -----------------------------------------------------------------

    @property
    def response_length(self) -> int:
        """Number of response tokens, ``len(tokens) - prompt_length`` (0 for DPO)."""
        return int(self.tokens.shape[0]) - self.prompt_length

    @property
    def prompt_tokens(self) -> Tensor:
        """Prompt token ids ``tokens[:prompt_length]``."""
        return self.tokens[: self.prompt_length]

    @property
    def response_tokens(self) -> Tensor:
        """Response token ids ``tokens[prompt_length:]``."""
        return self.tokens[self.prompt_length :]

    def to_dict(self) -> dict[str, Any]:
        """Summary dict (no tensors) for logging/inspection, as in Trinity-RFT."""
        res: dict[str, Any] = {
            "eid": self.eid.to_dict(),
            "type": self.experience_type,
            "prompt_length": self.prompt_length,
            "response_length": self.response_length,
            "model_version": self.model_version,
            "info": self.info,
            "metrics": self.metrics,
        }
        for name in (
            "prompt_text",
            "response_text",
            "messages",
            "tools",
            "chosen_messages",
            "rejected_messages",
            "truncate_status",
        ):
            value = getattr(self, name)
            if value is not None:
                res[name] = value
        if self.reward is not None:
            res["reward"] = float(self.reward)
        return res

    # ---- serialization ---------------------------------------------------------------

    def serialize(self) -> bytes:
        """Encode this experience to bytes (see :meth:`serialize_many`)."""
        return Experience.serialize_many([self])

    @classmethod
    def deserialize(cls, data: bytes) -> Experience:
        """Decode bytes from :meth:`serialize`; a multi-experience payload is an error."""
        exps = cls.deserialize_many(data)
        if len(exps) != 1:
            raise ValueError(
                f"expected a single-experience payload, got {len(exps)} experiences; "
                "use Experience.deserialize_many"
            )
        return exps[0]

    @classmethod
    def serialize_many(cls, experiences: Sequence[Experience]) -> bytes:
        """Encode experiences to bytes without pickle.

        The layout is :mod:`trinity.common.experience.serialization`'s: JSON metadata and
        one safetensors blob holding every tensor, packed per field. Raises ``TypeError``
        naming the key when a JSON field (``info``, ``metrics``, ``messages``, ...) holds a
        value JSON cannot represent exactly.
        """
        items = []
        for i, exp in enumerate(experiences):
            if not isinstance(exp, Experience):
                raise TypeError(f"experiences[{i}] is {type(exp).__name__}, not Experience")
            meta: dict[str, Any] = {"eid": _jsonable(exp.eid.to_dict(), "eid")}
            for name in _META_FIELDS:
                meta[name] = _jsonable(getattr(exp, name), name)
            meta["custom_fields"] = [
                {
                    "source_field": cf.source_field,
                    "destination_field": cf.destination_field,
                    "data_type": str(cf.data_type).removeprefix("torch."),
                }
                for cf in exp.custom_fields
            ]
            tensors = {
                name: value for name in _TENSOR_FIELDS if (value := getattr(exp, name)) is not None
            }
            if exp.multi_modal_inputs is None:
                meta["multi_modal_input_keys"] = None
            else:
                meta["multi_modal_input_keys"] = list(exp.multi_modal_inputs)
                for key, value in exp.multi_modal_inputs.items():
                    tensors[f"mm:{key}"] = value
            items.append((meta, tensors))
        return pack(items)

    @classmethod
    def deserialize_many(cls, data: bytes) -> list[Experience]:
        """Decode bytes from :meth:`serialize_many` (or :meth:`serialize`)."""
        out: list[Experience] = []
        for item, tensors in unpack(data):
            kwargs: dict[str, Any] = {name: item.get(name) for name in _META_FIELDS}
            kwargs["eid"] = EID.from_dict(item["eid"])
            kwargs["custom_fields"] = [
                CustomField(
                    source_field=cf["source_field"],
                    destination_field=cf["destination_field"],
                    data_type=_dtype_from_name(cf["data_type"]),
                )
                for cf in item.get("custom_fields") or []
            ]
            for name in _TENSOR_FIELDS:
                kwargs[name] = tensors.get(name)
            mm_keys = item.get("multi_modal_input_keys")
            kwargs["multi_modal_inputs"] = (
                None if mm_keys is None else {k: tensors[f"mm:{k}"] for k in mm_keys}
            )
            out.append(cls(**kwargs))
        return out


def serialize_experiences(experiences: Sequence[Experience]) -> bytes:
    """Module-level alias of :meth:`Experience.serialize_many`."""
    return Experience.serialize_many(experiences)


def deserialize_experiences(data: bytes) -> list[Experience]:
    """Module-level alias of :meth:`Experience.deserialize_many`."""
    return Experience.deserialize_many(data)
