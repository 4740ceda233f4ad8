"""Proposals for "suggest memories": facts the user stated about themselves in a message.

A plain heuristic, tuned for precision: a proposal is a first-person statement of something
lasting (name, work, home, family, diet, health, languages, tastes), never a question, a
hypothetical or a passing state ("I'm tired", "I have a question"). The user accepts or
ignores each one; nothing is saved without that.
"""

from __future__ import annotations

import re

from .intents import sentences
from .records import Suggestion

MAX_PER_MESSAGE = 3
MAX_CHARS = 200  # a longer sentence is a story, not a fact worth keeping verbatim

_FAMILY = (
    r"(?:wife|husband|partner|girlfriend|boyfriend|son|daughter|kids?|children|child|baby|"
    r"mother|father|mom|mum|dad|parents|sister|brother|grandmother|grandfather|boss|manager|"
    r"dog|cat|puppy|kitten|pet)"
)
_LASTING = [
    r"my name is\s+\w+",
    r"(?:please\s+)?call me\s+[A-Z]\w+",
    rf"my {_FAMILY}(?:'s name)? is\s+\w+",
    rf"my {_FAMILY}\s+(?:is called|is named|works|lives|is allergic)\b",
    r"my fav(?:ou)?rite\s+\w+(?:\s+\w+)?\s+is\s+\w+",
    r"(?:i'm|i am)\s+(?:a|an)\s+(?!bit\b|little\b|lot\b|quick\b|question\b|newbie at this\b)[\w-]+",
    r"(?:i'm|i am)\s+(?:vegetarian|vegan|pescatarian|diabetic|pregnant|married|single|divorced|"
    r"retired|left-handed|right-handed|colou?r-?blind|deaf|blind|lactose intolerant|gluten intolerant|"
    r"allergic to\s+\w+|learning\s+\w+|from\s+[A-Z]\w+|based in\s+[A-Z]\w+|\d{1,3} years old)",
    r"i (?:work|teach|study)\s+(?:as|at|for|in)\s+\w+",
    r"i live in\s+\w+",
    r"i was born in\s+\w+",
    rf"i have (?:a|an|one|two|three|four|\d+)\s+(?:\w+\s+)?{_FAMILY}",
    r"i (?:speak|prefer|love|enjoy|hate|can't stand|don't eat|don't drink|never eat)\s+"
    r"(?!it\b|this\b|that\b|them\b|your\b|the (?:answer|idea|way)\b|when\b|how\b)\w+",
]
_FACT = re.compile(r"^(?:(?:also|and|btw|by the way|well|so|oh|actually),?\s+)*(?:" + "|".join(_LASTING) + r")", re.I)
_NOT_LASTING = re.compile(
    r"\b(?:if|would|could|might|maybe|perhaps|suppose|imagine|pretend|let's say|as if|wish|"
    r"today|tonight|right now|this (?:morning|afternoon|evening|week)|at the moment|"
    r"yesterday|tomorrow|for a while|not sure|trying to decide|my character|in the story|"
    r"the user|roleplay|role-play)\b",
    re.I,
)


def suggest(text: str, *, message_id: int | None = None, known: set[str] | None = None) -> list[Suggestion]:
    """Up to three self-stated lasting facts from a user message, in the user's words.

    `known`: lower-cased texts already saved, so a fact is not proposed twice.
    """
    known = known or set()
    out: list[Suggestion] = []
    for _, sentence in sentences(text):
        clean = " ".join(sentence.split()).rstrip(" .!")
        if (
            sentence.rstrip().endswith("?")
            or len(clean) > MAX_CHARS
            or not _FACT.match(clean)
            or _NOT_LASTING.search(clean)
        ):
            continue
        clean = re.sub(r"^(?:(?:also|and|btw|by the way|well|so|oh|actually),?\s+)+", "", clean, flags=re.I)
        clean = clean[:1].upper() + clean[1:]
        if clean.lower() in known or any(s.text == clean for s in out):
            continue
        out.append(Suggestion(clean, message_id))
        if len(out) >= MAX_PER_MESSAGE:
            break
    return out
