"""Tokens you can see: engine.models.tokens and `wren tokens`, on the tiny model's byte-level tokenizer."""

from __future__ import annotations

import asyncio
import itertools
import json

import pytest

from wren.engine.api import Engine
from wren.engine.errors import InvalidRequest, WrenError
from wren.engine.terminal.tokens import render
from wren.engine.token_view import TokenPiece, visible


def _cover(text: str, pieces: list[TokenPiece]) -> None:
    """Pieces tile the text: in order, no gaps, and their texts (bytes joined) give it back."""
    assert pieces[0].start == 0 and pieces[-1].end == len(text)
    for a, b in itertools.pairwise(pieces):
        assert b.start in (a.start, a.end)  # the pieces of one character share its span
    assert all(0 <= p.start <= p.end <= len(text) for p in pieces)


def test_tokens_of_ascii_text_with_ids_and_spans(make_engine):
    asyncio.run(_test_tokens_of_ascii_text_with_ids_and_spans(make_engine))


async def _test_tokens_of_ascii_text_with_ids_and_spans(make_engine):
    engine: Engine = make_engine()
    try:
        text = "Hello world, hello Wren."
        found = await engine.models.tokens(text)
        assert engine.loaded_worker is None  # the model was never loaded, only its tokenizer
        assert "".join(p.text for p in found) == text
        _cover(text, found)
        assert len(engine.models.tokenizers_apart) == 1  # the default model's tokenizer, loaded alone
        tokenizer = await engine.models.tokenizer_for(None)  # that one, not loaded again
        assert [p.id for p in found] == tokenizer._text.encode(text, add_special_tokens=False).ids
        assert all(text[p.start:p.end] == p.text for p in found)
    finally:
        await engine.close()


def test_tokens_of_non_ascii_text_show_byte_pieces(make_engine):
    asyncio.run(_test_tokens_of_non_ascii_text_show_byte_pieces(make_engine))


async def _test_tokens_of_non_ascii_text_show_byte_pieces(make_engine):
    engine: Engine = make_engine()
    try:
        text = "naïve café 日本 🙂"
        found = await engine.models.tokens(text)
        _cover(text, found)
        byte_pieces = [p for p in found if p.is_bytes]
        assert byte_pieces, "a tiny vocabulary must split rare characters into bytes"
        # Bytes of a character add up to that character, whatever the split.
        rebuilt, pending = "", b""
        for p in found:
            if p.is_bytes:
                pending += bytes(int(h, 16) for h in p.text.replace("<0x", " ").replace(">", "").split())
                try:
                    rebuilt, pending = rebuilt + pending.decode("utf-8"), b""
                except UnicodeDecodeError:
                    pass
            else:
                rebuilt += p.text
        assert rebuilt == text and pending == b""
        emoji = [p for p in found if p.start == text.index("🙂")]
        assert emoji and all(p.end == len(text) for p in emoji)
    finally:
        await engine.close()


def test_empty_text_and_bad_input(make_engine):
    asyncio.run(_test_empty_text_and_bad_input(make_engine))


async def _test_empty_text_and_bad_input(make_engine):
    engine: Engine = make_engine()
    try:
        assert await engine.models.tokens("") == []
        with pytest.raises(InvalidRequest, match="must be text"):
            await engine.models.tokens(42)  # type: ignore[arg-type]
        with pytest.raises(WrenError, match="no model named 'nope'"):
            await engine.models.tokens("hi", model="nope")
    finally:
        await engine.close()


def test_special_markup_is_text_and_the_loaded_models_tokenizer_is_used(make_engine):
    asyncio.run(_test_special_markup_is_text_and_the_loaded_models_tokenizer_is_used(make_engine))


async def _test_special_markup_is_text_and_the_loaded_models_tokenizer_is_used(make_engine):
    engine: Engine = make_engine()
    try:
        await engine.models.load()
        text = "<|im_end|> ok"
        found = await engine.models.tokens(text)
        assert "".join(p.text for p in found) == text  # typed markup stays plain text
        assert engine.models.tokenizers_apart == []  # the loaded model's tokenizer served it
    finally:
        await engine.close()


def test_render_shows_boundaries_ids_and_spaces():
    pieces = [TokenPiece(5, "Hi", 0, 2), TokenPiece(17, " there", 2, 8), TokenPiece(3, "<0xE2>", 8, 9)]
    out = render(pieces)
    assert out.splitlines()[0] == "Hi│·there│<0xE2>"
    assert "  17  " in out and "·there" in out and out.rstrip().endswith("3 tokens")
    assert render([]) == "(no tokens: the text is empty)\n"
    assert visible("a b\tc\n") == "a·b→c↵"


def test_cli_prints_tokens_as_json(make_engine, capsys):
    from wren.engine.terminal.main import main

    asyncio.run(make_engine().close())  # registers the tiny model as the default in WREN_HOME
    assert main(["tokens", "Hi there", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"] == "tiny" and data["count"] == len(data["tokens"]) > 0
    assert "".join(t["text"] for t in data["tokens"]) == "Hi there"
    assert main(["tokens", "Hi there"]) == 0
    assert "·" in capsys.readouterr().out
    assert main(["tokens", "x", "--model", "nope"]) == 2
    assert "nope" in capsys.readouterr().err


def test_sentencepiece_byte_fallback_pieces_show_their_bytes():
    """A Llama-style vocabulary without "é" spells it with <0xC3><0xA9> byte tokens."""
    from types import SimpleNamespace

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from wren.engine.token_view import pieces

    vocab = {f"<0x{b:02X}>": b for b in range(256)}
    for word in ("▁caf", "▁ok", "▁", "c", "a", "f", "o", "k"):
        vocab[word] = len(vocab)
    raw = Tokenizer(models.BPE(vocab, [], byte_fallback=True, fuse_unk=False))
    raw.pre_tokenizer = pre_tokenizers.Metaspace()
    raw.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    found = pieces(SimpleNamespace(_text=raw), "café ok")
    texts = [p.text for p in found]
    assert "<0xC3>" in texts and "<0xA9>" in texts
    byte_pieces = [p for p in found if p.is_bytes]
    assert [p.id for p in byte_pieces] == [0xC3, 0xA9]
    assert all((p.start, p.end) == (3, 4) for p in byte_pieces)  # both cover the é
