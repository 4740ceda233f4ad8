"""A character-level tokenizer for constraint tests: every token is one character (plus a
few markers), so random logits close strings and numbers within a few dozen tokens."""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers

from wren.engine.tokenize import Tokenizer

EOS = "<eos>"
CHARS = '{}[]":,-+.0123456789 abcdefghijklmnopqrstuvwxyzE_\\\n/<>'


def char_tokenizer(folder: Path, *, specials: tuple[str, ...] = (), words: int = 0) -> Tokenizer:
    """A Wren Tokenizer over single characters; `specials` are added as special tokens
    (e.g. "<tool_call>" the way Qwen's vocabulary holds it), and `words` plain multi-letter
    tokens make the vocabulary larger."""
    folder.mkdir(parents=True, exist_ok=True)
    vocab = {EOS: 0}
    for ch in CHARS:
        vocab.setdefault(_byte_level(ch), len(vocab))
    hf = HFTokenizer(models.BPE(vocab=vocab, merges=[]))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    hf.decoder = decoders.ByteLevel()
    hf.add_special_tokens([EOS, *specials])
    if words:
        letters = "abcdefghij"
        hf.add_tokens([f"w{''.join(letters[int(d)] for d in str(i))}" for i in range(words)])
    (folder / "tokenizer.json").write_text(hf.to_str(), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": EOS}), encoding="utf-8")
    return Tokenizer.from_dir(folder)


def _byte_level(ch: str) -> str:
    """GPT-2's byte-level spelling of an ASCII character: printable ones stand for
    themselves, the others (space, newline) move up to U+0100 + their position."""
    b = ord(ch)
    if 33 <= b <= 126:
        return ch
    return chr(256 + sum(1 for x in range(b) if not 33 <= x <= 126))
