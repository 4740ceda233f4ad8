"""Plain records the engine hands to front ends (no database objects leak out)."""

from __future__ import annotations

import enum
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime

from .errors import InvalidRequest

# A conversation's title: longer ones are cut (with "…") wherever they come from, a
# rename, a first question or a model's suggestion: a title is a label, and refusing an
# over-long one would fail a send over something the user never typed as a title.
TITLE_MAX_CHARS = 200

# Conversations the terminal creates carry settings[ORIGIN_KEY] == TERMINAL_ORIGIN; the
# window lists them in a group of their own, apart from its chats.
ORIGIN_KEY = "origin"
TERMINAL_ORIGIN = "terminal"


class Role(enum.Enum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"


class MessageStatus(enum.Enum):
    COMPLETE = "complete"
    STREAMING = "streaming"
    STOPPED = "stopped"  # the user pressed stop; the partial text is kept
    INTERRUPTED = "interrupted"  # Wren died mid-stream; found on the next start
    FAILED = "failed"
    BLOCKED = "blocked"  # a safety rule blocked it; the text is not kept


@dataclass(frozen=True)
class ConversationInfo:
    id: int
    title: str
    created_at: datetime
    updated_at: datetime
    model: str | None
    pinned: bool = False
    settings: dict = field(default_factory=dict)


@dataclass(frozen=True)
class MessageInfo:
    id: int
    conversation_id: int
    parent_id: int | None
    role: Role
    content: str
    status: MessageStatus
    created_at: datetime
    model: str | None = None
    backend: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    time_to_first_token: float | None = None
    tokens_per_second: float | None = None
    error: str | None = None
    sampling: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)
    sibling_index: int = 0  # position among messages with the same parent
    sibling_count: int = 1


def check_unicode(text: str, what: str) -> str:
    """`text` if it is a str of valid Unicode; else InvalidRequest naming `what`.
    A lone surrogate (half of a UTF-16 pair, or an undecodable byte kept by
    os.fsdecode) cannot be stored or shown: callers decode with replacement first."""
    if not isinstance(text, str):
        raise InvalidRequest(f"{what} must be text, not {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidRequest(
            f"{what} is not valid Unicode: a lone surrogate (U+{ord(text[exc.start]):04X}) at "
            f"position {exc.start}; decode it with errors='replace' first"
        ) from None
    return text


def clean_title(title: str) -> str:
    """A title on one line, without control characters, at most TITLE_MAX_CHARS long."""
    check_unicode(title, "the conversation title")
    text = " ".join("".join(" " if unicodedata.category(c) == "Cc" else c for c in title).split())
    if len(text) > TITLE_MAX_CHARS:
        text = text[: TITLE_MAX_CHARS - 1].rstrip() + "\u2026"
    return text


@dataclass(frozen=True)
class EngineNotice:
    """Something a front end should tell the user outside any answer (Engine.notices,
    Engine.on_notice): `kind` is "model_damaged" (a model file fails its checksum: suggest
    re-importing it) or "disk_freed" (start-up removed unfinished model folders)."""
    kind: str
    message: str
    path: str | None = None  # the file or folder it is about
    created_at: datetime = field(default_factory=datetime.now)
