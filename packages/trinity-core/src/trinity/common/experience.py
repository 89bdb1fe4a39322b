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
"""

from __future__ import annotations

import json
import math
import struct
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Union

import numpy as np
import torch
from safetensors.torch import load as _st_load
from safetensors.torch import save as _st_save
from torch import Tensor

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

    def __post_init__(self) -> None:  # noqa: C901 - one linear list of field checks
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

        # kind
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

        Layout: ``b"TRXJ"`` | version u8 | JSON length u64 LE | safetensors length u64 LE |
        UTF-8 JSON metadata | safetensors blob. Tensors are keyed ``"{index}:{field}"``
        (``"{index}:mm:{key}"`` for multi-modal inputs). Raises ``TypeError`` naming the
        key when a JSON field (``info``, ``metrics``, ``messages``, ...) holds a value
        JSON cannot represent exactly.
        """
        items: list[dict[str, Any]] = []
        tensors: dict[str, Tensor] = {}
        seen: set[int] = set()
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
            for name in _TENSOR_FIELDS:
                value = getattr(exp, name)
                if value is not None:
                    tensors[f"{i}:{name}"] = _detached_owned(value, seen)
            if exp.multi_modal_inputs is None:
                meta["multi_modal_input_keys"] = None
            else:
                meta["multi_modal_input_keys"] = list(exp.multi_modal_inputs)
                for key, value in exp.multi_modal_inputs.items():
                    tensors[f"{i}:mm:{key}"] = _detached_owned(value, seen)
            items.append(meta)
        meta_bytes = json.dumps(
            {"version": _SER_VERSION, "items": items}, ensure_ascii=False, allow_nan=True
        ).encode("utf-8")
        tensor_bytes = _st_save(tensors)
        header = _SER_MAGIC + struct.pack("<BQQ", _SER_VERSION, len(meta_bytes), len(tensor_bytes))
        return header + meta_bytes + tensor_bytes

    @classmethod
    def deserialize_many(cls, data: bytes) -> list[Experience]:
        """Decode bytes from :meth:`serialize_many` (or :meth:`serialize`)."""
        data = bytes(data)
        head = len(_SER_MAGIC) + struct.calcsize("<BQQ")
        if len(data) < head or not data.startswith(_SER_MAGIC):
            raise ValueError("not a Trinity experience payload (bad magic)")
        version, meta_len, tensor_len = struct.unpack("<BQQ", data[len(_SER_MAGIC) : head])
        if version != _SER_VERSION:
            raise ValueError(
                f"unsupported experience payload version {version}, expected {_SER_VERSION}"
            )
        if head + meta_len + tensor_len != len(data):
            raise ValueError(
                f"corrupt experience payload: header announces {head + meta_len + tensor_len} "
                f"bytes, got {len(data)}"
            )
        meta = json.loads(data[head : head + meta_len].decode("utf-8"))
        tensors = _st_load(data[head + meta_len :])
        out: list[Experience] = []
        for i, item in enumerate(meta["items"]):
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
                kwargs[name] = tensors.get(f"{i}:{name}")
            mm_keys = item.get("multi_modal_input_keys")
            kwargs["multi_modal_inputs"] = (
                None if mm_keys is None else {k: tensors[f"{i}:mm:{k}"] for k in mm_keys}
            )
            out.append(cls(**kwargs))
        return out


_SER_MAGIC = b"TRXJ"
_SER_VERSION = 1


def serialize_experiences(experiences: Sequence[Experience]) -> bytes:
    """Module-level alias of :meth:`Experience.serialize_many`."""
    return Experience.serialize_many(experiences)


def deserialize_experiences(data: bytes) -> list[Experience]:
    """Module-level alias of :meth:`Experience.deserialize_many`."""
    return Experience.deserialize_many(data)


def _detached_owned(t: Tensor, seen: set[int]) -> Tensor:
    """A contiguous CPU tensor that owns its whole storage (safetensors refuses views
    and tensors that share memory)."""
    t = t.detach().cpu().contiguous()
    storage = t.untyped_storage()
    ptr = storage.data_ptr()
    if (ptr in seen and t.numel() > 0) or storage.nbytes() != t.numel() * t.element_size():
        t = t.clone()
        ptr = t.untyped_storage().data_ptr()
    if t.numel() > 0:
        seen.add(ptr)
    return t


def _dtype_from_name(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown torch dtype {name!r} in payload")
    return dtype


def _jsonable(value: Any, path: str) -> Any:
    """Return ``value`` as plain JSON types, or raise ``TypeError`` naming ``path``.

    Numpy scalars become Python scalars and tuples become lists (the only lossy
    conversions); dict keys must be strings because JSON would silently stringify them.
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return value  # Python's json round-trips NaN/Infinity
        return float(value)
    if isinstance(value, np.generic) and isinstance(value.item(), (bool, int, float, str)):
        return value.item()
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(
                    f"{path} has a non-string key {k!r} ({type(k).__name__}); "
                    "only string keys can be serialized"
                )
            out[k] = _jsonable(v, f"{path}[{k!r}]")
        return out
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, f"{path}[{j}]") for j, v in enumerate(value)]
    raise TypeError(
        f"{path} holds a {type(value).__name__}, which cannot be serialized as JSON "
        "(experiences are serialized without pickle; store tensors in tensor fields and "
        "keep info/metrics/messages to str, int, float, bool, None, list and dict)"
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

    mm = None
    if any(e.multi_modal_inputs is not None for e in exps):
        if not all(e.multi_modal_inputs is not None for e in exps):
            raise ValueError("multi_modal_inputs is set on some experiences but not all")
        keys = list(exps[0].multi_modal_inputs)  # type: ignore[arg-type]
        mm = {k: [e.multi_modal_inputs[k] for e in exps] for k in keys}  # type: ignore[index]

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


#: Trinity-RFT style module-level name for :func:`collate_experiences`.
gather_experiences = collate_experiences


def __getattr__(name: str) -> Any:
    # Resolved on demand: the helpers import ``datasets`` (not a core dependency) when run.
    if name in ("to_hf_datasets", "from_hf_datasets"):
        from trinity.common import experience_hf

        return getattr(experience_hf, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
