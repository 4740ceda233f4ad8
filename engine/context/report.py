"""`ContextReport`: what the model saw for one answer, and why each part was in or out.

Stored as JSON in the assistant message's `meta["context"]`; the context inspector and
`wren context` read it back with `ContextReport.from_dict`.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

REPORT_META_KEY = "context"
REPORT_VERSION = 1


class PartKind(enum.Enum):
    SYSTEM = "system"  # the system prompt
    ABOUT_ME = "about_me"  # custom instructions: what the model should know about the user
    HOW_TO_RESPOND = "how_to_respond"  # custom instructions: how it should answer
    MEMORY = "memory"  # one retrieved memory
    PAST_CHAT = "past_chat"  # an excerpt of another conversation ("reference chat history")
    SUMMARY = "summary"  # the running summary of older turns
    HISTORY = "history"  # older messages, grouped: folded into the summary or dropped
    TURN = "turn"  # one recent message, verbatim
    NEW_MESSAGE = "new_message"  # the message being answered
    ATTACHMENT = "attachment"  # a file the user attached, in the prompt with the new message (`text`: its name)
    THINKING = "thinking"  # an earlier answer's thinking: always DROPPED (engine/context/thinking.py)
    DOCUMENT = "document"  # a library passage (`source_ids`: its chunk; `text`: "[n] file (where)" and the passage)
    TOOLS = "tools"  # the offered tools' definitions (`text`: their names; `items`: how many)


class PartState(enum.Enum):
    INCLUDED = "included"
    SUMMARIZED = "summarized"  # in the prompt only through the running summary
    DROPPED = "dropped"  # not in the prompt at all; `note` says why


@dataclass(frozen=True)
class ContextPart:
    kind: PartKind
    state: PartState
    tokens: int  # cost in the prompt (for SUMMARIZED/DROPPED: what it would have cost)
    source_ids: tuple[int, ...] = ()  # memory ids, message ids; HISTORY: (first, last)
    role: str | None = None  # TURN/NEW_MESSAGE: "user" or "assistant"
    text: str = ""  # a copy for parts that can change or vanish later (memories, summary)
    items: int = 1  # HISTORY: how many messages the part stands for
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind.value, "state": self.state.value, "tokens": self.tokens}
        if self.source_ids:
            out["source_ids"] = list(self.source_ids)
        for key in ("role", "text", "note"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        if self.items != 1:
            out["items"] = self.items
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ContextPart:
        return cls(
            kind=PartKind(data["kind"]), state=PartState(data["state"]), tokens=int(data["tokens"]),
            source_ids=tuple(int(i) for i in data.get("source_ids", ())), role=data.get("role"),
            text=data.get("text", ""), items=int(data.get("items", 1)), note=data.get("note", ""),
        )


@dataclass(frozen=True)
class ContextReport:
    window: int  # the model's context length
    reserve: int  # tokens kept free for the answer
    prompt_tokens: int  # the prompt as sent
    exact: bool  # prompt_tokens came from the real tokenizer and chat template
    parts: tuple[ContextPart, ...]
    rendered_prompt: str = ""  # exactly what the chat template produced
    summary_through: int | None = None  # the last message the running summary covers
    summarize_calls: int = 0  # model calls this assembly made to extend the summary
    elapsed_ms: float = 0.0  # assembly time, summarization included
    version: int = REPORT_VERSION
    extra: dict = field(default_factory=dict)  # room for later fields without a version bump

    @property
    def budget(self) -> int:
        return self.window - self.reserve

    @property
    def memory_ids(self) -> tuple[int, ...]:
        """The memories this answer used (provenance)."""
        return tuple(
            i for p in self.parts if p.kind is PartKind.MEMORY and p.state is PartState.INCLUDED
            for i in p.source_ids
        )

    def parts_of(self, kind: PartKind, state: PartState | None = None) -> list[ContextPart]:
        return [p for p in self.parts if p.kind is kind and (state is None or p.state is state)]

    def tokens_by_kind(self) -> dict[str, int]:
        """Included tokens per kind, for the inspector's bar."""
        out: dict[str, int] = {}
        for p in self.parts:
            if p.state is PartState.INCLUDED:
                out[p.kind.value] = out.get(p.kind.value, 0) + p.tokens
        return out

    def as_sent(self, prompt_ids: Sequence[int], rendered_prompt: str, tools: Sequence[str] = (),
                dropped: str | None = None) -> ContextReport:
        """This report for the prompt as the model read it, when more went in after assembly
        (the offered tools' definitions): `prompt_ids` is that prompt, so `prompt_tokens` is
        the answer's record (`MessageInfo.prompt_tokens`) and `rendered_prompt` its text; the
        tools are one part costing what they added to the count."""
        parts = self.parts
        if tools or dropped:
            added = max(0, len(prompt_ids) - self.prompt_tokens) if tools else 0
            state = PartState.INCLUDED if tools else PartState.DROPPED
            parts = (ContextPart(PartKind.TOOLS, state, added, text=", ".join(tools), items=len(tools),
                                 note=dropped or ""), *parts)
        return replace(self, prompt_tokens=len(prompt_ids), exact=True, rendered_prompt=rendered_prompt, parts=parts)

    def to_dict(self, *, include_prompt: bool = True) -> dict[str, Any]:
        return {
            "version": self.version, "window": self.window, "reserve": self.reserve,
            "prompt_tokens": self.prompt_tokens, "exact": self.exact,
            "parts": [p.to_dict() for p in self.parts],
            "rendered_prompt": self.rendered_prompt if include_prompt else "",
            "summary_through": self.summary_through, "summarize_calls": self.summarize_calls,
            "elapsed_ms": self.elapsed_ms, "extra": dict(self.extra),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ContextReport:
        return cls(
            window=int(data["window"]), reserve=int(data["reserve"]),
            prompt_tokens=int(data["prompt_tokens"]), exact=bool(data.get("exact", False)),
            parts=tuple(ContextPart.from_dict(p) for p in data.get("parts", ())),
            rendered_prompt=data.get("rendered_prompt", ""),
            summary_through=data.get("summary_through"),
            summarize_calls=int(data.get("summarize_calls", 0)),
            elapsed_ms=float(data.get("elapsed_ms", 0.0)), version=int(data.get("version", 1)),
            extra=dict(data.get("extra") or {}),
        )


def context_used(prompt_tokens: int | None, completion_tokens: int | None) -> int:
    """The context one answer filled, as the status bar and the composer show it: its prompt
    as sent (the record's `prompt_tokens`, which the report and `wren context` show) and the
    tokens it wrote."""
    return (prompt_tokens or 0) + (completion_tokens or 0)


def report_from_meta(meta: dict | None) -> ContextReport | None:
    """The report stored with an assistant message, or None (older messages have none)."""
    data = (meta or {}).get(REPORT_META_KEY)
    return ContextReport.from_dict(data) if data else None
