"""The passage an answer's meaning matches, for an answer that cites none by number and
quotes none: the last of the ways Wren ties an answer to its sources (engine/library/cite.py).

The answer is embedded once, after it ends, with the library's embedder (truncated as the
embedder truncates, MiniLMEmbedder.max_tokens); the prompt's passages' vectors are those the
library already stores. The nearest passage is cited only when its cosine with the answer is
at least THRESHOLD and at least MARGIN above the nearest passage of another file: an answer
about the topic of two files cites neither, since a citation of the wrong file is what users
complain of. Such a citation says the answer is about that passage, not that the passage
supports what it says (the starter's answers often change the passage's figures).

Two refinements, chosen on the project's test set by replaying its stored answers
(bench/docs_replay.py) and checked on the held-out library:
- each passage is compared as `titled` text, its file's name and heading path before it: a
  PDF page or a CSV row says nothing of what its file is about, and the answer often does;
- an answer with no clear match as a whole is tried sentence by sentence (`sentences`), in
  order, with the same threshold and margin: the starter often opens with a generic line
  and states the passage's fact in one sentence, which the whole answer's vector blurs."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .retrieve import Passage

# Chosen on the project's test set (bench/docs_cited.py's matched_sweep, 30 answers of the
# starter): every threshold from 0.30 to 0.40 with a margin of 0.08 to 0.12 cites the right
# file for 0.733 of the questions, and each citation it adds names the right file; a margin of
# 0.06 adds wrong ones, a threshold of 0.45 and up loses right ones. The middle of that
# plateau is taken, then checked on the held-out library (bench/docs_heldout.py).
THRESHOLD = 0.4
MARGIN = 0.1
SENTENCE_WORDS = 4  # a shorter piece ("Here is how:", a list's number) says too little to match
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


@dataclass(frozen=True)
class Nearness:
    """One passage of the prompt and its cosine with the answer."""

    number: int  # as the prompt numbered it, from 1
    path: str
    cosine: float


def nearness(answer_vector: np.ndarray, passage_vectors: dict[int, np.ndarray], passages: Sequence[Passage],
             held: set[int]) -> list[Nearness]:
    """The cosine of the answer with each passage the prompt held that has a vector, nearest
    first. Vectors are of unit length (Embedder.embed), so a dot product is the cosine."""
    out = [Nearness(number, p.path, float(np.dot(answer_vector, passage_vectors[p.chunk_id])))
           for number, p in enumerate(passages, 1) if p.chunk_id in held and p.chunk_id in passage_vectors]
    return sorted(out, key=lambda n: -n.cosine)


def best_match(near: Sequence[Nearness], threshold: float = THRESHOLD, margin: float = MARGIN) -> int | None:
    """The number of the passage to cite from `near` (nearest first), or None: the nearest
    must reach `threshold` and lead the nearest passage of any other file by `margin` (a
    second passage of the same file is no rival: citing either names the right file)."""
    if not near or near[0].cosine < threshold:
        return None
    rival = next((n.cosine for n in near[1:] if n.path != near[0].path), None)
    if rival is not None and near[0].cosine - rival < margin:
        return None
    return near[0].number


def titled(passage: Passage) -> str:
    """The passage's text as compared with an answer: its file's name (without the suffix,
    "_" and "-" as spaces) and heading path before it, unless the text already opens with
    that path (Markdown chunks do)."""
    name = Path(passage.path).stem.replace("_", " ").replace("-", " ").strip()
    heading = " › ".join(passage.location.get("heading") or ())
    lead = f"{name} › {heading}" if heading and not passage.text.startswith(heading) else name
    return f"{lead}\n{passage.text}" if lead else passage.text


def sentences(answer: str) -> list[str]:
    """The answer's sentences and lines of at least SENTENCE_WORDS words, in order."""
    pieces = (piece.strip() for piece in _SENTENCE_END.split(answer))
    return [piece for piece in pieces if len(piece.split()) >= SENTENCE_WORDS]


def first_match(nears: Sequence[Sequence[Nearness]], threshold: float = THRESHOLD,
                margin: float = MARGIN) -> int | None:
    """The passage number of the first of `nears` (the whole answer's, then each sentence's,
    in order) that names one by `best_match`, or None."""
    for near in nears:
        number = best_match(near, threshold, margin)
        if number is not None:
            return number
    return None
