"""Passages in the prompt and citations out of the answer.

The prompt numbers the passages it holds ([1], [2], … by rank) and asks the model to cite
them; after the answer, each distinct [n] in its text that names a passage the prompt
really held becomes one `Citation` (file, location, passage). A number that names nothing
(the model invented it, or its passage was dropped for room) is left out, and taken out of
the stored answer's text. An answer that names no passage by its number but quotes one (a
run of its words, a figure, its file's name) cites what it quotes: small models rarely write
the markers (the starter cited by number in 1 of 30 answers of the test set)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..events import Citation, CitedBy
from .retrieve import Passage

HEADER = ("Passages from the user's documents. Use them when they answer the question, and cite each "
          "passage you use by its number in square brackets, like [1], right after the sentence it supports:")


def label(number: int, passage: Passage) -> str:
    where = passage.where
    return f"[{number}] {Path(passage.path).name}" + (f" ({where})" if where else "")


def block(number: int, passage: Passage) -> str:
    """How one passage reads in the prompt (and in the context report's part)."""
    return f"{label(number, passage)}\n{passage.text}"


# A marker: [n] or [n, m], not a Markdown link's text ([1](url)) (nor, in _markers, a reference).
_MARKER = re.compile(r"(?P<space>[ \t]?)\[(?P<numbers>\d{1,3}(?:\s*,\s*\d{1,3})*)\](?!\()")
# Code, where [n] is an index and never a citation: fenced blocks (to the end if left open), inline spans.
_CODE = re.compile(r"(?ms)^[ \t]*(`{3,}|~{3,}).*?(?:^[ \t]*\1[ \t]*$|\Z)|`[^`\n]+`")


def _prose(answer: str) -> list[tuple[int, int]]:
    """The (start, end) spans of `answer` outside code."""
    spans, at = [], 0
    for code in _CODE.finditer(answer):
        spans.append((at, code.start()))
        at = code.end()
    spans.append((at, len(answer)))
    return [(a, b) for a, b in spans if b > a]


_LINK_TEXT = re.compile(r"\[[^\[\]\n]*\]$")  # "[the manual]" right before a reference link's [3]
_NUMBERS = re.compile(r"\[\d{1,3}(?:\s*,\s*\d{1,3})*\]")


def _markers(answer: str):
    for start, end in _prose(answer):
        for match in _MARKER.finditer(answer, start, end):
            before = _LINK_TEXT.search(answer, max(start, match.start() - 200), match.start())
            if not match.group("space") and before and not _NUMBERS.fullmatch(before.group()):
                continue  # [text][3]: a reference-style link, not a citation ([1][2] still is)
            if answer.startswith(":", match.end()) and not answer[answer.rfind("\n", 0, match.start()) + 1:
                                                                   match.start()].strip():
                continue  # [9]: https://… at the start of a line: a reference definition
            yield match


def cited_numbers(answer: str) -> list[int]:
    """Each [n] (and [n, m]) of the answer outside code, in order of first appearance."""
    seen: dict[int, None] = {}
    for match in _markers(answer):
        for number in match.group("numbers").split(","):
            seen.setdefault(int(number), None)
    return list(seen)


def without_uncited(answer: str, kept: Iterable[int]) -> str:
    """`answer` with each marker's numbers outside `kept` taken out (a marker left with none
    goes, with the space before it): what the answer says once a citation that points to no
    passage of its prompt is dropped. Code and Markdown links are left as written."""
    keep = set(kept)
    out, at = [], 0
    for match in _markers(answer):
        numbers = [n.strip() for n in match.group("numbers").split(",")]
        left = [n for n in numbers if int(n) in keep]
        if len(left) == len(numbers):
            continue
        out.append(answer[at:match.start()])
        if left:
            out.append(f"{match.group('space')}[{', '.join(left)}]")
        at = match.end()
    out.append(answer[at:])
    return "".join(out)


# A line that is only a marker and a file's name, perhaps with a place: a passage label's shape.
_LABEL_LINE = re.compile(r"^\s*\[\d{1,3}\]\s+(?P<name>\S+)(?:\s+\([^()\n]*\))?\s*$")


def without_echo(answer: str, passages: Sequence[Passage]) -> str:
    """`answer` without the lines shaped as the prompt's passage labels ("[2] employees.csv
    (rows 2-6)", `label`, naming a file of its passages) when its prose cites nothing by
    number: the starter sometimes echoes the prompt's list of passages (with made-up
    places), every file in it, which is no citation of them (one answer of the project's
    set cited three files so, one wrong). Beside a [n] in the prose, such lines are a list
    of references and stay."""
    names = {Path(p.path).name for p in passages}

    def echoed(line: str) -> bool:
        match = _LABEL_LINE.match(line)
        return match is not None and match.group("name") in names

    lines = answer.split("\n")
    rest = [line for line in lines if not echoed(line)]
    if len(rest) == len(lines):
        return answer
    prose = "\n".join(rest)
    return answer if cited_numbers(prose) else prose


def citations(answer: str, passages: Sequence[Passage], included: Iterable[int], question: str = "") -> list[Citation]:
    """The citations of `answer`: `passages` numbered from 1 as the prompt numbered them,
    `included` the chunk ids the prompt really held. An answer with no marker that names
    one of them is attributed by what it quotes (`quoted`); one that quotes none either is
    left to the meaning's match (engine/library/matched.py, run by the library service)."""
    held = set(included)
    out = []
    for number in cited_numbers(answer):
        if not 1 <= number <= len(passages):
            continue
        p = passages[number - 1]
        if p.chunk_id in held:
            out.append(cite(number, p))
    if not out:
        out = [cite(n, passages[n - 1], CitedBy.QUOTED) for n in quoted(answer, question, passages, held)]
    return out


def cite(number: int, p: Passage, by: CitedBy = CitedBy.MARKER) -> Citation:
    """`p`, numbered `number` in the prompt, as a citation made `by` the model or Wren."""
    return Citation(number, p.path, dict(p.location), p.where, p.text, p.chunk_id, by)


QUOTE_WORDS = 4  # words in a row an answer shares with a passage to quote it
MAX_QUOTED = 2
_WORD = re.compile(r"[^\W_]+(?:[.,:'’-][^\W_]+)*")
_COMMON = frozenset(("a", "an", "the", "of", "to", "in", "on", "at", "for", "and", "or", "is", "are", "was", "be",
                     "by", "it", "its", "this", "that", "with", "as", "from", "you", "your", "i", "we", "our",
                     "can", "do", "does", "not", "if"))


def _grams(text: str) -> set[tuple[str, ...]]:
    words = [w.lower() for w in _WORD.findall(text)]
    return {g for g in zip(*(words[i:] for i in range(QUOTE_WORDS))) if not set(g) <= _COMMON}


def quoted(answer: str, question: str, passages: Sequence[Passage], held: set[int]) -> list[int]:
    """The numbers of the passages (at most MAX_QUOTED, most shared first) an answer quotes
    without citing: it shares QUOTE_WORDS words in a row with the passage that the question
    does not hold (restating the question quotes nothing), or names the passage's file. Shared
    numbers alone are not enough: the starter's invented figures matched other files' numbers
    (6 of 14 answers cited a wrong file that way, against 1 of 6 by words in a row)."""
    mine = _own_grams(answer, question)
    scored = []
    for number, p in enumerate(passages, 1):
        if p.chunk_id not in held:
            continue
        shared = _shared(mine, answer, p.path, p.text)
        if shared:
            scored.append((-shared, number))
    return [number for _, number in sorted(scored)[:MAX_QUOTED]]


def _own_grams(answer: str, question: str) -> set[tuple[str, ...]]:
    return _grams(without_uncited(answer, [])) - _grams(question)


def _shared(mine: set[tuple[str, ...]], answer: str, path: str, text: str) -> int:
    """How much of a passage an answer quotes: its runs of QUOTE_WORDS words in the passage,
    and QUOTE_WORDS more when it names the passage's file."""
    return len(mine & _grams(text)) + (QUOTE_WORDS if Path(path).name in answer else 0)


# Shared runs of QUOTE_WORDS words that make a quote more than a turn of phrase: a run of six
# words, or several shorter ones. The starter's "on the first day of" (two runs) tied an
# answer about a backup job to the leave policy (bench/docs_replay.py, the project's set).
STRONG_QUOTE = 3


def slight_quote(answer: str, question: str, cited: Sequence[Citation]) -> bool:
    """Whether the citations `cited` that the answer quotes rest on a slight quote only (fewer
    than STRONG_QUOTE shared runs with each passage, no file named): such a quote gives way
    to a clear match of the answer's meaning with another file (LibraryService.attribute)."""
    mine = _own_grams(answer, question)
    return all(c.cited_by is CitedBy.QUOTED and _shared(mine, answer, c.path, c.passage) < STRONG_QUOTE
               for c in cited)
