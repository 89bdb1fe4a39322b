"""Tests of the ModelWrapper contract, the chat-mask helper and the FakeModelWrapper double."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Dict, List

import openai
import pytest
import torch

from trinity.common.experience import Experience
from trinity.common.models import ChatTemplateError, ModelWrapper, tokenize_and_mask_messages
from trinity.common.models.testing import (
    FakeModelWrapper,
    FakeTokenizer,
    format_tool_call,
    parse_tool_calls,
)

TOK = FakeTokenizer()
U = TOK.token_id("<|user|>")
A = TOK.token_id("<|assistant|>")
END = TOK.token_id("<|end|>")
Q = [{"role": "user", "content": "2+2?"}]


def prompt_ids(messages, tools=None) -> List[int]:
    return TOK.apply_chat_template(messages, add_generation_prompt=True, tools=tools)


# --------------------------------------------------------------------------- contract
class MinimalEngine(ModelWrapper):
    """Implements only the three required hooks."""

    async def _chat(self, messages, **kwargs):
        return [Experience(tokens=[1, 2, 3], prompt_length=2, logprobs=[-0.5])] * kwargs["n"]

    async def _generate(self, prompt, **kwargs):
        return [Experience(tokens=[1, 2], prompt_length=1, logprobs=[-0.1], response_text=prompt)]

    async def _logprobs(self, tokens, temperature):
        return torch.full((len(tokens) - 1,), -1.0 / temperature)


def test_wrapper_implementing_nothing_is_refused_and_missing_operations_are_named():
    with pytest.raises(TypeError, match="implement at least one of"):
        ModelWrapper(model_path="m")

    class Nothing(ModelWrapper):
        pass

    with pytest.raises(TypeError, match="implement at least one of"):
        Nothing(model_path="m")

    class NoLogprobs(ModelWrapper):
        async def _chat(self, messages, **kwargs):
            return []

        async def _generate(self, prompt, **kwargs):
            return []

    with pytest.raises(NotImplementedError, match="_logprobs"):
        NoLogprobs(model_path="m").logprobs([1, 2, 3])

    m = MinimalEngine(model_path="some/model", temperature=0.5)
    assert m.model_path == m.model_name == "some/model"
    assert len(m.chat(Q, n=3)) == 3
    assert m.logprobs([5, 6, 7]).tolist() == [-2.0, -2.0]  # default temperature 0.5 used
    # optional hooks give clear errors
    with pytest.raises(NotImplementedError, match="_apply_chat_template"):
        m.convert_messages_to_experience([*Q, {"role": "assistant", "content": "4"}])
    with pytest.raises(ValueError, match="OpenAI API is not enabled"):
        m.get_openai_client()
    with pytest.raises(ValueError, match="not enabled"):
        m.extract_experience_from_history()


def test_sync_twins_outside_and_inside_a_running_loop():
    model = FakeModelWrapper(responses="ok")
    outside = model.chat(Q)
    assert outside[0].response_text == "ok"

    async def workflow_running_in_a_loop():
        # a sync workflow called from async code: the sync twin must not need the loop
        sync_res = model.chat(Q, n=2)
        sync_lp = model.logprobs(sync_res[0].tokens)
        async_res = await model.chat_async(Q, n=2)
        gen = await model.generate_async(["a", "b"])
        conv = await model.convert_messages_to_experience_async(
            [*Q, {"role": "assistant", "content": "ok"}]
        )
        return sync_res, sync_lp, async_res, gen, conv

    sync_res, sync_lp, async_res, gen, conv = asyncio.run(workflow_running_in_a_loop())
    assert [e.response_text for e in sync_res + async_res] == ["ok"] * 4
    assert torch.equal(sync_lp[sync_res[0].prompt_length - 1 :], sync_res[0].logprobs)
    assert len(gen) == 2 and conv.experience_type == "multi_turn"
    assert torch.equal(outside[0].tokens, sync_res[0].tokens)


def test_sync_call_from_the_bridge_loop_raises_instead_of_deadlocking():
    class Reentrant(FakeModelWrapper):
        async def _chat(self, messages, **kwargs):
            self.logprobs([1, 2, 3])  # sync call from a coroutine on the bridge loop
            return await super()._chat(messages, **kwargs)

    with pytest.raises(RuntimeError, match="deadlock"):
        Reentrant().chat(Q)


# --------------------------------------------------------------------------- chat / generate
def test_chat_with_n_and_temperature_returns_expected_tokens_and_records_calls():
    model = FakeModelWrapper(responses=["4", "four", "IV"], model_version=7)
    exps = model.chat(Q, n=3, temperature=0.7)
    p = prompt_ids(Q)
    assert p == [U, *b"2+2?", END, A]
    assert [e.response_text for e in exps] == ["4", "four", "IV"]
    for e, text in zip(exps, ["4", "four", "IV"], strict=True):
        assert isinstance(e, Experience)
        assert e.tokens.tolist() == p + list(text.encode()) + [END]
        assert e.prompt_length == len(p)
        assert e.logprobs.shape == (len(text) + 1,)
        assert e.logprobs.dtype == torch.float32
        assert bool((e.logprobs < 0).all())
        assert e.truncate_status is None
        assert e.model_version == 7
        assert e.prompt_text == TOK.decode(p)
    # the list is cycled across calls
    assert [e.response_text for e in model.chat(Q, n=2)] == ["4", "four"]
    call = model.calls_of("chat")[0]
    assert call.messages == Q and call.kwargs == {"n": 3, "temperature": 0.7}
    # temperature scales the logprobs, exactly as logprobs(temperature=...) reports them
    cold = model.logprobs(exps[0].tokens, temperature=0.7)[len(p) - 1 :]
    hot = model.logprobs(exps[0].tokens, temperature=1.0)[len(p) - 1 :]
    assert torch.equal(cold, exps[0].logprobs)
    assert torch.allclose(cold, hot / 0.7)


def test_generate_flattens_prompt_major_and_passes_kwargs_to_callable():
    seen: List[Dict[str, Any]] = []

    def reply(prompt, sample_index, temperature):
        seen.append({"temperature": temperature})
        return f"{prompt}-{sample_index}"

    model = FakeModelWrapper(responses=reply)
    exps = model.generate(["x", "y", "z"], n=2, temperature=0.3)
    assert [e.response_text for e in exps] == ["x-0", "x-1", "y-0", "y-1", "z-0", "z-1"]
    assert exps[2].tokens.tolist() == [*b"y", *b"y-0", END]
    assert exps[2].prompt_length == 1
    assert seen == [{"temperature": 0.3}] * 6
    assert model.calls_of("generate")[0].prompts == ["x", "y", "z"]


def test_default_reply_is_deterministic():
    a = FakeModelWrapper().chat(Q, n=2)
    b = FakeModelWrapper().chat(Q, n=2)
    assert [e.response_text for e in a] == ["Fake reply #0 to: 2+2?", "Fake reply #1 to: 2+2?"]
    assert all(torch.equal(x.logprobs, y.logprobs) for x, y in zip(a, b, strict=True))


def test_logprobs_consistency_and_shape():
    model = FakeModelWrapper(responses="the answer is 4")
    (exp,) = model.chat(Q, temperature=1.0)
    full = model.logprobs(exp.tokens.tolist(), temperature=1.0)
    assert full.shape == (len(exp.tokens) - 1,)
    assert torch.equal(full[exp.prompt_length - 1 :], exp.logprobs)
    assert bool((full < 0).all()) and bool((full >= -5.0).all())
    # depends on the context: same token after a different prefix scores differently
    assert model.logprobs([1, 9])[0] != model.logprobs([2, 9])[0]
    assert model.logprobs([7]).shape == (0,)


def test_max_tokens_truncation_and_prompt_truncation():
    model = FakeModelWrapper(responses="abcdef")
    (cut,) = model.chat(Q, max_tokens=3)
    assert cut.truncate_status == "response_truncated"
    assert cut.tokens.tolist()[cut.prompt_length :] == list(b"abc")
    assert cut.response_text == "abc" and cut.logprobs.shape == (3,)
    (fits,) = model.chat(Q, max_tokens=7)  # 6 bytes + <|end|>
    assert fits.truncate_status is None and fits.response_text == "abcdef"
    # defaults from the constructor; None in a call means "use the default"
    assert FakeModelWrapper(responses="abcdef", max_tokens=2).chat(Q, max_tokens=None)[
        0
    ].truncate_status == ("response_truncated")
    # stop strings cut the reply
    assert model.chat(Q, stop=["cd"])[0].response_text == "ab"
    # an overlong prompt yields masked-out dummy experiences
    short = FakeModelWrapper(responses="x", max_prompt_tokens=4)
    exps = short.chat(Q, n=2)
    assert [e.truncate_status for e in exps] == ["prompt_truncated"] * 2
    assert exps[0].prompt_length == 4 and exps[0].action_mask.tolist() == [False]


def test_kwargs_validation_and_unknown_kwargs(caplog):
    model = FakeModelWrapper(responses="x")
    with pytest.raises(ValueError, match="n must be a positive int"):
        model.chat(Q, n=0)
    with pytest.raises(ValueError, match="temperature"):
        model.chat(Q, temperature=-1)
    with pytest.raises(TypeError, match="list of"):
        model.chat("hello")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"\[prompt\]"):
        model.generate("hello")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        model.chat(Q, 4)  # type: ignore[misc]
    # unknown sampling keywords are ignored by engines (as in Trinity-RFT), with one warning
    with caplog.at_level(logging.WARNING, logger="trinity"):
        assert model.chat(Q, some_engine_specific_flag=True)[0].response_text == "x"
    assert "some_engine_specific_flag" in caplog.text
    assert model.calls[-1].kwargs == {"some_engine_specific_flag": True}


# --------------------------------------------------------------------------- conversations
TOOLS = [{"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}}]


def two_turn_conversation() -> List[Dict[str, Any]]:
    return [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "2+2?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "calc", "arguments": '{"expr": "2+2"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "4"},
        {"role": "assistant", "content": "It is 4."},
    ]


def test_convert_messages_to_experience_masks_exactly_the_assistant_tokens():
    model = FakeModelWrapper(model_version=3)
    msgs = two_turn_conversation()
    exp = model.convert_messages_to_experience(msgs, tools=TOOLS, temperature=1.0)

    # expected layout, built by hand from the template
    tools_part = TOK.encode("<|tools|>" + json.dumps(TOOLS, sort_keys=True) + "<|end|>")
    system = [TOK.token_id("<|system|>"), *b"Be brief.", END]
    user = [U, *b"2+2?", END]
    call_text = format_tool_call("calc", {"expr": "2+2"})
    turn1 = [*call_text.encode(), END]
    tool = [TOK.token_id("<|tool|>"), *b"4", END]
    turn2 = [*b"It is 4.", END]
    expected = tools_part + system + user + [A] + turn1 + tool + [A] + turn2
    assert exp.tokens.tolist() == expected

    prompt_len = len(tools_part + system + user) + 1
    assert exp.prompt_length == prompt_len
    mask = exp.action_mask.tolist()
    assert mask == [True] * len(turn1) + [False] * (len(tool) + 1) + [True] * len(turn2)
    assert sum(mask) == len(turn1) + len(turn2)
    assert exp.experience_type == "multi_turn"
    assert exp.logprobs.shape == (len(expected) - prompt_len,)
    assert torch.equal(exp.logprobs, model.token_logprobs(expected)[prompt_len - 1 :])
    assert exp.messages == msgs and exp.tools == TOOLS and exp.model_version == 3


def test_multi_turn_rollout_tokens_match_the_converted_conversation():
    """What chat() sampled is exactly what the conversation conversion re-tokenizes."""
    model = FakeModelWrapper(responses=[format_tool_call("calc", {"expr": "2+2"}), "It is 4."])
    msgs = [{"role": "user", "content": "2+2?"}]
    (first,) = model.chat(msgs, tools=TOOLS)
    content, calls = parse_tool_calls(first.response_text)
    assert content is None and calls == [{"name": "calc", "arguments": {"expr": "2+2"}}]
    msgs += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"type": "function", "function": {"name": "calc", "arguments": "{}"}}],
        }
    ]
    msgs[-1]["tool_calls"][0]["function"]["arguments"] = json.dumps(calls[0]["arguments"])
    msgs.append({"role": "tool", "content": "4"})
    (second,) = model.chat(msgs, tools=TOOLS)
    msgs.append({"role": "assistant", "content": second.response_text})
    conv = model.convert_messages_to_experience(msgs, tools=TOOLS)
    assert conv.tokens.tolist() == second.tokens.tolist()
    assert conv.tokens.tolist()[: len(first.tokens)] == first.tokens.tolist()
    # logprobs of the sampled assistant tokens agree with those reported at sampling time
    n2 = second.response_length
    assert torch.equal(conv.logprobs[-n2:], second.logprobs)
    assert torch.equal(conv.logprobs[: first.response_length], first.logprobs)


def test_utils_helper_on_prefix_stable_and_unstable_templates():
    def stable(messages, add_generation_prompt):
        ids = [0]
        for m in messages:
            ids += [{"user": 1, "assistant": 2}[m["role"]], len(m["content"]), 9]
        return ids + ([2] if add_generation_prompt else [])

    msgs = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "bye"},
        {"role": "assistant", "content": "ciao"},
    ]
    ids, mask, plen = tokenize_and_mask_messages(stable, msgs)
    assert ids.tolist() == [0, 1, 2, 9, 2, 5, 9, 1, 3, 9, 2, 4, 9]
    assert mask.tolist() == [False] * 5 + [True, True] + [False] * 4 + [True, True]
    assert plen == 5 and ids.dtype == torch.long and mask.dtype == torch.bool

    def drops_old_assistant_turns(messages, add_generation_prompt):
        # like templates that strip <think> from history: earlier turns are re-rendered
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        ids = []
        for i, m in enumerate(messages):
            if m["role"] == "assistant" and i < last_user:
                ids += [2, 9]
            else:
                ids += [{"user": 1, "assistant": 2}[m["role"]], len(m["content"]), 9]
        return ids + ([2] if add_generation_prompt else [])

    with pytest.raises(ChatTemplateError, match="not prefix-stable at assistant message #1"):
        tokenize_and_mask_messages(drops_old_assistant_turns, msgs)
    with pytest.raises(ValueError, match="without any assistant message"):
        tokenize_and_mask_messages(stable, msgs[:1])

    seen_tools = []

    def with_tools(messages, add_generation_prompt, tools=None):
        seen_tools.append(tools)
        return stable(messages, add_generation_prompt)

    tokenize_and_mask_messages(with_tools, msgs[:2], tools=TOOLS)
    assert all(t == TOOLS for t in seen_tools)


# --------------------------------------------------------------------------- OpenAI clients
def test_openai_client_through_mock_transport_and_history():
    model = FakeModelWrapper(responses=["yes", "no"], enable_history=True, model_version=2)
    client = model.get_openai_client()
    assert isinstance(client, openai.OpenAI)
    assert model.get_openai_client() is client
    model_id = client.models.list().data[0].id
    assert model_id == client.model_path == model.model_path

    resp = client.chat.completions.create(model=model_id, messages=Q, n=2, temperature=0.5)
    assert [c.message.content for c in resp.choices] == ["yes", "no"]
    assert [c.finish_reason for c in resp.choices] == ["stop", "stop"]
    p = prompt_ids(Q)
    assert resp.usage.prompt_tokens == len(p)
    assert resp.usage.completion_tokens == len("yes") + 1 + len("no") + 1
    # history recording asked for logprobs although the workflow did not
    assert len(resp.choices[0].logprobs.content) == 4
    assert resp.choices[0].logprobs.content[0].token == "y"

    hist = model.extract_experience_from_history()
    assert len(hist) == 2 and model.history == []
    for exp, text in zip(hist, ["yes", "no"], strict=True):
        assert exp.tokens.tolist() == p + list(text.encode()) + [END]
        assert exp.prompt_length == len(p) and exp.response_text == text
        assert exp.model_version == 2
        assert torch.equal(exp.logprobs, model.logprobs(exp.tokens, temperature=0.5)[len(p) - 1 :])
    call = model.calls_of("openai.chat.completions")[0]
    assert call.messages == Q and call.kwargs["n"] == 2 and call.kwargs["return_token_ids"]

    # chat() and generate() also feed the history; extraction without clearing keeps it
    model.chat(Q)
    model.generate(["p"], n=2)
    assert len(model.extract_experience_from_history(clear_history=False)) == 3
    assert len(model.extract_experience_from_history()) == 3
    assert model.extract_experience_from_history() == []


def test_openai_client_logprobs_truncation_errors_and_no_history():
    model = FakeModelWrapper(responses="abcdef")
    client = model.get_openai_client()
    resp = client.chat.completions.create(
        model=client.model_path, messages=Q, logprobs=True, top_logprobs=1, max_tokens=2
    )
    choice = resp.choices[0]
    assert choice.finish_reason == "length" and choice.message.content == "ab"
    lps = [c.logprob for c in choice.logprobs.content]
    p = prompt_ids(Q)
    assert lps == model.logprobs(p + list(b"ab")).tolist()[len(p) - 1 :]
    assert choice.logprobs.content[0].top_logprobs[0].token == "a"
    no_lp = client.chat.completions.create(model=client.model_path, messages=Q)
    assert no_lp.choices[0].logprobs is None
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="other-model", messages=Q)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=client.model_path, messages=Q, n=0)
    with pytest.raises(ValueError, match="not enabled"):
        model.extract_experience_from_history()


def test_openai_tool_call_reply():
    model = FakeModelWrapper(responses=format_tool_call("calc", {"expr": "2+2"}))
    client = model.get_openai_client()
    resp = client.chat.completions.create(model=client.model_path, messages=Q, tools=TOOLS)
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    call = choice.message.tool_calls[0]
    assert call.function.name == "calc" and json.loads(call.function.arguments) == {"expr": "2+2"}
    # without tools in the request the same reply is plain text
    plain = client.chat.completions.create(model=client.model_path, messages=Q)
    assert plain.choices[0].message.tool_calls is None


def test_async_openai_client_and_history():
    model = FakeModelWrapper(responses=lambda msgs, i: f"r{i}", enable_history=True)

    async def main():
        client = model.get_openai_async_client()
        assert isinstance(client, openai.AsyncOpenAI)
        models = await client.models.list()
        resp = await client.chat.completions.create(
            model=models.data[0].id, messages=Q, n=3, temperature=1.0
        )
        return client, resp

    client, resp = asyncio.run(main())
    assert client.model_path == model.model_path
    assert [c.message.content for c in resp.choices] == ["r0", "r1", "r2"]
    hist = model.extract_experience_from_history()
    assert [e.response_text for e in hist] == ["r0", "r1", "r2"]
    p = prompt_ids(Q)
    for e in hist:
        assert torch.equal(e.logprobs, model.logprobs(e.tokens, temperature=1.0)[len(p) - 1 :])


# --------------------------------------------------------------------------- misc
def test_model_version_history_clone_and_workflow_state():
    model = FakeModelWrapper(responses="x", enable_history=True)
    assert model.model_version == 0
    model.model_version = 5
    assert model.chat(Q)[0].model_version == 5
    assert asyncio.run(_await(model.model_version_async)) == 5
    clone = model.clone_with_isolated_history()
    clone.chat(Q)
    assert len(clone.extract_experience_from_history()) == 1
    assert len(model.extract_experience_from_history()) == 1
    asyncio.run(model.set_workflow_state({"turn": 1}))
    assert asyncio.run(model.get_workflow_state()) == {"turn": 1}
    asyncio.run(model.clean_workflow_state())
    assert asyncio.run(model.get_workflow_state()) == {}
    assert asyncio.run(model.get_message_token_len(Q)) == len(prompt_ids(Q))
    assert model.generate_kwargs == {"temperature": 1.0, "top_p": 1.0}


async def _await(awaitable):
    return await awaitable


def test_tokenizer_round_trip():
    text = "héllo <|user|> wörld"
    ids = TOK.encode(text)
    assert U in ids and TOK.decode(ids) == text
    assert TOK.decode(ids, skip_special_tokens=True) == "héllo  wörld"
    assert TOK.encode("<|user|>", parse_special=False) == list(b"<|user|>")
    assert TOK.apply_chat_template(Q, add_generation_prompt=True, tokenize=False) == (
        "<|user|>2+2?<|end|><|assistant|>"
    )
    assert parse_tool_calls('{"name": "f", "arguments": {"a": 1}}') == (
        None,
        [{"name": "f", "arguments": {"a": 1}}],
    )
    assert parse_tool_calls("plain") == ("plain", [])


def test_guide_style_subclass_overriding_only_sync_chat_works_everywhere():
    """A user's own double, written from the guide: only `chat`, no super().__init__()."""

    class Canned(ModelWrapper):
        def __init__(self, reply):
            self.reply = reply

        def chat(self, messages, **kwargs):
            return [
                Experience(tokens=[1, 2, 3, 4], prompt_length=2, response_text=self.reply)
                for _ in range(kwargs.get("n", 1))
            ]

    model = Canned("ok")
    assert model.model_version == 0 and model.enable_history is False
    assert [e.response_text for e in model.chat(Q, n=2)] == ["ok", "ok"]
    out = asyncio.run(model.chat_async(Q, n=3))  # async twin served by the sync override
    assert [e.response_text for e in out] == ["ok"] * 3
    with pytest.raises(NotImplementedError, match="does not implement generate"):
        model.generate(["p"])
