"""Titles the real starter model writes for 30 everyday first messages (issue 16), judged by
a rule-based check written down here, independent of engine/titles.py's own checks."""

from __future__ import annotations

import asyncio
import re
import sys

import pytest

pytestmark = pytest.mark.slow

MESSAGES = [
    "How do I keep basil alive indoors?",
    "What's a good recipe for vegetarian lasagna?",
    "Can you help me write an email asking my landlord to fix the heating?",
    "I'm thinking of becoming vegetarian. Is it healthy?",
    "How long should I boil an egg for a runny yolk?",
    "What are some tips for sleeping better?",
    "Explain how compound interest works.",
    "Suggest a name for my new puppy, a golden retriever.",
    "How can I stop procrastinating on my homework?",
    "What should I pack for a weekend camping trip?",
    "Why is the sky blue?",
    "How do I remove a red wine stain from a carpet?",
    "Give me a 20 minute workout I can do at home.",
    "What is the difference between a virus and bacteria?",
    "How do I start learning to play the guitar?",
    "Write a short birthday message for my grandmother.",
    "What are the main causes of climate change?",
    "How do I change a flat tire on my bike?",
    "Recommend some books like The Hobbit.",
    "How much water should I drink every day?",
    "What's the best way to learn Spanish quickly?",
    "How do I make my houseplants grow faster?",
    "Can you explain what a mortgage is?",
    "Plan a three day trip to Rome for me.",
    "How do I get rid of fruit flies in the kitchen?",
    "What are good snacks for a long hike?",
    "How can I save money on groceries?",
    "Tell me a fun fact about octopuses.",
    "How do I write a good cover letter?",
    "What should I do if my cat stops eating?",
]

STOP = set(["a", "an", "the", "and", "or", "of", "to", "in", "on", "for", "with", "my", "me", "i", "how", "do", "does", "what", "why", "is", "are", "can", "you", "your", "should", "can't", "could", "would", "will", "be", "it", "this", "that", "some", "good", "best", "way", "about", "from", "at", "by", "get", "make", "tell", "give", "write"])
FIRST_PERSON = {"i", "i'm", "i've", "me", "my", "we", "our", "us"}


def _stems(text: str) -> set[str]:
    out = set()
    for w in re.findall(r"[a-z0-9']+", text.lower()):
        if w in STOP or len(w) < 3:
            continue
        out.add(w[:5])  # a crude stem: "vegetarian"/"vegetarianism", "plants"/"plant"
    return out


def reads_like_a_title(title: str, question: str) -> str | None:
    """The written-down rule: None when the title passes, else why it fails.
    1 to 6 words; at most 60 characters; no quotes, no "Title"-like prefix or colon lead-in;
    no first person; not a sentence (no end period); not talking about titles or chats;
    at least one content word (5-letter stem) shared with the question."""
    ws = title.split()
    if not 1 <= len(ws) <= 6:
        return f"{len(ws)} words"
    if len(title) > 60:
        return "too long"
    if re.search(r"[\"“”«»]", title):
        return "quotes"
    if re.match(r"(?i)\s*(title|subject|heading|sure|here)\b", title) or ":" in title:
        return "prefix"
    if {w.lower().strip(".,!?") for w in ws} & FIRST_PERSON:
        return "first person"
    if title.rstrip().endswith("."):
        return "ends like a sentence"
    if re.search(r"(?i)\b(title|chat|conversation)\b", title):
        return "talks about titles"
    if not _stems(title) & _stems(question):
        return "shares no content word with the question"
    return None


def test_starter_titles_for_thirty_first_messages(starter_models_dir, wren_home):
    from wren.engine.api import Engine
    from wren.engine.modelhub.registry import ModelRegistry
    from wren.engine.store import Store
    from wren.engine.titles import choose, clean, plausible, title_request

    async def main():
        engine = Engine(Store(wren_home / "wren.sqlite3"), ModelRegistry(starter_models_dir))
        await engine.models.load(backend="torch-cpu")
        titles = engine.chat.turns.titles
        rows = []
        for question in MESSAGES:
            raw = await engine.chat.turns.complete(title_request(question, ""), titles.PARAMS)
            final = choose(raw, question)  # what Titles.ask_model keeps
            rows.append((question, raw, clean(raw), plausible(clean(raw), question), final))
            print(f"  {question!r}: raw={raw.strip()!r} -> {final!r}", file=sys.stderr, flush=True)
        await engine.close()
        return rows

    rows = asyncio.run(main())
    model_pass = sum(1 for q, _, cleaned, ok, _ in rows if ok and reads_like_a_title(cleaned, q) is None)
    raw_pass = sum(1 for q, raw, *_ in rows if reads_like_a_title(raw.strip(), q) is None)
    final_fails = [(q, f, reads_like_a_title(f, q)) for q, *_, f in rows if reads_like_a_title(f, q) is not None]
    print(f"starter titles: raw model replies passing {raw_pass}/30; cleaned model titles kept {model_pass}/30; "
          f"final titles passing {30 - len(final_fails)}/30", file=sys.stderr)
    assert not final_fails, final_fails
