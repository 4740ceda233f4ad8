"""Conversation export to JSON (the whole tree) and Markdown (for reading).

A chat is a tree: editing a question or making an answer again adds a sibling branch, and
the window shows one branch at a time. An export is the user's backup, so it keeps every
branch:

- JSON, like ChatGPT's `conversations.json`: `mapping` holds every message by id (as
  text, JSON keys are text) with its `parent`, `children` (oldest first, the window's
  `< 1/2 >` order) and `message` (role, content, status, created time, model…);
  `current_node` is the leaf of the branch on screen. `messages` is that branch in order,
  as version 1 wrote it, so a reader of the old files keeps working.
- Markdown: the branch on screen reads first, as in the window; when the chat has others,
  a line under the title says so and "Other branches" follows, each from where it leaves
  the text already shown, so every message appears exactly once. A careful user expects a
  backup to hold everything they wrote, and a transcript to read like the chat they saw.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .records import ConversationInfo, MessageInfo, MessageStatus, Role

FORMAT, VERSION = "wren-conversation", 2
_HEADINGS = {Role.USER: "You", Role.ASSISTANT: "Wren", Role.SYSTEM: "System"}
_DERIVED_META = ("context", "logprobs")  # copies rebuilt from other rows, and bulky: not a backup's


# -- the tree ------------------------------------------------------------------------------

def _tree(shown: list[MessageInfo], tree: list[MessageInfo] | None) -> list[MessageInfo]:
    return sorted(tree if tree is not None else shown, key=lambda m: m.id)


def _children(tree: list[MessageInfo]) -> dict[int | None, list[int]]:
    ids = {m.id for m in tree}
    kids: dict[int | None, list[int]] = {}
    for m in tree:  # oldest first
        parent = m.parent_id if m.parent_id in ids else None
        kids.setdefault(parent, []).append(m.id)
    return kids


def other_branches(shown: list[MessageInfo], tree: list[MessageInfo] | None
                   ) -> list[tuple[MessageInfo | None, list[MessageInfo]]]:
    """The branches not on screen, each as (the message it follows, or None at the start;
    its messages from there down to one leaf). Together with `shown` they hold every
    message once."""
    msgs = _tree(shown, tree)
    by_id = {m.id: m for m in msgs}
    kids = _children(msgs)
    printed = {m.id for m in shown}
    branches: list[tuple[MessageInfo | None, list[MessageInfo]]] = []
    for leaf in (m for m in msgs if m.id not in kids and m.id not in printed):
        path: list[MessageInfo] = []
        node: MessageInfo | None = leaf
        while node is not None and node.id not in printed:
            path.append(node)
            node = by_id.get(node.parent_id) if node.parent_id is not None else None
        path.reverse()
        printed.update(m.id for m in path)
        branches.append((node, path))
    return branches


# -- JSON ----------------------------------------------------------------------------------

def _message_fields(m: MessageInfo) -> dict[str, Any]:
    fields: dict[str, Any] = {
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
    if m.reasoning:  # a thinking model's thinking, apart from the answer
        fields.update(reasoning=m.reasoning, reasoning_seconds=m.reasoning_seconds)
    return fields


def _node(m: MessageInfo, children: list[int]) -> dict[str, Any]:
    message = _message_fields(m)
    message.update(backend=m.backend, error=m.error, sampling=m.sampling,
                   meta={k: v for k, v in m.meta.items() if k not in _DERIVED_META})
    return {"id": m.id, "parent": m.parent_id, "children": children, "message": message}


def to_dict(conv: ConversationInfo, messages: list[MessageInfo], tree: list[MessageInfo] | None = None,
            current_leaf: int | None = None) -> dict:
    """`messages` is the branch on screen; `tree` every message (None: that branch alone)."""
    msgs = _tree(messages, tree)
    kids = _children(msgs)
    if current_leaf is None or current_leaf not in {m.id for m in msgs}:
        current_leaf = messages[-1].id if messages else None
    return {
        "format": FORMAT,
        "version": VERSION,
        "id": conv.id,
        "title": conv.title,
        "created_at": conv.created_at.isoformat(),
        "updated_at": conv.updated_at.isoformat(),
        "model": conv.model,
        "current_node": current_leaf,
        "mapping": {str(m.id): _node(m, kids.get(m.id, [])) for m in msgs},
        "messages": [_message_fields(m) for m in messages],
    }


def to_json(conv: ConversationInfo, messages: list[MessageInfo], tree: list[MessageInfo] | None = None,
            current_leaf: int | None = None) -> str:
    return json.dumps(to_dict(conv, messages, tree, current_leaf), ensure_ascii=False, indent=2) + "\n"


# -- Markdown ------------------------------------------------------------------------------

def _block(m: MessageInfo, level: str) -> list[str]:
    notes = []
    if m.sibling_count > 1:
        notes.append(f"version {m.sibling_index + 1} of {m.sibling_count}")
    if m.status is not MessageStatus.COMPLETE:
        notes.append(m.status.value)
    note = f" _({', '.join(notes)})_" if notes else ""
    # why it failed or was cut, as the JSON keeps it (a failed answer said only "(failed)")
    error = [f"_{' '.join(m.error.split())}_", ""] if m.error and m.status is not MessageStatus.COMPLETE else []
    lines = [f"{level} {_HEADINGS[m.role]}{note}", "", *_thinking(m), m.content, *error, ""]
    files = m.meta.get("attachments")  # the files sent with a question (their names; the JSON keeps the paths)
    names = [Path(p).name for p in files if isinstance(p, str)] if isinstance(files, list) else []
    return lines + ([f"_Attached: {', '.join(names)}_", ""] if names else [])


def _thinking(m: MessageInfo) -> list[str]:
    """A thinking model's thinking as a folded block before its answer."""
    if not m.reasoning:
        return []
    seconds = f" for {m.reasoning_seconds:.0f} s" if m.reasoning_seconds is not None else ""
    return [f"<details><summary>Thought{seconds}</summary>", "", m.reasoning, "", "</details>", ""]


def _where(anchor: MessageInfo | None) -> str:
    if anchor is None:
        return "from the start"
    text = " ".join(anchor.content.split())
    snippet = text if len(text) <= 60 else text[:59] + "…"
    return f"after {_HEADINGS[anchor.role]}: “{snippet}”"


def to_markdown(conv: ConversationInfo, messages: list[MessageInfo], tree: list[MessageInfo] | None = None) -> str:
    """The branch on screen, then every other branch (when `tree` has any)."""
    lines = [f"# {conv.title or 'Untitled chat'}", "", f"_{conv.created_at:%Y-%m-%d %H:%M} UTC_", ""]
    others = other_branches(messages, tree)
    if others:
        lines += [f"_This chat has {len(others)} other branch{'es' if len(others) > 1 else ''} "
                  "(questions edited or answers made again); the branch shown last is below, "
                  "the others follow under “Other branches”._", ""]
    for m in messages:
        lines += _block(m, "##")
    if others:
        lines += ["---", "", "# Other branches", ""]
        for n, (anchor, path) in enumerate(others, 1):
            lines += [f"## Branch {n}, {_where(anchor)}", ""]
            for m in path:
                lines += _block(m, "###")
    return "\n".join(lines).rstrip() + "\n"


def render(store, conversation_id: int, fmt: str) -> str:
    """One conversation, every branch, as "markdown" or "json" (on the database thread)."""
    conv = store.get_conversation(conversation_id)
    shown = store.messages(conversation_id)
    tree, leaf = store.tree(conversation_id)
    return to_json(conv, shown, tree, leaf) if fmt == "json" else to_markdown(conv, shown, tree)
