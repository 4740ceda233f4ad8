"""Typed events streamed from `engine.chat.send` to every front end."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class FinishReason(enum.Enum):
    STOP = "stop"  # end-of-sequence token or a stop string
    LENGTH = "length"  # max_tokens or the context window ran out
    CANCELLED = "cancelled"  # the user pressed stop
    BLOCKED = "blocked"  # a safety rule blocked the answer
    ERROR = "error"  # see the Failed event that precedes it


@dataclass(frozen=True, slots=True)
class Started:
    """The turn is accepted: the user message is committed, the answer row exists."""

    conversation_id: int
    user_message_id: int
    assistant_message_id: int
    model: str
    backend: str


@dataclass(frozen=True, slots=True)
class TopLogprob:
    """One of the likeliest tokens at a step: its text (decoded alone), id and log-probability."""

    token: str
    id: int
    logprob: float

    def to_dict(self) -> dict:
        return {"token": self.token, "id": self.id, "logprob": self.logprob}


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One generated token and how likely it was (SamplingParams.logprobs).

    `token` is the text this token added to the answer, so the tokens' texts of an answer
    join to its text ("" for a token that is only part of a character, which the next one
    completes; cut where a stop string ends the answer). `logprob` is the chosen token's
    natural log-probability and `top` the likeliest tokens at that step, most likely first
    (as many as asked for; the chosen token is among them when it was likely enough).
    Both come from the model's scores after the repetition guard and any constraint, at
    temperature 1, before temperature, top-k, top-p and min-p shape the draw
    (engine.inference.sampling.Sampler)."""

    token: str
    id: int
    logprob: float
    top: tuple[TopLogprob, ...] = ()

    def to_dict(self) -> dict:
        """The JSON shape stored in an answer's metadata under "logprobs" (one per token)."""
        return {"token": self.token, "id": self.id, "logprob": self.logprob,
                "top": [t.to_dict() for t in self.top]}

    @classmethod
    def from_dict(cls, data: dict) -> TokenLogprob:
        return cls(str(data["token"]), int(data["id"]), float(data["logprob"]),
                   tuple(TopLogprob(str(t["token"]), int(t["id"]), float(t["logprob"])) for t in data.get("top", ())))


@dataclass(frozen=True, slots=True)
class Delta:
    """New answer text, never overlapping earlier deltas. With SamplingParams.logprobs set,
    `logprobs` holds one entry for each token whose text is in this delta; else None."""

    text: str
    logprobs: tuple[TokenLogprob, ...] | None = None


@dataclass(frozen=True, slots=True)
class Reasoning:
    """New thinking text of a model that thinks before it answers (`<think>` tags, gpt-oss's
    analysis channel), never overlapping earlier ones. It is not the answer: front ends
    show it apart (folded), it is stored apart (MessageInfo.reasoning) and later turns'
    prompts leave it out."""

    text: str


@dataclass(frozen=True, slots=True)
class PrefillProgress:
    """The model is reading a long prompt: `done` of its `total` tokens are in the KV cache
    (those reused from the cache count as read). Sent only for prompts longer than one
    prefill chunk, at most once a chunk, before the first Delta; the last has done == total."""

    done: int
    total: int


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    time_to_first_token: float  # seconds from send to the first sampled token
    tokens_per_second: float  # decode rate after the first token
    cached_tokens: int = 0  # prompt tokens reused from the KV cache
    reasoning_tokens: int = 0  # of completion_tokens, those the model spent thinking


@dataclass(frozen=True, slots=True)
class Finished:
    reason: FinishReason
    message_id: int | None = None


class FailureKind(enum.Enum):
    INVALID_REQUEST = "invalid_request"  # nothing was started; fix the input
    MODEL = "model"  # the model could not be loaded or run
    STORE = "store"  # the database refused a write
    INTERRUPTED = "interrupted"  # the stream broke mid-answer (a remote server): the partial answer is kept
    INTERNAL = "internal"


@dataclass(frozen=True, slots=True)
class Failed:
    error: str
    kind: FailureKind = FailureKind.INTERNAL


class SafetyAction(enum.Enum):
    ALLOW = "allow"
    WARN = "warn"
    REDACT = "redact"
    BLOCK = "block"


@dataclass(frozen=True, slots=True)
class SafetyNotice:
    """A safety rule fired on the input or the streamed output."""

    category: str  # a detector or policy category, e.g. "secret.aws_access_key"
    action: SafetyAction
    span: tuple[int, int]  # character offsets in the scanned text
    rule: str  # the rule's id, for "why did this fire"
    stage: str = "input"  # "input", "output", or "outgoing" (masked on its way to a remote model)


@dataclass(frozen=True, slots=True)
class MemoryRef:
    id: int
    text: str


@dataclass(frozen=True, slots=True)
class MemoryNotice:
    """What memory did with the user's message ("Memory saved", "Forgot …")."""

    saved: tuple[MemoryRef, ...] = ()
    forgotten: tuple[MemoryRef, ...] = ()
    refused: tuple[str, ...] = ()  # the reason for each memory that was not saved
    unmatched_forgets: tuple[str, ...] = ()  # "forget X" where nothing matched X
    suggestions: tuple[str, ...] = ()  # facts the user may accept as memories
    confirm_clear_all: bool = False  # "forget everything": the front end asks first
    skipped: str = ""  # why memory did nothing with a remember/forget request (memory off, temporary chat)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """The model asked for a tool: the answer's text pauses until its ToolResult.
    `arguments` is the parsed JSON object the model wrote (validated against the tool's
    schema where the tool has one)."""

    id: str  # unique within the answer, e.g. "call_1"
    name: str
    arguments: dict


@dataclass(frozen=True, slots=True)
class ToolApprovalNeeded:
    """The call `id` waits for the user: engine.tools.approve(id, "once" | "always" | "deny")."""

    id: str
    name: str
    arguments: dict


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What the tool gave back (or its error); the answer goes on after it."""

    id: str
    content: str
    is_error: bool = False
    duration: float = 0.0  # seconds the tool ran


class NoticeKind(enum.Enum):
    TOOL_NOT_CALLED = "tool_not_called"  # tools were on and the question wanted one, but none was called
    ATTACHMENT_CUT = "attachment_cut"  # an attached file did not fit the prompt whole (an excerpt, or left out)
    TOOLS_DROPPED = "tools_dropped"  # some or all of the tools asked for did not fit the context window


@dataclass(frozen=True, slots=True)
class AnswerNotice:
    """Something the user should know about this answer that is neither a safety rule nor a
    failure; also kept in the answer's meta["notices"]."""

    about: NoticeKind
    text: str  # one sentence a front end shows as it is


class CitedBy(enum.Enum):
    """Who tied a citation to the answer: the model by its [n], or Wren for an answer that
    wrote none, by a passage it quotes or, failing that, the passage nearest its meaning
    (a window may say "matched" for those two)."""

    MARKER = "marker"
    QUOTED = "quoted"
    MATCHED = "matched"


@dataclass(frozen=True, slots=True)
class Citation:
    """A library passage the answer cites ([number] in its text), after the answer's text:
    one per passage used, in the order first cited; a number no passage in the prompt had
    is dropped, never shown."""

    number: int  # the [number] in the answer
    path: str  # the file
    location: dict  # page, heading path, lines or rows (engine/library/chunking.py)
    where: str  # the location in words: "page 3", "Setup › Linux, lines 10-14"
    passage: str  # the text the model read
    chunk_id: int = 0
    cited_by: CitedBy = CitedBy.MARKER  # the model's [n], or Wren's attribution of an answer without one


@dataclass(frozen=True, slots=True)
class TitleUpdate:
    """The conversation's title, written (or revised) while or after the answer streams."""

    conversation_id: int
    title: str


Event = (
    Started | PrefillProgress | Delta | Reasoning | Usage | SafetyNotice | MemoryNotice | ToolCall | ToolApprovalNeeded
    | ToolResult | TitleUpdate | AnswerNotice | Citation | Finished | Failed
)

# Event types whose `type` in event_to_dict is not simply the lowercased class name.
_TYPE_NAMES = {
    PrefillProgress: "prefill_progress", ToolCall: "tool_call", ToolApprovalNeeded: "tool_approval_needed",
    ToolResult: "tool_result", TitleUpdate: "title_update", AnswerNotice: "answer_notice",
}


def event_to_dict(event: Event) -> dict:
    """A JSON-ready dict with a `type` field, for `wren ask --json` and logs."""
    kind = type(event)
    out: dict = {"type": _TYPE_NAMES.get(kind) or kind.__name__.lower()}
    for name in event.__dataclass_fields__:
        value = getattr(event, name)
        if name == "logprobs" and value is None:
            continue  # a Delta without token probabilities reads as it always did
        if isinstance(value, enum.Enum):
            value = value.value
        elif isinstance(value, tuple):
            value = [
                {"id": v.id, "text": v.text} if isinstance(v, MemoryRef)
                else v.to_dict() if isinstance(v, TokenLogprob) else v for v in value
            ]
        out[name] = value
    return out


def _refs(values: list) -> tuple[MemoryRef, ...]:
    return tuple(MemoryRef(int(v["id"]), str(v["text"])) for v in values)


# How each field that event_to_dict changed comes back; the rest are taken as they are.
_FIELD_TYPES: dict[str, Callable[[Any], Any]] = {
    "reason": FinishReason, "kind": FailureKind, "action": SafetyAction, "span": tuple, "about": NoticeKind,
    "saved": _refs, "forgotten": _refs, "refused": tuple, "unmatched_forgets": tuple, "suggestions": tuple,
    "cited_by": CitedBy,
}
_BY_TYPE = {_TYPE_NAMES.get(kind) or kind.__name__.lower(): kind for kind in Event.__args__}


def event_from_dict(data: dict) -> Event:
    """The event `event_to_dict` made `data` from (what crosses a socket or a pipe comes
    back as the same typed event). An unknown type or a missing field is a ValueError."""
    kind = _BY_TYPE.get(data.get("type"))  # type: ignore[arg-type]
    if kind is None:
        raise ValueError(f"not an event: type {data.get('type')!r}")
    values: dict = {}
    try:
        for name in kind.__dataclass_fields__:
            if name not in data:
                continue  # a field with a default (a Delta without logprobs); a required one fails below
            value = data[name]
            if name == "logprobs":
                value = None if value is None else tuple(TokenLogprob.from_dict(v) for v in value)
            elif name in _FIELD_TYPES:
                value = _FIELD_TYPES[name](value)
            values[name] = value
        return kind(**values)
    except (TypeError, ValueError, KeyError) as exc:
        raise ValueError(f"a {data['type']} event that cannot be read: {exc}") from None
