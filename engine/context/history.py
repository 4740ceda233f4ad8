"""The history a reply sees, read in one query (`Store.lineage` reads a row per ancestor)."""

from __future__ import annotations

from ..store import Store


def lineage(store: Store, message_id: int) -> list[dict]:
    """`message_id` and its ancestors, oldest first, as {"id", "role", "content", "status"}.

    Plain rows of one recursive query, where `Store.lineage` builds a `MessageInfo` (and
    its siblings) per row.
    """
    rows = store.ancestor_rows(message_id, ("id", "role", "content", "status"))
    return [{"id": r[0], "role": r[1], "content": r[2], "status": r[3]} for r in rows]
