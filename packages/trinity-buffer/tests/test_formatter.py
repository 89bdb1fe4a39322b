"""SFT / DPO / CPT formatters with a tokenizer built locally (no model hub)."""

from __future__ import annotations

import json

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from trinity.buffer.formatter import (
    FORMATTERS,
    CPTFormatter,
    DPOFormatter,
    FormatError,
    SFTFormatter,
    get_formatter,
)
from trinity.common.config import FormatConfig
from trinity.common.experience import collate_experiences
from trinity.common.models.utils import ChatTemplateError

CHATML = (
    "{% for m in messages %}"
    "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = [
    "You are a helpful assistant.",
    "What is two plus two? It is four.",
    "And times three? Twelve.",
    "My name is Assistant. I don't have a name.",
    "system user assistant hello world",
]


@pytest.fixture(scope="module")
def tokenizer():
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<unk>", "<pad>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", eos_token="<|im_end|>"
    )
    hf.chat_template = CHATML
    return hf


def _decode(tokenizer, ids) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=False)


def _runs(mask: torch.Tensor) -> list[tuple[int, int]]:
    """Contiguous [start, end) runs of True."""
    runs, start = [], None
    for i, v in enumerate(mask.tolist() + [False]):
        if v and start is None:
            start = i
        elif not v and start is not None:
            runs.append((start, i))
            start = None
    return runs


TWO_TURNS = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is two plus two?"},
    {"role": "assistant", "content": "It is four."},
    {"role": "user", "content": "And times three?"},
    {"role": "assistant", "content": "Twelve."},
]


def test_registry():
    assert FORMATTERS.get("sft") is SFTFormatter
    assert FORMATTERS.get("dpo") is DPOFormatter


def test_cpt_tokenizes_raw_text_and_trains_on_every_token_after_the_first(tokenizer):
    """Trinity-RFT 0.6's ``cpt``: the text as the tokenizer encodes it (no chat template),
    ``prompt_length`` 1, so the response (the trained part) is every later token."""
    assert FORMATTERS.get("cpt") is CPTFormatter
    text = "What is two plus two? It is four."
    fmt = get_formatter("cpt", tokenizer, FormatConfig(prompt_type="plaintext", prompt_key="text"))
    exp = fmt.format({"text": text})
    ids = tokenizer(text)["input_ids"]
    assert exp.tokens.tolist() == ids and len(ids) > 2
    assert exp.prompt_length == 1 and exp.response_length == len(ids) - 1
    assert "<|im_start|>" not in _decode(tokenizer, exp.tokens)
    assert _decode(tokenizer, exp.tokens) == text
    batch = collate_experiences([exp, fmt.format({"text": "Twelve."})])
    assert batch.tokens.shape[0] == 2


def test_cpt_errors_name_the_problem(tokenizer):
    with pytest.raises(FormatError, match=r"prompt_type must be 'plaintext', got 'messages'"):
        CPTFormatter(tokenizer, FormatConfig(prompt_type="messages"))
    fmt = CPTFormatter(tokenizer, FormatConfig(prompt_type="plaintext", prompt_key="text"))
    with pytest.raises(FormatError, match=r"no value for 'text' \(format.prompt_key\)"):
        fmt.format({"prompt": "x"})
    with pytest.raises(FormatError, match=r"string 'text'.*got list"):
        fmt.format({"text": ["a"]})
    with pytest.raises(FormatError, match=r"tokenizes to 1 token\(s\).*at least 2"):
        fmt.format({"text": "a"})


def test_sft_multi_turn_mask_is_exactly_the_assistant_tokens(tokenizer):
    fmt = SFTFormatter(
        tokenizer, FormatConfig(messages_key="messages", enable_concatenated_multi_turn=True)
    )
    exp = fmt.format({"messages": TWO_TURNS})
    assert exp.experience_type == "multi_turn"
    full_text = _decode(tokenizer, exp.tokens)
    assert full_text == tokenizer.apply_chat_template(TWO_TURNS, tokenize=False)

    # the full-sequence mask: prompt part all False, response part = exp.action_mask
    mask = torch.cat([torch.zeros(exp.prompt_length, dtype=torch.bool), exp.action_mask])
    runs = _runs(mask)
    assert [_decode(tokenizer, exp.tokens[a:b]) for a, b in runs] == [
        "It is four.<|im_end|>\n",
        "Twelve.<|im_end|>\n",
    ]
    # everything else (system, user turns, the assistant headers) is context
    context = "".join(
        _decode(tokenizer, exp.tokens[i : i + 1]) for i in range(len(mask)) if not mask[i]
    )
    assert context == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nWhat is two plus two?<|im_end|>\n<|im_start|>assistant\n"
        "<|im_start|>user\nAnd times three?<|im_end|>\n<|im_start|>assistant\n"
    )
    # the prompt ends right where the first assistant answer starts
    assert exp.prompt_length == runs[0][0]
    assert exp.messages == TWO_TURNS


def test_sft_default_trains_on_the_last_assistant_message_only(tokenizer):
    fmt = SFTFormatter(tokenizer, FormatConfig(messages_key="messages"))
    exp = fmt.format({"messages": json.dumps(TWO_TURNS)})  # JSON strings are accepted
    assert exp.experience_type == "single_turn"
    assert _decode(tokenizer, exp.response_tokens) == "Twelve.<|im_end|>\n"
    assert bool(exp.action_mask.all())
    assert _decode(tokenizer, exp.prompt_tokens).endswith("<|im_start|>assistant\n")
    assert "It is four." in _decode(tokenizer, exp.prompt_tokens)


def test_sft_plaintext_with_system_prompt(tokenizer):
    cfg = FormatConfig(
        prompt_type="plaintext",
        prompt_key="q",
        response_key="a",
        system_prompt="You are a helpful assistant.",
    )
    exp = SFTFormatter(tokenizer, cfg).format({"q": "What is two plus two?", "a": "It is four."})
    assert _decode(tokenizer, exp.prompt_tokens) == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nWhat is two plus two?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert _decode(tokenizer, exp.response_tokens) == "It is four.<|im_end|>\n"
    # a per-row system prompt wins over the configured one
    cfg2 = cfg.model_copy(update={"system_prompt_key": "sys"})
    exp2 = SFTFormatter(tokenizer, cfg2).format({"q": "hello", "a": "world", "sys": "system"})
    assert _decode(tokenizer, exp2.prompt_tokens).startswith("<|im_start|>system\nsystem<|im_end|>")


def test_sft_errors_name_the_problem(tokenizer):
    fmt = SFTFormatter(tokenizer, FormatConfig(messages_key="messages"))
    with pytest.raises(FormatError, match="'messages'.*keys present: \\['other'\\]"):
        fmt.format({"other": 1})
    with pytest.raises(FormatError, match="last message .* assistant"):
        fmt.format({"messages": TWO_TURNS[:2]})
    with pytest.raises(FormatError, match="not valid JSON"):
        fmt.format({"messages": "[{broken"})
    plain = SFTFormatter(tokenizer, FormatConfig(prompt_type="plaintext"))
    with pytest.raises(FormatError, match="string 'prompt' and 'response'"):
        plain.format({"prompt": "hi", "response": 3})


def test_sft_refuses_a_template_that_rewrites_history(tokenizer):
    # drops every assistant message but the last: earlier turns change when a turn is added
    template = (
        "{% for m in messages %}{% if m['role'] != 'assistant' or loop.last %}"
        "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    cfg = FormatConfig(
        messages_key="messages", enable_concatenated_multi_turn=True, chat_template=template
    )
    with pytest.raises(ChatTemplateError):
        SFTFormatter(tokenizer, cfg).format({"messages": TWO_TURNS})


def test_dpo_layout_plaintext(tokenizer):
    fmt = get_formatter("dpo", tokenizer, FormatConfig(prompt_type="plaintext"))
    exp = fmt.format(
        {
            "prompt": "What is your name?",
            "chosen": "My name is Assistant.",
            "rejected": "I don't have a name.",
        }
    )
    assert exp.experience_type == "dpo"
    prompt_ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is your name?"}],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
    )
    # tokens = the prompt only (with the generation prompt); chosen / rejected = responses
    assert exp.tokens.tolist() == list(prompt_ids)
    assert exp.prompt_length == len(prompt_ids)
    assert _decode(tokenizer, exp.chosen) == "My name is Assistant.<|im_end|>\n"
    assert _decode(tokenizer, exp.rejected) == "I don't have a name.<|im_end|>\n"
    assert exp.chosen_messages[-1] == {"role": "assistant", "content": "My name is Assistant."}
    assert exp.rejected_messages[:-1] == exp.chosen_messages[:-1]
    # prompt + chosen is exactly the rendering of the chosen conversation
    full = tokenizer.apply_chat_template(exp.chosen_messages, tokenize=True, return_dict=False)
    assert torch.cat([exp.tokens, exp.chosen]).tolist() == list(full)

    # the trainer's collate splits the pair into [chosen, rejected] rows
    batch = collate_experiences([exp, exp])
    assert batch.batch_size == 4
    assert batch.action_mask[0].sum().item() == len(exp.chosen)
    assert batch.action_mask[1].sum().item() == len(exp.rejected)


def test_dpo_layout_messages(tokenizer):
    fmt = DPOFormatter(tokenizer, FormatConfig(messages_key="messages"))
    exp = fmt.format(
        {
            "messages": [
                {"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "What is your name?"},
            ],
            "chosen": [{"role": "assistant", "content": "My name is Assistant."}],
            "rejected": {"role": "assistant", "content": "I don't have a name."},
        }
    )
    assert _decode(tokenizer, exp.tokens).startswith("<|im_start|>system\n")
    assert _decode(tokenizer, exp.chosen) == "My name is Assistant.<|im_end|>\n"
    assert _decode(tokenizer, exp.rejected) == "I don't have a name.<|im_end|>\n"
    assert len(exp.chosen_messages) == 3 and len(exp.rejected_messages) == 3
    with pytest.raises(FormatError, match="'rejected'"):
        fmt.format({"messages": [{"role": "user", "content": "hi"}], "chosen": "a"})


def test_formatted_experiences_serialize(tokenizer):
    sft = SFTFormatter(
        tokenizer, FormatConfig(messages_key="messages", enable_concatenated_multi_turn=True)
    ).format({"messages": TWO_TURNS})
    back = type(sft).deserialize(sft.serialize())
    assert torch.equal(back.tokens, sft.tokens) and torch.equal(back.action_mask, sft.action_mask)


def test_tokenizer_without_chat_template_support_is_refused():
    with pytest.raises(TypeError, match="apply_chat_template"):
        SFTFormatter(object())


def test_trinity_rft_0_6_formatter_arguments(tokenizer, tmp_path):
    """``FORMATTER.get("sft")(tokenizer_path=..., format_config=...)``, as 0.6 builds them."""
    tokenizer.save_pretrained(tmp_path / "tok")
    config = FormatConfig(prompt_type="plaintext", prompt_key="q", response_key="a")
    sft = FORMATTERS.get("sft")(tokenizer_path=str(tmp_path / "tok"), format_config=config)
    exp = sft.format({"q": "What is two plus two?", "a": "It is four."})
    assert "It is four." in _decode(tokenizer, exp.tokens[exp.prompt_length :])
    with pytest.raises(TypeError, match="tokenizer"):
        SFTFormatter(format_config=config)


def test_task_formatter_resolves_the_workflow_and_reward_classes():
    from trinity.common.config import StorageConfig
    from trinity.common.rewards import REWARD_FUNCTIONS, RewardFn
    from trinity.common.workflows import WORKFLOWS, Workflow

    class _Flow(Workflow):
        def run(self):
            return []

    class _Reward(RewardFn):
        def __call__(self, **kwargs):
            return {"accuracy": 1.0}

    WORKFLOWS.register_module("fmt_test_flow", _Flow)
    REWARD_FUNCTIONS.register_module("fmt_test_reward", _Reward)
    try:
        config = StorageConfig(
            default_workflow_type="fmt_test_flow",
            default_reward_fn_type="fmt_test_reward",
            workflow_args={"k": 1},
            is_eval=True,
        )
        row = {"question": "1+1=", "answer": "2"}
        task = FORMATTERS.get("task")(config=config).format(row)
        assert task.workflow is _Flow and task.reward_fn is _Reward
        assert task.raw_task is row and task.workflow_args == {"k": 1} and task.is_eval
    finally:
        WORKFLOWS.unregister("fmt_test_flow")
        REWARD_FUNCTIONS.unregister("fmt_test_reward")


def test_tokenize_and_mask_messages_hf_reads_the_generation_markers(tokenizer):
    """Trinity-RFT 0.6's ``tokenize_and_mask_messages_hf`` (core; tested here, where a Hugging
    Face tokenizer is installed): the mask is what the template's ``{% generation %}`` marks,
    and it agrees with the incremental-prefix helper on a ChatML conversation."""
    from trinity.common.models.utils import (
        tokenize_and_mask_messages_default,
        tokenize_and_mask_messages_hf,
    )

    marked = (
        "{% for m in messages %}"
        "{% if m['role'] == 'assistant' %}<|im_start|>assistant\n"
        "{% generation %}{{ m['content'] }}<|im_end|>{% endgeneration %}\n"
        "{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}"
        "{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    out = tokenize_and_mask_messages_hf(tokenizer, TWO_TURNS, chat_template=marked)
    assert set(out) == {"input_ids", "assistant_masks"}
    ids, mask = out["input_ids"][0], out["assistant_masks"][0]
    assert ids.shape == mask.shape
    spans = [_decode(tokenizer, ids[a:b]) for a, b in _runs(mask.bool())]
    assert spans == ["It is four.<|im_end|>", "Twelve.<|im_end|>"]
    default = tokenize_and_mask_messages_default(tokenizer, TWO_TURNS, chat_template=marked)
    assert default["input_ids"][0].tolist() == ids.tolist()
    # without the markers Hugging Face marks nothing
    plain = tokenize_and_mask_messages_hf(tokenizer, TWO_TURNS, chat_template=CHATML)
    assert not plain["assistant_masks"].any()
