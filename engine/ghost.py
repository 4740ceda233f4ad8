"""Ghost text: while the user types and pauses, the model proposes how their own draft
might go on (a few words, up to the end of a sentence), shown grey after the cursor.

The prompt is the chat so far with the draft as an *unfinished user turn*: the template's
opening of a user message, then the draft, and no end of turn. The model therefore writes
more of the user's text instead of answering it. It runs on the model worker as a short
side request behind everything else (the answer, titles, pre-warming), a newer draft
cancels the older request, and a result is never handed back for a draft that changed.

The chat service (engine/chat.py) runs it; this module holds its rules. Also here: the keys
of the per-chat settings the window's chat settings panel edits (engine/conversations.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .inference.worker import GenerationRequest

if TYPE_CHECKING:
    from .tokenize import Tokenizer

ENABLED_KEY = "composer.ghost_text"  # setting: suggest continuations at all (default on)
TEMPORARY_ENABLED_KEY = "composer.ghost_text_temporary"  # setting: also in temporary chats (default on)
GHOST_PRIORITY = 20  # behind the answer (0), titles (1) and pre-warming (10)
MAX_TOKENS = 24  # a suggestion is a few words; more costs time the user is not waiting for
MAX_CHARS = 120
HISTORY_MESSAGES = 4  # the last turns of the chat give the draft its context
HISTORY_CHARS = 1000  # of each of them
WARM_WAIT = 10.0  # seconds a suggestion waits at most for the draft's pre-warming to finish
MAX_DRAFT_CHARS = 4000  # a longer draft is continued from its last this many characters
_SENTENCE_END = re.compile(r"[.!?…](?=[\s\"')\]]|$)")
_SENTINEL = "\u2063wren-draft\u2063"

# Per-chat settings (conversation.settings): what the chat settings panel edits.
SYSTEM_PROMPT_KEY = "system_prompt"  # str; read by engine.turns
SAMPLING_KEY = "sampling"  # dict of SamplingParams fields; over the model's defaults
PRESET_KEY = "sampling_preset"  # the name of the preset the sampling came from (for display)
MEMORY_KEY = "memory"  # False: this chat neither uses nor saves memories (engine.memory.service)
THINKING_KEY = "thinking"  # one of records.THINKING_CHOICES: how much a thinking model thinks (engine/turn/thinking.py)
CHAT_SETTING_KEYS = (SYSTEM_PROMPT_KEY, SAMPLING_KEY, PRESET_KEY, MEMORY_KEY, THINKING_KEY)
# Named sampling presets a chat can take (over the model's own defaults); None: none.
CHAT_SAMPLING_PRESETS: dict[str, dict[str, Any] | None] = {
    "Model defaults": None,
    "Precise": {"temperature": 0.2, "top_p": 0.9},
    "Balanced": {"temperature": 0.7, "top_p": 0.95},
    "Creative": {"temperature": 1.0, "top_p": 0.98, "min_p": 0.02},
    "Same every time": {"temperature": 0.0},
}


class Suggestion(str):
    """A continuation, as a str, that also carries the draft it was made for."""

    draft: str

    def __new__(cls, text: str, draft: str) -> Suggestion:
        obj = super().__new__(cls, text)
        obj.draft = draft
        return obj

    def fits(self, draft: str) -> bool:
        """Whether it may be shown after `draft`: only after the very text it continues."""
        return bool(self) and draft == self.draft


@dataclass
class _Pending:
    draft: str
    request: GenerationRequest | None = None


def clean_continuation(draft: str, raw: str, max_chars: int = MAX_CHARS, *, cut_short: bool = False) -> str:
    """What the model wrote, made into ghost text: one line, up to the end of the first
    sentence, at most `max_chars` (cut at a word), no doubled space after the draft.
    `cut_short`: the model was stopped before it ended (its token limit), so a last word
    with no sentence end after it may be half a word, and is left out."""
    text = raw.split("\n", 1)[0].replace("\r", "").replace("\t", " ")
    if draft.endswith((" ", "\n")):
        text = text.lstrip()
    if not draft.strip():
        return ""
    end = _SENTENCE_END.search(text)
    if end is not None:
        text = text[: end.end()]
    elif cut_short and "\n" not in raw:
        cut = text.rstrip().rfind(" ")
        text = text[:cut] if cut > 0 else ""
    if len(text) > max_chars:
        cut = text.rfind(" ", 0, max_chars)
        text = text[: cut if cut > 0 else max_chars]
    text = text.rstrip()
    return text if text.strip() else ""


def partial_turn_ids(tokenizer: Tokenizer, history: list[dict], draft: str) -> list[int] | None:
    """Ids of the chat `history` followed by a user turn holding `draft` and left open
    (no end-of-turn), so the model goes on writing the user's text. The history and the
    draft are encoded as text (typed markup stays text); only the template's own opening
    of the turn is read as special tokens. None when the template gives no clean split."""
    probe = [*history, {"role": "user", "content": _SENTINEL}]
    rendered = tokenizer.render_chat(probe, add_generation_prompt=False)
    at = rendered.find(_SENTINEL)
    if at < 0:
        return None
    head = rendered[:at]
    bos = tokenizer.encode("")
    if history:
        before = tokenizer.render_chat(history, add_generation_prompt=False)
        if not head.startswith(before):
            return partial_turn_ids(tokenizer, [], draft)  # the template re-renders earlier turns
        ids = tokenizer.encode_chat(history, add_generation_prompt=False)
        opening = head[len(before):]
    else:
        ids, opening = list(bos), head
    for part, special in ((opening, True), (draft, False)):
        piece = tokenizer.encode(part, special=special) if part else []
        if bos and piece[: len(bos)] == bos:
            piece = piece[len(bos):]
        ids.extend(piece)
    return ids
