"""The tiny models of ``trinity.launcher.tiny_model``: the tokenizer every engine loads (through
``AutoTokenizer``, as vLLM, verl and ``transformers`` do) keeps spaces and newlines and encodes
like the one built, the vocabulary is the documented one, and a preset is reproducible."""

from __future__ import annotations

import hashlib

import pytest

from trinity.launcher.tiny_model import (
    ARITHMETIC_SPEC,
    ARITHMETIC_VOCAB,
    _arithmetic_tokenizer,
    build_tiny_model,
    main,
)


@pytest.fixture(scope="module")
def arithmetic(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("arith"), ARITHMETIC_SPEC)


def load(path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))


def test_the_arithmetic_tokenizer_keeps_spaces_and_newlines(arithmetic):
    tok = load(arithmetic)
    ids = tok("3 7\n=")["input_ids"]
    assert ids == [11, 7, 15, 6, 21]
    assert tok.convert_ids_to_tokens(ids) == ["3", "Ġ", "7", "Ċ", "="]  # byte-level space/newline
    assert tok.decode(ids) == "3 7\n="
    assert tok.decode(tok("1 +  2\n\n= 3")["input_ids"]) == "1 +  2\n\n= 3"
    # the built tokenizer and the loaded one agree (what was trained on is what is sampled)
    built = _arithmetic_tokenizer()
    for text in ("3 7\n=", "user 12+30=42\nassistant", "What is 3 + 4?"):
        assert built(text)["input_ids"] == tok(text)["input_ids"], text
    # letters are outside the vocabulary: dropped, as documented
    assert tok.decode(tok("What is 3 + 4?")["input_ids"]) == "  3 + 4"


def test_the_quickstart_prompt_is_the_bare_question(arithmetic):
    tok = load(arithmetic)

    def chat(messages):
        return tok.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=False
        )

    ids = chat([{"role": "user", "content": "2+4="}])
    assert ids == [1, 10, 18, 12, 21, 2, 1]  # <|im_start|>2+4=<|im_end|><|im_start|>
    # a message's spaces and newlines survive the template
    text = tok.decode(chat([{"role": "user", "content": "3 7\n="}]))
    assert text == "<|im_start|>3 7\n=<|im_end|><|im_start|>"
    turns = [
        {"role": "user", "content": "0+0="},
        {"role": "assistant", "content": "0"},
        {"role": "user", "content": "0+1="},
    ]
    assert tok.decode(chat(turns)) == (
        "<|im_start|>0+0=<|im_end|><|im_start|>0<|im_end|><|im_start|>0+1=<|im_end|><|im_start|>"
    )


def test_the_vocabulary_is_the_documented_one(arithmetic, capsys):
    tok = load(arithmetic)
    assert len(tok) == len(ARITHMETIC_VOCAB) == 22
    for index, token in enumerate(ARITHMETIC_VOCAB):
        assert tok.decode([index]) == token, index
    assert (tok.eos_token_id, tok.pad_token_id) == (2, 0)
    with pytest.raises(SystemExit):
        main(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())  # argparse wraps the lines
    assert "3 'system', 4 'user', 5 'assistant', 6 '\\n', 7 ' ', 8 '0'" in help_text


def test_a_preset_is_reproducible(arithmetic, tmp_path):
    again = build_tiny_model(tmp_path / "again", ARITHMETIC_SPEC)

    def digest(path):
        return {
            p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.iterdir())
            if p.is_file()
        }

    assert digest(again) == digest(arithmetic)


def test_a_directory_of_an_older_build_is_rebuilt(tmp_path):
    import json

    path = build_tiny_model(tmp_path / "m", ARITHMETIC_SPEC)
    stamp = path / "trinity_tiny_model.json"
    old = json.loads(stamp.read_text())
    old.pop("format")  # what builds before the spaces-and-newlines tokenizer wrote
    stamp.write_text(json.dumps(old))
    (path / "tokenizer.json").write_text("{}")
    build_tiny_model(path, ARITHMETIC_SPEC)
    assert load(path).decode(load(path)("3 7")["input_ids"]) == "3 7"
