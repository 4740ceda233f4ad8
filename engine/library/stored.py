"""An answer's citations kept with it: written when the answer ends (Library.cite), read
back with the conversation's messages, so an answer's sources outlive the window that saw
it stream. The rows go with their message (engine/store/citations.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..events import Citation, CitedBy
from ..records import MessageInfo
from ..store import citations as sql

if TYPE_CHECKING:
    from ..store.store import Store


def save(store: Store, message_id: int, cited: Sequence[Citation]) -> None:
    """Keep `cited` as the citations of `message_id` (on the database thread)."""
    sql.save(store.db, message_id, [{"number": c.number, "path": c.path, "location": c.location,
                                     "place": c.where, "passage": c.passage, "chunk_id": c.chunk_id,
                                     "cited_by": c.cited_by.value}
                                    for c in cited])


def attach(store: Store, messages: Sequence[MessageInfo]) -> list[MessageInfo]:
    """`messages` with the citations each answer keeps (on the database thread)."""
    found = sql.of_messages(store.db, [m.id for m in messages])
    return [dataclasses.replace(m, citations=tuple(
        Citation(c["number"], c["path"], c["location"], c["place"], c["passage"], c["chunk_id"],
                 CitedBy(c["cited_by"])) for c in found[m.id])) if m.id in found else m for m in messages]


def messages(store: Store, conversation_id: int) -> list[MessageInfo]:
    """The visible branch of a conversation with its answers' citations (database thread)."""
    return attach(store, store.messages(conversation_id))
