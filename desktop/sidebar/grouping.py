"""Conversations grouped by the local day they were last active: Today, Yesterday, …

Chats started from the terminal (`wren ask`, `wren chat`) are not mixed in: they follow,
in a "Terminal" group of their own. Pinned ones stay in Pinned, wherever they came from."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime

from wren.engine.records import ORIGIN_KEY, TERMINAL_ORIGIN, ConversationInfo

PINNED = "Pinned"
TERMINAL = "Terminal"


@dataclass
class Group:
    label: str
    conversations: list[ConversationInfo] = field(default_factory=list)


def local_day(moment: datetime) -> date:
    """The store keeps naive UTC; the user thinks in their own days."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone().date()


def day_label(day: date, today: date) -> str:
    delta = (today - day).days
    if delta <= 0:
        return "Today"
    if delta == 1:
        return "Yesterday"
    if delta < 7:
        return day.strftime("%A")
    if day.year == today.year:
        return f"{day.strftime('%A')}, {day.day} {day.strftime('%B')}"
    return f"{day.day} {day.strftime('%B')} {day.year}"


def from_terminal(conv: ConversationInfo) -> bool:
    return (conv.settings or {}).get(ORIGIN_KEY) == TERMINAL_ORIGIN


def group_by_day(conversations: list[ConversationInfo], today: date | None = None) -> list[Group]:
    """Pinned first, then one group per day, newest first, then the terminal's chats (the
    input order is kept within each group)."""
    today = today or datetime.now().astimezone().date()
    pinned, terminal = Group(PINNED), Group(TERMINAL)
    by_day: dict[date, Group] = {}
    for conv in conversations:
        if conv.pinned:
            pinned.conversations.append(conv)
            continue
        if from_terminal(conv):
            terminal.conversations.append(conv)
            continue
        day = local_day(conv.updated_at)
        by_day.setdefault(day, Group(day_label(day, today))).conversations.append(conv)
    groups = [by_day[d] for d in sorted(by_day, reverse=True)]
    return ([pinned] if pinned.conversations else []) + groups + ([terminal] if terminal.conversations else [])
