"""Tokenizers rebuilt from GGUF metadata: pre-tokenizer regexes and SentencePiece vocabularies."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wren.engine.errors import ModelFileError, UnsupportedArchitecture
from wren.engine.modelhub.gguf_tokenizer import build_tokenizer

SOURCE = Path("test.gguf")


def byte_level_meta(kit, pre: str | None) -> dict:
    tokens, types, merges = kit.tiny_vocab()
    meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types,
            "tokenizer.ggml.merges": merges, "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2}
    if pre is not None:
        meta["tokenizer.ggml.pre"] = pre
    return meta


def pieces(tok, text: str) -> list[str]:
    return [p for p, _ in tok.pre_tokenizer.pre_tokenize_str(text)]


@pytest.mark.parametrize("pre, text, expected", [
    # smollm / starcoder: every digit alone, then GPT-2's split
    ("smollm", "abc 12345 x", ["abc", "Ġ", "1", "2", "3", "4", "5", "Ġx"]),
    ("gpt2", "abc 12345 x", ["abc", "Ġ12345", "Ġx"]),
    # llama 3: digits in threes, letters take one leading non-letter, newlines grouped
    ("llama-bpe", "Hi!! 12345\n\nyo", ["Hi", "!!", "Ġ", "123", "45", "ĊĊ", "yo"]),
    ("qwen2", "Hi 12345", ["Hi", "Ġ", "1", "2", "3", "4", "5"]),
    ("llama-bpe", "I'M here", ["I", "'M", "Ġhere"]),
])
def test_pre_tokenizer_follows_the_gguf_pre_name(kit, pre, text, expected):
    tok, _ = build_tokenizer(byte_level_meta(kit, pre), SOURCE, 128)
    assert pieces(tok, text) == expected


def test_unknown_pre_name_warns_and_uses_gpt2(kit, caplog):
    with caplog.at_level(logging.WARNING):
        tok, _ = build_tokenizer(byte_level_meta(kit, "brand-new-pre"), SOURCE, 128)
    assert "brand-new-pre" in caplog.text
    assert pieces(tok, "abc 12345") == ["abc", "Ġ12345"]


def test_control_tokens_are_single_special_ids(kit):
    tok, config = build_tokenizer(byte_level_meta(kit, "smollm"), SOURCE, 128)
    assert tok.encode("<|im_start|>user hello<|im_end|>", add_special_tokens=False).ids[0] == 1
    assert tok.encode("x<|im_end|>", add_special_tokens=False).ids[-1] == 2
    assert config["bos_token"] == "<|im_start|>" and config["add_bos_token"] is False


def test_unknown_tokenizer_model_is_refused(kit):
    meta = byte_level_meta(kit, None) | {"tokenizer.ggml.model": "t5"}
    with pytest.raises(UnsupportedArchitecture, match="'t5'"):
        build_tokenizer(meta, SOURCE, 128)


def test_inconsistent_merges_are_a_file_error(kit):
    meta = byte_level_meta(kit, None)
    meta["tokenizer.ggml.merges"] = meta["tokenizer.ggml.merges"] + ["zz qq"]
    with pytest.raises(ModelFileError, match="test.gguf has an unusable tokenizer"):
        build_tokenizer(meta, SOURCE, 128)


# --- SentencePiece ("llama") vocabularies, checked against sentencepiece itself ---------------

CORPUS = [
    "The quick brown fox jumps over the lazy dog.", "Hello world, hello there!",
    "Tokenizers split text into pieces.", "Numbers like 12345 and 2024 appear too.",
    "  Leading spaces and\ttabs\nnew lines.", "naïve café résumé", "the theory of the thing",
]


@pytest.fixture(scope="module")
def sentencepiece_pair():
    spm = pytest.importorskip("sentencepiece")
    model = io.BytesIO()
    # identity normalization and kept whitespace, as Llama/Mistral tokenizers are trained
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS * 20), model_writer=model, vocab_size=400, model_type="bpe",
        byte_fallback=True, normalization_rule_name="identity", remove_extra_whitespaces=False,
        character_coverage=1.0, split_digits=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        hard_vocab_limit=False, allow_whitespace_only_pieces=True, minloglevel=2,
    )
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    n = sp.get_piece_size()

    def kind(i: int) -> int:
        return 2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 6 if sp.is_byte(i) else 1

    meta = {
        "tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": [sp.id_to_piece(i) for i in range(n)],
        "tokenizer.ggml.scores": [sp.get_score(i) for i in range(n)],
        "tokenizer.ggml.token_type": [kind(i) for i in range(n)],
        "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2, "tokenizer.ggml.unknown_token_id": 0,
    }
    tok, config = build_tokenizer(meta, SOURCE, 512)
    return sp, tok, config


@pytest.mark.parametrize("text", ["The quick brown fox", "hello  world", " leading", "tabs\there\nnewline",
                                  "emoji 🚀 and 東京", "12345", "", " ", "a  b   c", "naïve café"])
def test_sentencepiece_vocab_encodes_like_sentencepiece(sentencepiece_pair, text):
    sp, tok, _ = sentencepiece_pair
    ids = tok.encode(text, add_special_tokens=False).ids
    assert ids == sp.encode(text)
    assert tok.decode(ids) == sp.decode(ids) == text


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("the quickbrownfox THE\t\n.,!1234éï東🚀")), max_size=40))
def test_sentencepiece_vocab_property(sentencepiece_pair, text):
    sp, tok, _ = sentencepiece_pair
    assert tok.encode(text, add_special_tokens=False).ids == sp.encode(text)


def test_sentencepiece_vocab_adds_bos_like_llama_cpp(sentencepiece_pair):
    sp, tok, config = sentencepiece_pair
    assert config["add_bos_token"] is True and config["bos_token"] == "<s>"
    assert tok.encode("hello").ids == [1, *sp.encode("hello")]
