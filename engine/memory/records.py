"""Plain records for memories: what the engine hands to the window, the CLI and the tests."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime

from ..errors import InvalidRequest

MAX_MEMORY_CHARS = 1_000  # a memory is a short fact; a document belongs in a chat or a file


class MemoryRefused(InvalidRequest):
    """A memory Wren will not save (too long, empty); the message says why."""


class Origin(enum.Enum):
    CHAT = "chat"  # "remember that …" in a message
    ACTION = "action"  # "Remember this" on a message
    SUGGESTION = "suggestion"  # proposed after a turn, accepted by the user
    MANUAL = "manual"  # typed in settings or `wren memories add`


@dataclass(frozen=True)
class MemoryInfo:
    id: int
    text: str
    created_at: datetime
    updated_at: datetime
    source_conversation_id: int | None = None
    source_message_id: int | None = None
    last_used_at: datetime | None = None
    times_used: int = 0
    origin: Origin = Origin.MANUAL

    def to_dict(self) -> dict:
        return {
            "id": self.id, "text": self.text, "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "source_conversation_id": self.source_conversation_id,
            "source_message_id": self.source_message_id,
            "last_used_at": self.last_used_at.isoformat() if self.last_used_at else None,
            "times_used": self.times_used, "origin": self.origin.value,
        }


class SourceKind(enum.Enum):
    MEMORY = "memory"
    PAST_CHAT = "past_chat"  # a message from another conversation ("reference chat history")


@dataclass(frozen=True)
class Retrieved:
    """One item retrieval chose for a prompt, with why (its scores) and its cost."""

    kind: SourceKind
    id: int  # memory id, or message id for PAST_CHAT
    text: str
    score: float
    tokens: int
    conversation_id: int | None = None  # PAST_CHAT only


class IntentKind(enum.Enum):
    REMEMBER = "remember"  # save `text`
    FORGET = "forget"  # delete memories matching `topic`
    FORGET_ALL = "forget_all"  # clear every memory: the window asks the user to confirm


@dataclass(frozen=True)
class MemoryIntent:
    kind: IntentKind
    text: str = ""  # the fact to save (REMEMBER)
    topic: str = ""  # what to forget (FORGET)
    span: tuple[int, int] = (0, 0)  # where in the message it was said


@dataclass(frozen=True)
class Suggestion:
    """A fact the user stated about themselves, proposed for the user to accept."""

    text: str
    source_message_id: int | None = None


@dataclass(frozen=True)
class TurnOutcome:
    """What memory did with one user message; the chat shows it as small notices."""

    saved: tuple[MemoryInfo, ...] = ()
    forgotten: tuple[MemoryInfo, ...] = ()
    refused: tuple[tuple[str, str], ...] = ()  # (text, reason)
    unmatched_forgets: tuple[str, ...] = ()  # "forget X" where nothing matched X
    confirm_clear_all: bool = False  # "forget everything": ask before clearing
    suggestions: tuple[Suggestion, ...] = ()
    skipped: str = ""  # why memory did nothing (memory off, temporary chat)
    intents: tuple[MemoryIntent, ...] = field(default=())

    @property
    def empty(self) -> bool:
        return not (self.saved or self.forgotten or self.refused or self.unmatched_forgets
                    or self.confirm_clear_all or self.suggestions)

    def to_dict(self) -> dict:
        """JSON for the assistant message's `meta["memory"]`, so notices survive a reload."""
        return {
            "saved": [{"id": m.id, "text": m.text} for m in self.saved],
            "forgotten": [{"id": m.id, "text": m.text} for m in self.forgotten],
            "refused": [{"text": t[:200], "reason": r} for t, r in self.refused],
            "unmatched_forgets": list(self.unmatched_forgets),
            "confirm_clear_all": self.confirm_clear_all,
            "suggestions": [{"text": s.text, "source_message_id": s.source_message_id}
                            for s in self.suggestions],
            "skipped": self.skipped,
        }
