"""Tests for trinity.common.experience: EID, Experience, group_by, serialization, collate."""

from __future__ import annotations

import json
import math
import struct

import numpy as np
import pytest
import torch

from trinity.common.experience import (
    EID,
    GROUP_ID_TYPES,
    CustomField,
    Experience,
    Experiences,
    InvalidExperienceError,
    collate_experiences,
    deserialize_experiences,
    gather_experiences,
    group_by,
    serialize_experiences,
    split_dpo_experience_to_single_turn,
)


def _single(prompt, response, **kw) -> Experience:
    return Experience(tokens=list(prompt) + list(response), prompt_length=len(prompt), **kw)


def assert_same_experience(a: Experience, b: Experience) -> None:
    """Field-by-field equality, including tensor dtypes and None-ness."""
    for name in (
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
    ):
        x, y = getattr(a, name), getattr(b, name)
        if x is None or y is None:
            assert x is None and y is None, name
            continue
        assert x.dtype == y.dtype, name
        assert x.shape == y.shape, name
        assert torch.equal(x, y), name
    for name in (
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
        "custom_fields",
    ):
        assert getattr(a, name) == getattr(b, name), name
    assert a.eid == b.eid
    assert a.eid.to_dict() == b.eid.to_dict()
    if a.multi_modal_inputs is None or b.multi_modal_inputs is None:
        assert a.multi_modal_inputs is None and b.multi_modal_inputs is None
    else:
        assert a.multi_modal_inputs.keys() == b.multi_modal_inputs.keys()
        for k in a.multi_modal_inputs:
            assert a.multi_modal_inputs[k].dtype == b.multi_modal_inputs[k].dtype
            assert torch.equal(a.multi_modal_inputs[k], b.multi_modal_inputs[k])


# ------------------------------------------------------------------------------ EID


class TestEID:
    def test_id_strings(self):
        eid = EID(batch=3, task=7, run=2, step=5, suffix="abc")
        assert eid.uid == "3/7/2/5/abc"
        assert eid.sid == "3/7/5"
        assert eid.rid == "3/7/2"
        assert eid.tid == "3/7"
        assert str(eid) == "3/7/2/5/abc"

    def test_string_batch_and_defaults(self):
        eid = EID(batch="eval_gsm8k", task=0)
        assert eid.run == 0 and eid.step == 0
        assert eid.tid == "eval_gsm8k/0"
        assert eid.uid == f"eval_gsm8k/0/0/0/{eid.suffix}"

    def test_suffix_unique_by_default(self):
        suffixes = {EID().suffix for _ in range(1000)}
        assert len(suffixes) == 1000
        assert EID(batch=1, task=1).uid != EID(batch=1, task=1).uid

    def test_hashable_and_value_equality(self):
        a = EID(batch=1, task=2, run=3, step=4, suffix="x")
        b = EID(batch=1, task=2, run=3, step=4, suffix="x")
        assert a == b and hash(a) == hash(b)
        assert len({a, b}) == 1
        assert {a: 1}[b] == 1

    def test_dict_round_trip(self):
        eid = EID(batch=1, task="t", run=3, step=4, suffix="s")
        d = eid.to_dict()
        assert d == {"batch": 1, "task": "t", "run": 3, "step": 4, "suffix": "s"}
        assert json.loads(json.dumps(d)) == d
        assert EID.from_dict(d) == eid
        with pytest.raises(ValueError, match="unknown keys"):
            EID.from_dict({"batch": 1, "bogus": 2})

    def test_repr_mentions_fields(self):
        r = repr(EID(batch=1, task=2, run=3, step=4, suffix="zz"))
        assert r == "EID(batch=1, task=2, run=3, step=4, uuid=zz)"  # Trinity-RFT's format


# ----------------------------------------------------------------------- Experience


class TestExperienceConstruction:
    def test_guide_style_construction_and_default_action_mask(self):
        exp = Experience(tokens=[1, 2, 3, 4, 5], prompt_length=2, reward=1, logprobs=[-1, -2, -3])
        assert exp.experience_type == "single_turn"
        assert exp.tokens.dtype == torch.int64
        assert exp.logprobs.dtype == torch.float32
        assert exp.reward == 1.0 and isinstance(exp.reward, float)
        assert exp.action_mask.dtype == torch.bool
        assert exp.action_mask.tolist() == [True, True, True]
        assert exp.response_length == 3
        assert exp.prompt_tokens.tolist() == [1, 2]
        assert exp.response_tokens.tolist() == [3, 4, 5]
        assert isinstance(exp.eid, EID)
        assert exp.model_version is None
        assert exp.info == {} and exp.metrics == {}

    def test_positional_construction_is_rejected(self):
        with pytest.raises(TypeError):
            Experience(EID(), [1, 2, 3])  # type: ignore[misc]

    def test_numpy_and_int32_inputs_are_converted(self):
        exp = Experience(
            tokens=np.array([1, 2, 3], dtype=np.int32),
            prompt_length=np.int64(1),
            logprobs=np.array([-0.5, -0.25]),
        )
        assert exp.tokens.dtype == torch.int64
        assert exp.logprobs.dtype == torch.float32
        assert exp.prompt_length == 1 and type(exp.prompt_length) is int
        exp2 = Experience(tokens=torch.tensor([1, 2, 3], dtype=torch.int32), prompt_length=1)
        assert exp2.tokens.dtype == torch.int64

    def test_float_tensor_dtype_is_kept(self):
        lp = torch.tensor([-1.0, -2.0], dtype=torch.bfloat16)
        exp = Experience(tokens=[1, 2, 3], prompt_length=1, logprobs=lp)
        assert exp.logprobs.dtype == torch.bfloat16

    def test_prompt_truncated_gets_zero_action_mask(self):
        exp = Experience(
            tokens=[1, 2, 3, 4],
            prompt_length=3,
            logprobs=[0.0],
            truncate_status="prompt_truncated",
            reward=0.0,
        )
        assert exp.action_mask.tolist() == [False]

    def test_multi_turn_is_inferred_from_action_mask(self):
        exp = Experience(tokens=[1, 2, 3, 4, 5], prompt_length=1, action_mask=[1, 0, 0, 1])
        assert exp.experience_type == "multi_turn"
        assert exp.action_mask.tolist() == [True, False, False, True]
        int_mask = torch.tensor([1, 1, 0, 1], dtype=torch.int32)
        exp2 = Experience(tokens=[1, 2, 3, 4, 5], prompt_length=1, action_mask=int_mask)
        assert exp2.action_mask.dtype == torch.int32

    def test_dpo_experience(self):
        exp = Experience(tokens=[1, 2, 3], prompt_length=1, chosen=[4, 5], rejected=[6])
        assert exp.experience_type == "dpo"
        assert exp.prompt_length == 3  # tokens hold the prompt only
        assert exp.response_length == 0
        assert exp.chosen.dtype == torch.int64 and exp.rejected.tolist() == [6]
        assert exp.action_mask is None

    def test_eid_from_dict(self):
        exp = Experience(tokens=[1, 2], eid={"batch": 1, "task": 2, "run": 0, "step": 0})
        assert exp.eid.tid == "1/2"


class TestExperienceValidation:
    @pytest.mark.parametrize(
        "name", ["logprobs", "advantages", "returns", "token_level_reward", "teacher_logprobs"]
    )
    def test_response_field_length(self, name):
        with pytest.raises(ValueError, match=rf"{name} has length 2, expected 3"):
            Experience(tokens=[1, 2, 3, 4, 5], prompt_length=2, **{name: [0.0, 0.0]})

    def test_action_mask_length(self):
        with pytest.raises(ValueError, match=r"action_mask has length 6, expected 4"):
            Experience(tokens=[1, 2, 3, 4, 5], prompt_length=1, action_mask=[1] * 6)

    def test_full_length_fields_are_trimmed_to_the_response(self):
        # Trinity-RFT takes per-token fields over the whole sequence; we keep the response part
        exp = Experience(
            tokens=[1, 2, 3, 4, 5],
            prompt_length=2,
            action_mask=torch.tensor([0.0, 0.0, 1.0, 0.0, 1.0]),  # float 0/1 mask
            logprobs=[0.0, 0.0, -0.1, -0.2, -0.3],
        )
        assert exp.action_mask.tolist() == [True, False, True]
        assert exp.logprobs.tolist() == pytest.approx([-0.1, -0.2, -0.3])
        with pytest.raises(ValueError, match="only 0 and 1"):
            Experience(tokens=[1, 2, 3], action_mask=torch.tensor([0.5, 1.0]))

    @pytest.mark.parametrize("prompt_length", [0, -1, 6])
    def test_prompt_length_bounds(self, prompt_length):
        with pytest.raises(ValueError, match=rf"prompt_length is {prompt_length}, expected"):
            Experience(tokens=[1, 2, 3, 4, 5], prompt_length=prompt_length)

    def test_single_turn_needs_a_response(self):
        with pytest.raises(ValueError, match=r"tokens has length 3, expected more than"):
            Experience(tokens=[1, 2, 3], prompt_length=3)

    def test_bad_truncate_status(self):
        with pytest.raises(ValueError, match="truncate_status"):
            Experience(tokens=[1, 2], truncate_status="cut")

    def test_response_truncated_is_accepted(self):
        exp = Experience(tokens=[1, 2], truncate_status="response_truncated")
        assert exp.truncate_status == "response_truncated"

    def test_tokens_must_be_1d_ints(self):
        with pytest.raises(ValueError, match=r"tokens must be 1-D"):
            Experience(tokens=[[1, 2], [3, 4]], prompt_length=1)
        with pytest.raises(ValueError, match="non-integral value 1.5"):
            Experience(tokens=torch.tensor([1.0, 1.5]), prompt_length=1)
        # whole-number floats are token ids (Trinity-RFT's tests use torch.zeros(5))
        exp = Experience(tokens=torch.zeros(5), prompt_length=2)
        assert exp.tokens.dtype == torch.int64 and exp.tokens.tolist() == [0] * 5

    def test_errors_are_assertion_errors_too(self):
        """Trinity-RFT checks with ``assert``; code catching AssertionError keeps working."""
        with pytest.raises(AssertionError):
            Experience(tokens=[1, 2, 3], prompt_length=0)
        assert issubclass(InvalidExperienceError, ValueError)

    def test_dpo_needs_both_halves(self):
        with pytest.raises(ValueError, match="chosen and rejected"):
            Experience(tokens=[1, 2], chosen=[3])

    def test_bad_experience_type(self):
        with pytest.raises(ValueError, match="experience_type"):
            Experience(tokens=[1, 2], experience_type="rlhf")

    def test_to_dict_summary(self):
        exp = Experience(
            tokens=[1, 2, 3], prompt_length=1, reward=0.5, prompt_text="q", response_text="a"
        )
        d = exp.to_dict()
        assert d["type"] == "single_turn"
        assert d["prompt_length"] == 1 and d["response_length"] == 2
        assert d["reward"] == 0.5 and d["prompt_text"] == "q" and d["response_text"] == "a"
        assert "messages" not in d and "truncate_status" not in d


# ------------------------------------------------------------------------- group_by


def _grouping_fixture():
    spec = [(0, 0, 0, 0), (0, 0, 1, 0), (0, 1, 0, 0), (0, 0, 0, 1), (1, 0, 0, 0), (0, 0, 1, 1)]
    return [
        Experience(tokens=[1, 2], eid=EID(batch=b, task=t, run=r, step=s, suffix=str(i)))
        for i, (b, t, r, s) in enumerate(spec)
    ]


def _suffixes(groups):
    return {k: [e.eid.suffix for e in v] for k, v in groups.items()}


class TestGroupBy:
    def test_task(self):
        groups = group_by(_grouping_fixture(), "task")
        assert _suffixes(groups) == {"0/0": ["0", "1", "3", "5"], "0/1": ["2"], "1/0": ["4"]}
        assert list(groups) == ["0/0", "0/1", "1/0"]

    def test_run(self):
        groups = group_by(_grouping_fixture(), "run")
        assert _suffixes(groups) == {
            "0/0/0": ["0", "3"],
            "0/0/1": ["1", "5"],
            "0/1/0": ["2"],
            "1/0/0": ["4"],
        }

    def test_step(self):
        groups = group_by(_grouping_fixture(), "step")
        assert _suffixes(groups) == {
            "0/0/0": ["0", "1"],
            "0/1/0": ["2"],
            "0/0/1": ["3", "5"],
            "1/0/0": ["4"],
        }

    def test_batch(self):
        groups = group_by(_grouping_fixture(), "batch")
        assert _suffixes(groups) == {"0": ["0", "1", "2", "3", "5"], "1": ["4"]}

    def test_bad_id_type(self):
        with pytest.raises(ValueError, match="Unknown id_type") as info:
            group_by(_grouping_fixture(), "uid")  # type: ignore[arg-type]
        for allowed in GROUP_ID_TYPES:
            assert allowed in str(info.value)

    def test_empty(self):
        assert group_by([], "task") == {}


# -------------------------------------------------------------------- serialization


def _full_experience() -> Experience:
    big = torch.arange(20, dtype=torch.float32)
    return Experience(
        eid=EID(batch=4, task="t1", run=2, step=1, suffix="feed"),
        tokens=[5, 6, 7, 8, 9, 10],
        prompt_length=2,
        logprobs=big[3:7].to(torch.bfloat16),  # a view-derived tensor, non-default dtype
        reward=0.75,
        token_level_reward=[0.0, 0.0, 0.0, 0.75],
        advantages=torch.tensor([1.0, 1.0, 1.0, 1.0], dtype=torch.float64),
        returns=big[:4],  # a view of a larger storage
        truncate_status="response_truncated",
        info={"tag": "x", "n": 3, "nested": {"a": [1, 2.5, None, True]}, "nan": float("nan")},
        metrics={"acc": 1.0, "len": 4},
        response_text="hello",
        prompt_text="hi",
        action_mask=torch.tensor([1, 0, 1, 1], dtype=torch.int32),
        messages=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello", "tool_calls": []},
        ],
        tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
        multi_modal_inputs={"pixel_values": torch.ones(2, 3), "grid": [[1, 2, 3]]},
        teacher_logprobs=[-0.1, -0.2, -0.3, -0.4],
        routed_experts=torch.zeros(5, 2, 2, dtype=torch.uint8),
        custom_fields=[CustomField("n", "n_tensor", torch.int32)],
        model_version=17,
    )


class TestSerialization:
    def test_round_trip_full(self):
        exp = _full_experience()
        data = exp.serialize()
        assert isinstance(data, bytes) and data.startswith(b"TRXJ")
        back = Experience.deserialize(data)
        # NaN != NaN, so check it separately and compare the rest exactly
        assert math.isnan(back.info.pop("nan"))
        exp.info.pop("nan")
        assert_same_experience(exp, back)
        assert back.logprobs.dtype == torch.bfloat16
        assert back.advantages.dtype == torch.float64
        assert back.action_mask.dtype == torch.int32
        assert back.experience_type == "multi_turn"

    def test_round_trip_minimal_keeps_nones(self):
        exp = Experience(tokens=[1, 2, 3], prompt_length=1)
        back = Experience.deserialize(exp.serialize())
        assert_same_experience(exp, back)
        for name in ("logprobs", "reward", "advantages", "returns", "messages", "chosen"):
            assert getattr(back, name) is None, name
        assert back.multi_modal_inputs is None
        # the default action mask was stored but the kind stays single-turn
        assert back.experience_type == "single_turn"

    def test_round_trip_many_with_dpo_and_multi_turn(self):
        exps = [
            _full_experience(),
            Experience(tokens=[1, 2, 3], prompt_length=2, reward=None, logprobs=[-0.5]),
            Experience(
                tokens=[1, 2],
                chosen=[3, 4, 5],
                rejected=[6],
                chosen_messages=[{"role": "assistant", "content": "good"}],
                rejected_messages=[{"role": "assistant", "content": "bad"}],
                reward=1.0,
            ),
            Experience(tokens=[9, 9, 9, 9], prompt_length=1, action_mask=[True, False, True]),
        ]
        exps[0].info.pop("nan")
        data = Experience.serialize_many(exps)
        back = Experience.deserialize_many(data)
        assert len(back) == 4
        for a, b in zip(exps, back, strict=True):
            assert_same_experience(a, b)
        assert back[2].experience_type == "dpo"
        assert back[2].chosen.tolist() == [3, 4, 5]
        assert back[2].chosen_messages == [{"role": "assistant", "content": "good"}]
        # module-level aliases
        assert len(deserialize_experiences(serialize_experiences(exps))) == 4

    def test_shared_storage_tensors(self):
        shared = torch.tensor([0.5, 0.25])
        exp = Experience(tokens=[1, 2, 3], prompt_length=1, logprobs=shared, returns=shared)
        back = Experience.deserialize(exp.serialize())
        assert torch.equal(back.logprobs, shared) and torch.equal(back.returns, shared)

    def test_empty_list(self):
        assert Experience.deserialize_many(Experience.serialize_many([])) == []

    def test_no_pickle_in_payload(self):
        data = _single([1], [2], info={"k": "v"}).serialize()
        meta_len = struct.unpack("<BQQ", data[4:21])[1]
        meta = json.loads(data[21 : 21 + meta_len])  # metadata is plain JSON
        assert meta["items"][0]["info"] == {"k": "v"}

    def test_non_json_info_names_the_key(self):
        exp = _single([1], [2], info={"ok": 1, "bad": object()})
        with pytest.raises(TypeError, match=r"info\['bad'\]"):
            exp.serialize()
        exp = _single([1], [2], info={"t": torch.ones(2)})
        with pytest.raises(TypeError, match=r"info\['t'\].*Tensor"):
            exp.serialize()
        exp = _single([1], [2], info={1: "int key"})
        with pytest.raises(TypeError, match="non-string key"):
            exp.serialize()
        exp = _single([1], [2], metrics={"m": {1, 2}})
        with pytest.raises(TypeError, match=r"metrics\['m'\]"):
            exp.serialize()

    def test_numpy_scalars_become_python(self):
        exp = _single([1], [2], metrics={"acc": np.float32(0.5), "n": np.int64(3)})
        back = Experience.deserialize(exp.serialize())
        assert back.metrics == {"acc": 0.5, "n": 3}
        assert type(back.metrics["n"]) is int

    def test_tensors_are_packed_per_field(self):
        """A batch is a handful of safetensors entries, not one per tensor (the cost of
        encoding was per entry)."""
        from safetensors.torch import load

        exps = [_single([1, 2], [3, 4, 5], logprobs=[-0.1, -0.2, -0.3]) for _ in range(50)]
        data = Experience.serialize_many(exps)
        _, meta_len, _ = struct.unpack("<BQQ", data[4:21])
        entries = load(data[21 + meta_len :])
        assert len(entries) < 10
        assert entries["tokens|int64"].numel() == 50 * 5

    @pytest.mark.parametrize(
        "dtype",
        [
            torch.bool,
            torch.uint8,
            torch.int8,
            torch.int32,
            torch.int64,
            torch.float16,
            torch.float32,
            torch.float64,
            torch.bfloat16,
        ],
    )
    def test_tensor_bytes_are_safetensors_own(self, dtype):
        """The numpy writer used where dtypes allow writes exactly safetensors' torch bytes
        (bfloat16, which numpy lacks, goes through the torch writer)."""
        from safetensors.torch import save

        from trinity.common.experience.serialization import _st_save

        flat = {
            "a|x": (torch.arange(12) % 3).to(dtype),
            "b|y": torch.ones(3, dtype=dtype),
            "c|int64": torch.arange(5),
        }
        assert _st_save(flat) == save(flat)
        exp = _single([1, 2], [3], logprobs=[-0.5])
        exp.logprobs = exp.logprobs.to(dtype) if dtype.is_floating_point else exp.logprobs
        back = Experience.deserialize(exp.serialize())
        assert back.logprobs.dtype == exp.logprobs.dtype
        assert torch.equal(back.logprobs, exp.logprobs)

    def test_decoded_tensors_are_writable_and_independent(self):
        exps = Experience.deserialize_many(
            Experience.serialize_many([_single([1], [2, 3]), _single([1], [4, 5])])
        )
        exps[0].tokens[0] = 9  # in place, as advantage functions do
        assert exps[0].tokens.tolist() == [9, 2, 3] and exps[1].tokens.tolist() == [1, 4, 5]

    def test_version_1_payloads_still_read(self):
        """Buffers written before the packed layout (one entry per tensor) stay readable."""
        from safetensors.torch import save

        exp = _single([1, 2], [3], logprobs=[-0.5], reward=1.0, info={"k": "v"})
        item = {"eid": exp.eid.to_dict(), "custom_fields": [], "multi_modal_input_keys": None}
        item.update({name: getattr(exp, name) for name in ("prompt_length", "reward", "info")})
        meta = json.dumps({"version": 1, "items": [item]}).encode()
        blob = save({"0:tokens": exp.tokens, "0:logprobs": exp.logprobs})
        data = b"TRXJ" + struct.pack("<BQQ", 1, len(meta), len(blob)) + meta + blob
        back = Experience.deserialize(data)
        assert back.tokens.tolist() == [1, 2, 3] and back.logprobs.tolist() == [-0.5]
        assert back.info == {"k": "v"} and back.reward == 1.0 and back.eid == exp.eid

    def test_a_layout_that_does_not_match_its_tensors_is_corrupt(self):
        data = _single([1, 2], [3]).serialize()
        _, meta_len, tensor_len = struct.unpack("<BQQ", data[4:21])
        meta = json.loads(data[21 : 21 + meta_len])
        meta["items"][0]["tensors"]["tokens"][1] = [7]  # 7 tokens announced, 3 stored
        new_meta = json.dumps(meta).encode()
        bad = data[:4] + struct.pack("<BQQ", 2, len(new_meta), tensor_len)
        bad += new_meta + data[21 + meta_len :]
        with pytest.raises(ValueError, match="corrupt experience payload"):
            Experience.deserialize_many(bad)

    def test_bad_payloads(self):
        with pytest.raises(ValueError, match="bad magic"):
            Experience.deserialize_many(b"\x80\x04garbage")
        data = _single([1], [2]).serialize()
        with pytest.raises(ValueError, match="corrupt"):
            Experience.deserialize_many(data[:-1])
        many = Experience.serialize_many([_single([1], [2]), _single([1], [3])])
        with pytest.raises(ValueError, match="deserialize_many"):
            Experience.deserialize(many)


# -------------------------------------------------------------------------- collate


def _three():
    e0 = _single([1, 2], [3, 4, 5], logprobs=[-0.1, -0.2, -0.3], reward=1.0)
    e1 = _single([6, 7, 8, 9], [10], logprobs=[-0.4], reward=0.0)
    e2 = Experience(
        tokens=[11, 12, 13, 14, 15],
        prompt_length=1,
        action_mask=[1, 0, 0, 1],
        logprobs=[-0.5, -0.6, -0.7, -0.8],
        reward=0.5,
        model_version=3,
    )
    return [e0, e1, e2]


class TestCollate:
    def test_exact_padding(self):
        exps = _three()
        b = collate_experiences(exps, pad_token_id=99)
        assert isinstance(b, Experiences)
        assert b.prompt_length == 4 and b.response_length == 4 and b.batch_size == 3
        assert b.tokens.dtype == torch.int64
        assert b.tokens.tolist() == [
            [99, 99, 1, 2, 3, 4, 5, 99],
            [6, 7, 8, 9, 10, 99, 99, 99],
            [99, 99, 99, 11, 12, 13, 14, 15],
        ]
        assert b.attention_mask.dtype == torch.bool
        assert b.attention_mask.int().tolist() == [
            [0, 0, 1, 1, 1, 1, 1, 0],
            [1, 1, 1, 1, 1, 0, 0, 0],
            [0, 0, 0, 1, 1, 1, 1, 1],
        ]
        assert b.position_ids.dtype == torch.int64
        assert b.position_ids.tolist() == [
            [0, 0, 0, 1, 2, 3, 4, 4],
            [0, 1, 2, 3, 4, 4, 4, 4],
            [0, 0, 0, 0, 1, 2, 3, 4],
        ]
        assert b.action_mask.dtype == torch.bool
        assert b.action_mask.int().tolist() == [[1, 1, 1, 0], [1, 0, 0, 0], [1, 0, 0, 1]]
        expected_lp = torch.tensor(
            [[-0.1, -0.2, -0.3, 0.0], [-0.4, 0.0, 0.0, 0.0], [-0.5, -0.6, -0.7, -0.8]]
        )
        assert torch.equal(b.logprobs, expected_lp)
        assert torch.equal(b.rewards, torch.tensor([1.0, 0.0, 0.5]))
        assert b.model_versions.tolist() == [-1, -1, 3]
        assert [e.uid for e in b.eids] == [e.eid.uid for e in exps]
        assert b.prompts.tolist()[1] == [6, 7, 8, 9]
        assert b.responses.tolist()[0] == [3, 4, 5, 99]
        assert b.attention_masks is b.attention_mask and b.action_masks is b.action_mask

    def test_response_alignment(self):
        """Column P + j of tokens is response token j, matching logprobs[:, j]."""
        exps = _three()
        b = collate_experiences(exps)
        p = b.prompt_length
        for i, exp in enumerate(exps):
            r = exp.response_length
            assert torch.equal(b.tokens[i, p : p + r], exp.response_tokens)
            assert torch.equal(b.logprobs[i, :r], exp.logprobs)
            assert torch.equal(b.action_mask[i, :r], exp.action_mask.bool())
            assert not b.action_mask[i, r:].any()
            assert b.attention_mask[i, p : p + r].all() and not b.attention_mask[i, p + r :].any()
            assert torch.equal(b.tokens[i, p - exp.prompt_length : p], exp.prompt_tokens)

    def test_optional_fields_are_none(self):
        b = collate_experiences([_single([1], [2]), _single([3, 4], [5, 6])])
        assert b.logprobs is None
        assert b.rewards is None
        assert b.token_level_rewards is None
        assert b.advantages is None
        assert b.returns is None
        assert b.teacher_logprobs is None
        assert b.multi_modal_inputs is None
        assert b.custom_fields == {}
        assert b.action_mask.tolist() == [[True, False], [True, True]]

    def test_optional_fields_present(self):
        e0 = _single(
            [1],
            [2, 3],
            advantages=[1.0, 2.0],
            returns=[3.0, 4.0],
            token_level_reward=[0.0, 1.0],
            teacher_logprobs=[-1.0, -2.0],
            info={"score": 7},
        )
        e1 = _single(
            [1, 2],
            [3],
            advantages=[5.0],
            returns=[6.0],
            token_level_reward=[2.0],
            teacher_logprobs=[-3.0],
            info={"score": 8},
        )
        b = collate_experiences(
            [e0, e1], custom_fields=[CustomField("score", "scores", torch.float32)]
        )
        assert b.advantages.tolist() == [[1.0, 2.0], [5.0, 0.0]]
        assert b.returns.tolist() == [[3.0, 4.0], [6.0, 0.0]]
        assert b.token_level_rewards.tolist() == [[0.0, 1.0], [2.0, 0.0]]
        assert b.teacher_logprobs.tolist() == [[-1.0, -2.0], [-3.0, 0.0]]
        assert b.custom_fields["scores"].dtype == torch.float32
        assert b.custom_fields["scores"].tolist() == [7.0, 8.0]

    def test_mixed_presence_raises(self):
        exps = [_single([1], [2], logprobs=[-1.0]), _single([1], [2])]
        with pytest.raises(ValueError, match=r"logprobs is set on 1 of 2"):
            collate_experiences(exps)

    def test_missing_reward_counts_as_zero_when_others_have_one(self):
        b = collate_experiences([_single([1], [2], reward=2.0), _single([1], [2])])
        assert b.rewards.tolist() == [2.0, 0.0]

    def test_dpo_ordering(self):
        p0 = Experience(tokens=[1, 2], chosen=[3, 4], rejected=[5], reward=1.0)
        p1 = Experience(tokens=[6], chosen=[7], rejected=[8, 9, 10], eid=EID(batch=0, task=1))
        b = collate_experiences([p0, p1], pad_token_id=0)
        assert b.batch_size == 4
        assert b.prompt_length == 2 and b.response_length == 3
        assert b.tokens.tolist() == [
            [1, 2, 3, 4, 0],  # chosen_0
            [1, 2, 5, 0, 0],  # rejected_0
            [0, 6, 7, 0, 0],  # chosen_1
            [0, 6, 8, 9, 10],  # rejected_1
        ]
        assert b.action_mask.int().tolist() == [[1, 1, 0], [1, 0, 0], [1, 0, 0], [1, 1, 1]]
        assert [e.tid for e in b.eids] == [p0.eid.tid, p0.eid.tid, "0/1", "0/1"]
        assert len({e.uid for e in b.eids}) == 4
        split = split_dpo_experience_to_single_turn([p0])
        assert [s.response_tokens.tolist() for s in split] == [[3, 4], [5]]

    def test_mixing_dpo_and_rl_raises(self):
        dpo = Experience(tokens=[1], chosen=[2], rejected=[3])
        with pytest.raises(ValueError, match="mix DPO"):
            collate_experiences([dpo, _single([1], [2])])

    def test_empty_raises(self):
        with pytest.raises(ValueError, match="empty"):
            collate_experiences([])

    def test_gather_of_nothing_is_an_empty_batch_and_custom_fields_read_as_attributes(self):
        empty = Experiences.gather_experiences([])  # Trinity-RFT's API: no error
        assert empty.batch_size == 0 and empty.eids == [] and empty.rewards.numel() == 0
        exps = [_single([1], [2], info={"a": 1.0}), _single([1, 2], [3], info={"a": 2})]
        batch = Experiences.gather_experiences(
            exps, custom_fields=[CustomField("a", "a", torch.float32)]
        )
        assert batch.a.tolist() == [1.0, 2.0]
        with pytest.raises(AttributeError, match="no attribute 'b'"):
            _ = batch.b

    def test_aliases_agree(self):
        exps = _three()
        a = collate_experiences(exps, pad_token_id=7)
        b = Experiences.gather_experiences(exps, pad_token_id=7)
        c = gather_experiences(exps, pad_token_id=7)
        for other in (b, c):
            assert torch.equal(a.tokens, other.tokens)
            assert torch.equal(a.logprobs, other.logprobs)

    def test_multi_modal_inputs_passed_per_row(self):
        e0 = _single([1], [2], multi_modal_inputs={"pixel_values": torch.ones(2, 2)})
        e1 = _single([1], [2], multi_modal_inputs={"pixel_values": torch.zeros(3, 2)})
        b = collate_experiences([e0, e1])
        assert [t.shape[0] for t in b.multi_modal_inputs["pixel_values"]] == [2, 3]

    def test_large_batch_matches_reference(self):

        gen = torch.Generator().manual_seed(0)
        exps = []
        for _ in range(512):
            p = int(torch.randint(1, 2048, (1,), generator=gen))
            r = int(torch.randint(1, 2048, (1,), generator=gen))
            exps.append(
                Experience(
                    tokens=torch.randint(1, 1000, (p + r,), generator=gen),
                    prompt_length=p,
                    logprobs=torch.randn(r, generator=gen),
                )
            )
        b = collate_experiences(exps)
        P, R = b.prompt_length, b.response_length
        for i in (0, 17, 511):
            e = exps[i]
            row = torch.cat(
                [
                    torch.zeros(P - e.prompt_length, dtype=torch.int64),
                    e.tokens,
                    torch.zeros(R - e.response_length, dtype=torch.int64),
                ]
            )
            assert torch.equal(b.tokens[i], row)
            assert int(b.attention_mask[i].sum()) == len(e.tokens)
            assert int(b.position_ids[i].max()) == len(e.tokens) - 1
