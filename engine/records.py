"""Plain records the engine hands to front ends (no database objects leak out)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime


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
