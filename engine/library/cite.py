"""Passages in the prompt and citations out of the answer.

The prompt numbers the passages it holds ([1], [2], … by rank) and asks the model to cite
them; after the answer, each distinct [n] in its text that names a passage the prompt
really held becomes one `Citation` (file, location, passage). A number that names nothing
(the model invented it, or its passage was dropped for room) is left out."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..events import Citation
from .retrieve import Passage

HEADER = ("Passages from the user's documents. Use them when they answer the question, and cite each "
          "passage you use by its number in square brackets, like [1], right after the sentence it supports:")
_MARK = re.compile(r"\[(\d{1,3})\]")
_LIST = re.compile(r"\[(\d{1,3}(?:\s*,\s*\d{1,3})+)\]")  # [1, 2]


def label(number: int, passage: Passage) -> str:
    where = passage.where
    return f"[{number}] {Path(passage.path).name}" + (f" ({where})" if where else "")


def block(number: int, passage: Passage) -> str:
    """How one passage reads in the prompt (and in the context report's part)."""
    return f"{label(number, passage)}\n{passage.text}"


def cited_numbers(answer: str) -> list[int]:
    """Each [n] (and [n, m]) of the answer, in order of first appearance."""
    seen: dict[int, None] = {}
    for match in re.finditer(f"{_MARK.pattern}|{_LIST.pattern}", answer):
        for number in (match.group(1) or match.group(2)).split(","):
            seen.setdefault(int(number), None)
    return list(seen)


def citations(answer: str, passages: Sequence[Passage], included: Iterable[int]) -> list[Citation]:
    """The citations of `answer`: `passages` numbered from 1 as the prompt numbered them,
    `included` the chunk ids the prompt really held."""
    held = set(included)
    out = []
    for number in cited_numbers(answer):
        if not 1 <= number <= len(passages):
            continue
        p = passages[number - 1]
        if p.chunk_id in held:
            out.append(Citation(number, p.path, dict(p.location), p.where, p.text, p.chunk_id))
    return out
