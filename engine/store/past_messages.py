"""The SQL of finding past messages again ("reference chat history"): full-text search over
other conversations' finished messages, never a deleted or temporary chat's."""

from __future__ import annotations

import peewee as pw

# Which messages may be found: not in the asking chat (its id is the first argument after
# the query's own), finished, in a chat neither deleted nor temporary.
_ELIGIBLE = ("m.conversation_id IS NOT ? AND c.deleted_at IS NULL AND m.status = 'complete' "
             "AND coalesce(json_extract(c.settings, '$.temporary'), 0) = 0")


def search_past_messages(db: pw.Database, match: str, conversation_id: int | None,
                         limit: int) -> list[tuple[int, int, str, float]]:
    """(message id, conversation id, content, BM25 score, higher is better) of eligible
    messages outside `conversation_id` matching the FTS query `match`, best first."""
    return db.execute_sql(
        "SELECT m.id, m.conversation_id, m.content, -bm25(message_fts) AS s "
        "FROM message_fts f JOIN message m ON m.id = f.rowid "
        "JOIN conversation c ON c.id = m.conversation_id "
        f"WHERE message_fts MATCH ? AND {_ELIGIBLE} ORDER BY s DESC LIMIT ?",
        (match, conversation_id, limit),
    ).fetchall()


def past_messages(db: pw.Database, message_ids: list[int],
                  conversation_id: int | None) -> list[tuple[int, int, str]]:
    """(message id, conversation id, content) of those of `message_ids` that are eligible
    (as in `search_past_messages`)."""
    if not message_ids:
        return []
    marks = ",".join("?" * len(message_ids))
    return db.execute_sql(
        "SELECT m.id, m.conversation_id, m.content FROM message m "
        f"JOIN conversation c ON c.id = m.conversation_id WHERE m.id IN ({marks}) AND {_ELIGIBLE}",
        (*message_ids, conversation_id),
    ).fetchall()
