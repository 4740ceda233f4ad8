"""Blocks → chunks by structure: neighbouring paragraphs of one section (same headings, page,
chapter) join until a chunk holds about MAX_WORDS words; a longer paragraph is cut between
sentences. Each chunk keeps its file's location (headings, page, first-last line or row)
and a token count.

MAX_WORDS keeps a chunk within the 256 tokens all-MiniLM-L6-v2 reads (about 1.3 tokens a
word in English prose), so the vector covers the whole passage."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from .formats import Block

MAX_WORDS = 170
MIN_WORDS = 40  # a shorter paragraph joins its neighbours when the section allows
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[])")
_TOKEN = re.compile(r"\w+|[^\w\s]", re.UNICODE)
RANGES = ("lines", "rows")


@dataclass(frozen=True)
class Chunk:
    text: str
    location: dict
    tokens: int


def count_tokens(text: str) -> int:
    """A model-independent token estimate: words and punctuation marks, a word of more than
    six letters counting twice (a subword tokenizer's pieces). Within ~15% of Llama's and
    MiniLM's counts on English prose; the context assembler counts with the model's own."""
    return sum(2 if len(t) > 6 else 1 for t in _TOKEN.findall(text))


def chunks_of(blocks: Iterable[Block]) -> list[Chunk]:
    out: list[Chunk] = []
    pending: list[Block] = []
    words = 0
    for block in _split_long(blocks):
        size = len(block.text.split())
        if pending and (_section(block) != _section(pending[-1]) or words + size > MAX_WORDS
                        or (words >= MIN_WORDS and size >= MIN_WORDS)):
            out.append(_join(pending))
            pending, words = [], 0
        pending.append(block)
        words += size
    if pending:
        out.append(_join(pending))
    return out


def _section(block: Block) -> tuple:
    loc = block.location
    return tuple(tuple(v) if isinstance(v, list) else v for k, v in sorted(loc.items()) if k not in RANGES
                 and k != "paragraph")


def _split_long(blocks: Iterable[Block]) -> Iterator[Block]:
    for block in blocks:
        if len(block.text.split()) <= MAX_WORDS:
            yield block
            continue
        piece: list[str] = []
        for sentence in _pieces(block.text):
            if piece and len(" ".join(piece).split()) + len(sentence.split()) > MAX_WORDS:
                yield Block(" ".join(piece), block.location)
                piece = []
            piece.append(sentence)
        if piece:
            yield Block(" ".join(piece), block.location)


def _pieces(text: str) -> Iterator[str]:
    """Sentences; a "sentence" longer than MAX_WORDS (a table, minified code) in word runs."""
    for sentence in _SENTENCE.split(text):
        words = sentence.split()
        for start in range(0, len(words), MAX_WORDS):
            yield " ".join(words[start:start + MAX_WORDS])


def _join(blocks: list[Block]) -> Chunk:
    location = {k: v for k, v in blocks[0].location.items() if k != "paragraph"}
    for key in RANGES:
        spans = [b.location[key] for b in blocks if key in b.location]
        if spans:
            location[key] = [min(s[0] for s in spans), max(s[1] for s in spans)]
    heading = location.get("heading")
    body = "\n\n".join(b.text for b in blocks)
    # The section's title goes with its text: "refund policy" finds a paragraph under
    # "Refunds" that never says the word, for the words' index and the vector alike.
    text = f"{' › '.join(heading)}\n{body}" if heading else body
    return Chunk(text, location, count_tokens(text))


def describe(location: dict) -> str:
    """A location for people: "page 3", "Setup › Linux, lines 10-14", "rows 2-9"."""
    parts = []
    if "chapter" in location:
        parts.append(f"chapter {location['chapter']}")
    if "page" in location:
        parts.append(f"page {location['page']}")
    if location.get("heading"):
        parts.append(" › ".join(location["heading"]))
    for key in RANGES:
        if key in location:
            first, last = location[key]
            parts.append(f"{key[:-1]} {first}" if first == last else f"{key} {first}-{last}")
    return ", ".join(parts)
