"""Conversation export to Markdown and JSON."""

from __future__ import annotations

import json

from .records import ConversationInfo, MessageInfo, MessageStatus, Role

_HEADINGS = {Role.USER: "You", Role.ASSISTANT: "Wren", Role.SYSTEM: "System"}


def to_markdown(conv: ConversationInfo, messages: list[MessageInfo]) -> str:
    lines = [f"# {conv.title or 'Untitled chat'}", "", f"_{conv.created_at:%Y-%m-%d %H:%M} UTC_", ""]
    for m in messages:
        note = "" if m.status is MessageStatus.COMPLETE else f" _({m.status.value})_"
        lines += [f"## {_HEADINGS[m.role]}{note}", "", m.content, ""]
    return "\n".join(lines).rstrip() + "\n"


def to_dict(conv: ConversationInfo, messages: list[MessageInfo]) -> dict:
    return {
        "id": conv.id,
        "title": conv.title,
        "created_at": conv.created_at.isoformat(),
        "updated_at": conv.updated_at.isoformat(),
        "model": conv.model,
        "messages": [
            {
                "id": m.id,
                "parent_id": m.parent_id,
                "role": m.role.value,
                "content": m.content,
                "status": m.status.value,
                "created_at": m.created_at.isoformat(),
                "model": m.model,
                "prompt_tokens": m.prompt_tokens,
                "completion_tokens": m.completion_tokens,
            }
            for m in messages
        ],
    }


def to_json(conv: ConversationInfo, messages: list[MessageInfo]) -> str:
    return json.dumps(to_dict(conv, messages), ensure_ascii=False, indent=2) + "\n"
