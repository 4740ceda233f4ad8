"""Plain records the engine hands to front ends (no database objects leak out)."""

from __future__ import annotations

import enum
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime

from .errors import InvalidRequest
from .inference.constrain import Constraint
from .inference.sampling import SamplingParams

# A conversation's title: longer ones are cut (with "…") wherever they come from, a
# rename, a first question or a model's suggestion: a title is a label, and refusing an
# over-long one would fail a send over something the user never typed as a title.
TITLE_MAX_CHARS = 200
# Empty: the model's own chat template supplies its default system text, which is what
# small models were tuned on; a user's system prompt (settings) replaces it.
DEFAULT_SYSTEM_PROMPT = ""

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
    # The model's thinking before this answer, never part of `content` (nor of later prompts),
    # and the seconds it thought ("Thought for N s"); None: it did not think apart.
    reasoning: str = ""
    reasoning_seconds: float | None = None
    # The library passages this answer cited (engine.events.Citation), kept with it
    # (engine/store/citations.py); filled by engine.conversations' messages.
    citations: tuple = ()


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


# How much a thinking model thinks (SendOptions.thinking, a chat's "thinking" setting):
# on/off for models whose template switches thinking (Qwen3, SmolLM3), an effort for gpt-oss.
THINKING_CHOICES = ("on", "off", "low", "medium", "high")


@dataclass(frozen=True)
class SendOptions:
    """How one Send is answered, beside the conversation's own settings."""

    sampling: SamplingParams | None = None  # None: the conversation's, else the defaults
    system_prompt: str | None = None  # None: the conversation's, else the setting, else the model's own
    tools: tuple[str, ...] | None = None  # tool names; None: the conversation's "tools" setting (docs/tools.md)
    tool_choice: str = "auto"  # "auto", "none" or a tool's name (forces that call)
    attachments: tuple[str, ...] = ()  # file paths the user attached: the read_attachment tool reads only these
    # OpenAI's response_format: {"type": "json_schema", "json_schema": {"schema": {...}}} or
    # {"type": "json_object"} constrains the answer to valid JSON (engine.inference.constrain);
    # checked here, so a bad schema is refused before anything is stored.
    response_format: dict | None = None
    # One of THINKING_CHOICES for a model that takes it; None: the chat's setting, else the model's default
    thinking: str | None = None
    # The document library: None as the settings say (a project's chat searches its project,
    # another chat per library.scope), True/False on or off for this Send (engine/library).
    documents: bool | None = None
    project: str | None = None  # search this project's documents (and put the chat in it)
    # Other phrasings of the question by the model, searched too (engine/library/expand.py);
    # None: the library.expand_query setting (off by default).
    expand_query: bool | None = None
    constraint: Constraint | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.thinking is not None and self.thinking not in THINKING_CHOICES:
            raise InvalidRequest(f"SendOptions.thinking must be one of {', '.join(THINKING_CHOICES)} or None, "
                                 f"not {self.thinking!r}")
        object.__setattr__(self, "constraint", Constraint.from_response_format(self.response_format))


@dataclass(frozen=True)
class ThinkingSupport:
    """How the loaded model thinks (engine.models.thinking()): `thinks` when it writes its
    thinking apart from its answer, `choices` the chat's thinking settings it takes
    (("on", "off"), ("low", "medium", "high") or () where it cannot be changed)."""

    thinks: bool
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class ModelStatus:
    """The loaded model: its name, backend, context window and how long it took to load."""

    name: str
    backend: str
    context_length: int
    load_seconds: float


def can_continue(message: MessageInfo) -> bool:
    """An answer that ended before it was done: stopped, interrupted (a crash, a broken
    stream) or cut at its max_tokens."""
    if message.role is not Role.ASSISTANT:
        return False
    if message.status in (MessageStatus.STOPPED, MessageStatus.INTERRUPTED):
        return True
    return cut_at_limit(message)


KEPT_TOKENS_KEY = "kept_tokens"  # meta: a continued answer's tokens from before its last Continue


def cut_at_limit(message: MessageInfo) -> bool:
    """An answer that ended because it reached its max_tokens (its last part, for a continued
    answer: completion_tokens counts the whole answer, meta[KEPT_TOKENS_KEY] what came before)."""
    limit = (message.sampling or {}).get("max_tokens")
    kept = (message.meta or {}).get(KEPT_TOKENS_KEY)
    written = (message.completion_tokens or 0) - (kept if isinstance(kept, int) else 0)
    return (message.role is Role.ASSISTANT and message.status is MessageStatus.COMPLETE
            and isinstance(limit, int) and written >= limit > 0)
