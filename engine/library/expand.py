"""Query expansion (issue 30, optional): before a library search, the loaded model writes a
few other phrasings of the question (other words for its subject, the keywords a document
would use), and the search fuses their rankings with the question's own (reciprocal rank,
engine/library/retrieve.py). Off unless the `library.expand_query` setting or the Send
asks for it (`wren ask --expand-query`, `wren docs search --expand`).

The request is short and bounded: greedy, at most EXPAND_TOKENS tokens, EXPAND_SECONDS
of waiting, MAX_PHRASINGS lines kept of at most PHRASING_CHARS each. Anything going wrong
(no model, a failed or slow request, nothing usable written) leaves the question's own
search: an expansion can add passages, never cost the Send."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable

from ..inference.sampling import SamplingParams
from ..logs import log_event

log = logging.getLogger(__name__)

EXPAND_SETTING = "library.expand_query"  # False (default) or True
EXPAND_TOKENS = 48
EXPAND_SECONDS = 20.0
MAX_PHRASINGS = 3
PHRASING_CHARS = 200

Complete = Callable[[list[dict], SamplingParams], Awaitable[str]]

PROMPT = ("Rewrite the user's question as {n} short search queries for finding the answer in their documents: "
          "other words for the same thing, and the keywords a document about it would use. "
          "Write one query per line and nothing else.")

_LEAD = re.compile(r"^\s*(?:[-*•]+|\d+[.)]|(?:search\s+)?quer(?:y|ies)\s*\d*\s*:)\s*", re.IGNORECASE)


def request(question: str) -> list[dict]:
    return [{"role": "system", "content": PROMPT.format(n=MAX_PHRASINGS)}, {"role": "user", "content": question}]


def phrasings(text: str, question: str) -> list[str]:
    """The usable lines of the model's reply: bullets and numbers taken off, quotes too,
    the question itself, repeats and a list's preamble left out, at most MAX_PHRASINGS of
    PHRASING_CHARS."""
    out: list[str] = []
    seen = {" ".join(question.lower().split())}
    for line in text.splitlines():
        line = _LEAD.sub("", line).strip().strip("\"'“”").strip()
        key = " ".join(line.lower().split())
        if len(key) < 3 or key in seen or key.endswith(":"):  # ":" ends a preamble ("…the following queries:")
            continue
        seen.add(key)
        out.append(line[:PHRASING_CHARS])
        if len(out) == MAX_PHRASINGS:
            break
    return out


async def expand(complete: Complete | None, question: str, seconds: float = EXPAND_SECONDS) -> list[str]:
    """Other phrasings of `question` by the loaded model through `complete`; [] when there
    is no model to ask or the request fails, times out or writes nothing usable."""
    if complete is None or not question.strip():
        return []
    params = SamplingParams(temperature=0.0, max_tokens=EXPAND_TOKENS)
    try:
        text = await asyncio.wait_for(complete(request(question), params), seconds)
    except Exception as exc:
        log.warning("query expansion failed, searching the question alone: %s", exc)
        log_event("library.expand_failed", error=type(exc).__name__)
        return []
    return phrasings(text, question)
