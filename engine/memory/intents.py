"""Recognise explicit memory requests in a user message: "remember …", "from now on …",
"forget that …", "forget everything about X".

Precision first: a request must open a sentence (after "please", "hey Wren," and the like),
so "I remember…", "do you remember when…" and "forget it" never fire, and what follows must
read as a fact ("my wife's name is Ana"), not a memory of an event ("when we…").
"""

from __future__ import annotations

import re

from . import fts
from .records import IntentKind, MemoryIntent

# Long pastes quote all kinds of prose; only their first and last sentences can be requests.
SCAN_ALL_CHARS = 1_000

_LEAD = re.compile(
    r"^(?:(?:ok(?:ay)?|so|and|also|oh|btw|by the way|hey|hi|hello|wren|please|pls|kindly|"
    r"just|one more thing|actually|alright|right|now|then|lastly|finally)\b[\s,:;!-]*)+",
    re.I,
)
_ASK = r"(?:(?:can|could|would|will) you(?: please)?\s+|i(?: want| need| would like|'d like) you to\s+|" \
       r"you (?:can|may|should|need to)\s+|make sure (?:you|to)\s+)?"
_SAVE_VERB = (
    r"(?:remember|memori[sz]e|keep in mind|bear in mind|make a note|take note|note down|"
    r"save (?:this |it )?(?:to|in|into) (?:your )?memory|add (?:this |it )?to (?:your )?memory|"
    r"store (?:this |it )?in (?:your )?memory|commit (?:this |it )?to memory|"
    r"don't forget|do not forget|never forget)"
)
_REMEMBER = re.compile(
    rf"^{_ASK}(?:always\s+)?{_SAVE_VERB}(?:\s+(?:that|this|the following))?"
    r"(?:\s*[:\-–]\s*|\s+)(?P<fact>[\w\"'(].*)$",
    re.I | re.S,
)
_STANDING = r"(?:from now on|going forward|from here on(?: out)?|henceforth|" \
            r"in (?:all )?future (?:chats|conversations|answers|replies|responses)|" \
            r"for (?:all )?future (?:chats|conversations|answers|replies|responses))"
_STANDING_FIRST = re.compile(rf"^(?:for future reference|{_STANDING})\s*[,:\-–]?\s*(?P<fact>\w.*)$", re.I | re.S)
_STANDING_LAST = re.compile(rf"^(?P<fact>\w.*?)[\s,]+{_STANDING}\s*$", re.I | re.S)

_FORGET_ALL = re.compile(
    rf"^{_ASK}(?:forget|delete|erase|wipe|clear|remove)\s+(?:"
    r"everything|all (?:of )?(?:your |my |the )?memor(?:y|ies)|all (?:that )?you (?:know|remember)"
    r"(?: about me)?|everything (?:you (?:know|remember) )?about me|your (?:whole |entire )?memory|"
    r"what(?:ever)? you know about me)\s*$",
    re.I,
)
_FORGET = [
    # forget that I live in Berlin / forget the fact that …
    re.compile(rf"^{_ASK}(?:forget|unlearn)\s+(?:that|the fact that)\s+(?P<clause>\w.*)$", re.I | re.S),
    # forget everything about my sister / forget what I said about X
    re.compile(
        rf"^{_ASK}forget\s+(?:everything|all|anything|whatever|what)\s+"
        r"(?:you (?:know|remember|learned|saved)\s+|i(?:'ve)? (?:said|told you|mentioned)\s+)?"
        r"(?:about|regarding|concerning|related to|on the subject of|to do with)\s+(?P<topic>\w.*)$",
        re.I | re.S,
    ),
    # forget my address / forget about my ex
    re.compile(rf"^{_ASK}forget\s+(?:about\s+)?(?P<topic>(?:my|our)\s+\w.*)$", re.I | re.S),
    # delete the memory about X / remove any notes on X
    re.compile(
        rf"^{_ASK}(?:delete|remove|erase|drop|clear|wipe)\s+(?:(?:the|that|this|your|any|all|my)\s+)*"
        r"(?:memory|memories|notes?|facts?)\s+(?:about|of|on|regarding|that says|saying|that)\s+(?P<topic>\w.*)$",
        re.I | re.S,
    ),
    # delete what you know about X
    re.compile(
        rf"^{_ASK}(?:delete|remove|erase|wipe|forget)\s+(?:what|whatever|everything)\s+you\s+"
        r"(?:know|remember|saved|stored|have)\s+(?:about|on)\s+(?P<topic>\w.*)$",
        re.I | re.S,
    ),
    # stop remembering that … / don't remember X anymore
    re.compile(
        rf"^{_ASK}(?:stop remembering|no longer remember|don't remember|do not remember)\s+"
        r"(?:that\s+)?(?P<clause>\w.*?)(?:\s+any\s?more)?$",
        re.I | re.S,
    ),
]

_NOT_A_FACT_START = re.compile(
    r"^(?:when|what|who|whom|whose|where|why|how|which|if|whether|to\b|the time|that time|"
    r"back when|the day|the days|me\b|it\b|this\b|that\b|them\b|everything\b|anything\b)",
    re.I,
)
# A fact says something about someone: a person word or a verb of being/having/liking.
_FACT_WORD = re.compile(
    r"\b(?:i|i'm|im|i've|i'd|i'll|my|me|mine|we|we're|our|us|you|your|is|are|am|was|were|"
    r"has|have|had|don't|doesn't|can't|won't|like|likes|love|loves|hate|hates|prefer|prefers|"
    r"use|uses|live|lives|work|works|need|needs|want|wants|always|never|should|must|call|"
    r"answer|reply|respond|write|speak|avoid|keep|\w+'s|\w+'re)\b",
    re.I,
)
_VERB = re.compile(
    r"(?:\b(?:is|are|am|was|were|be|has|have|had|do|does|did|don't|doesn't|didn't|can't|"
    r"cannot|won't|will|would|should|must|can)\b|'(?:m|s|re|ve|d|ll)\b)",
    re.I,
)
_CONTENT = re.compile(r"[^\W\d_]{3,}", re.UNICODE)
_VAGUE_TOPIC = re.compile(r"^(?:it|that|this|them|those|these|me|everything|anything|all|him|her)\W*$", re.I)


def sentences(text: str) -> list[tuple[int, str]]:
    """(offset, sentence) pairs; fenced code and quoted lines are not the user speaking."""
    out = []
    in_fence = False
    pos = 0
    for line in text.splitlines(keepends=True):
        start, pos = pos, pos + len(line)
        stripped = line.strip()
        if stripped.startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence or not stripped or stripped.startswith(">"):
            continue
        for m in re.finditer(r"[^.!?]+(?:[.!?]+|$)", line):
            piece = m.group().strip()
            if piece:
                out.append((start + m.start() + (len(m.group()) - len(m.group().lstrip())), piece))
    return out


def detect(text: str) -> list[MemoryIntent]:
    """Every memory request in a user message, in order; [] for ordinary messages."""
    found = sentences(text)
    if len(text) > SCAN_ALL_CHARS and len(found) > 2:
        found = [found[0], found[-1]]
    intents = []
    for offset, sentence in found:
        intent = _one(sentence)
        if intent is not None:
            span = (offset, offset + len(sentence))
            intents.append(MemoryIntent(intent.kind, intent.text, intent.topic, span))
    return intents


def _one(sentence: str) -> MemoryIntent | None:
    question = sentence.rstrip().endswith("?")
    body = _LEAD.sub("", sentence.strip()).strip()
    body_core = body.rstrip(" .!?")
    if not body_core:
        return None
    if _FORGET_ALL.match(body_core):
        return MemoryIntent(IntentKind.FORGET_ALL)
    for pattern in _FORGET:
        m = pattern.match(body_core)
        if not m:
            continue
        groups = m.groupdict()
        # "forget about my problems for a while, tell me a joke": the topic ends at the comma.
        topic = _tidy(re.split(r"[,;]", groups.get("topic") or groups.get("clause") or "")[0])
        if "clause" in groups and not _reads_as_fact(topic):
            continue
        if _VAGUE_TOPIC.match(topic) or not fts.content_terms(topic):
            continue
        return MemoryIntent(IntentKind.FORGET, topic=topic)
    m = _REMEMBER.match(body_core)
    if m:
        asked = re.match(r"^(?:can|could|would|will) you\b", body_core, re.I) is not None
        fact = _tidy(m.group("fact"))
        # "Do you remember…?" never gets here; "Remember that time…?" is a question, not a request.
        if (question and not asked) or not _reads_as_fact(fact):
            return None
        if asked and not re.match(rf"^{_ASK}\w+(?:\s+in mind)?\s+that\s", body_core, re.I):
            return None  # "Can you remember things between chats?" asks about Wren, it saves nothing
        return MemoryIntent(IntentKind.REMEMBER, text=_capitalise(fact))
    for pattern in (_STANDING_FIRST, _STANDING_LAST):
        m = pattern.match(body_core)
        if m and not question:
            fact = _tidy(m.group("fact"))
            if len(fact.split()) >= 2 and _CONTENT.search(fact):
                return MemoryIntent(IntentKind.REMEMBER, text=_capitalise(fact))
    return None


def _reads_as_fact(text: str) -> bool:
    # Two words make a fact only with a verb in them: "I'm vegan" yes, "my name" no.
    return (
        (len(text.split()) >= 3 or (len(text.split()) == 2 and (
            _VERB.search(text) is not None or re.match(r"(?:i|we|you|he|she|they)\s", text, re.I) is not None)))
        and not _NOT_A_FACT_START.match(text)
        and _FACT_WORD.search(text) is not None
        and _CONTENT.search(text) is not None
    )


def _tidy(text: str) -> str:
    text = " ".join(text.split()).strip(" \"'“”‘’")
    return text.rstrip(" .!?,;:")


def _capitalise(text: str) -> str:
    return text[:1].upper() + text[1:] if text else text
