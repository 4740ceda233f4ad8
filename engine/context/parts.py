"""How the parts of a context become a system message and a chat: history rows, turns,
sections, and the grouped parts of the report."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from ..memory.records import Retrieved, SourceKind
from ..records import MessageStatus, Role
from .report import ContextPart, PartKind, PartState
from .summary import SavedSummary

HEADERS = {
    PartKind.ABOUT_ME: "About the user:",
    PartKind.HOW_TO_RESPOND: "How to respond:",
    PartKind.SUMMARY: "Summary of the earlier part of this conversation:",
    PartKind.MEMORY: "Things the user asked you to remember:",
    PartKind.PAST_CHAT: "From the user's earlier conversations:",
}
_SKIPPED_STATUS = {"failed", "blocked"}
# Enum members → their values without a descriptor call per message (1,000 per turn).
_VALUE: dict[Any, str] = {member: member.value for enum in (Role, MessageStatus) for member in enum}


class Msg(NamedTuple):  # a tuple: a thousand are built per turn
    id: int | None
    role: str
    content: str


def positions(history: list[Msg]) -> dict[int, int]:
    return {m.id: n for n, m in enumerate(history) if m.id is not None}


def usable(history: Sequence[Any], new_message_id: int | None) -> list[Msg]:
    out = []
    for item in history:
        if type(item) is dict:
            role, content, mid, status = item.get("role"), item.get("content", ""), item.get("id"), item.get("status")
        else:
            role, content, mid, status = item.role, item.content, item.id, item.status
        if not content:
            continue
        role = _VALUE.get(role, role)
        if role not in ("user", "assistant") or _VALUE.get(status, status) in _SKIPPED_STATUS:
            continue
        out.append(Msg(mid, role, content))
    if out and new_message_id is not None and out[-1].id == new_message_id:
        out.pop()
    return out


def turn_starts(history: list[Msg]) -> list[int]:
    """Index of each turn's first message: a turn starts at a user message."""
    return [n for n, m in enumerate(history) if n == 0 or m.role == "user"]


def end_of(summary: SavedSummary | None, positions: dict[int, int]) -> int:
    """How many history messages the summary covers (0 when it is not on this lineage)."""
    if summary is None:
        return 0
    found = positions.get(summary.through_id)
    return 0 if found is None else found + 1


def group_part(msgs: list[Msg], state: PartState, cost: Callable[[Msg], int | None], note: str) -> ContextPart:
    ids = [m.id for m in msgs if m.id is not None]
    span = (ids[0], ids[-1]) if ids else ()
    # What folded messages would cost is only informative: counting a thousand of them every
    # turn would cost more than the whole assembly, so uncounted ones are estimated.
    known = [cost(m) for m in msgs]
    tokens = sum(k if k is not None else len(m.content) // 4 + 4 for k, m in zip(known, msgs))
    if None in known:
        note = "; ".join(filter(None, [note, "token count estimated from length"]))
    return ContextPart(PartKind.HISTORY, state, tokens, span, items=len(msgs), note=note)


def section(kind: PartKind, body: str) -> str:
    header = HEADERS.get(kind)
    return f"{header}\n{body}" if header else body


def system_text(sections: dict[PartKind, str], retrieved: Sequence[Retrieved]) -> str:
    # Stable parts first: a prefix that stays the same across turns can be served from cache.
    blocks = [sections[k] for k in (PartKind.SYSTEM, PartKind.ABOUT_ME, PartKind.HOW_TO_RESPOND, PartKind.SUMMARY)
              if k in sections]
    for kind, source in ((PartKind.MEMORY, SourceKind.MEMORY), (PartKind.PAST_CHAT, SourceKind.PAST_CHAT)):
        items = [f"- {r.text}" for r in retrieved if r.kind is source]
        if items:
            blocks.append(HEADERS[kind] + "\n" + "\n".join(items))
    if PartKind.DOCUMENT in sections:  # the question's passages change every turn: last
        blocks.append(sections[PartKind.DOCUMENT])
    return "\n\n".join(blocks)


def messages_for(sections, retrieved, recent: list[Msg], new_message: str) -> list[dict]:
    system = system_text(sections, retrieved)
    out = [{"role": "system", "content": system}] if system else []
    out += [{"role": m.role, "content": m.content} for m in recent]
    out.append({"role": "user", "content": new_message})
    return out


def clip(content: str, tokens: int, limit: int) -> str:
    """A message too long for one summarizer call keeps its head and tail."""
    if tokens <= limit:
        return content
    keep = max(200, int(len(content) * limit / tokens) // 2)
    return f"{content[:keep]}\n[…]\n{content[-keep:]}"


def ids_of(mid: int | None) -> tuple[int, ...]:
    return (mid,) if mid is not None else ()
