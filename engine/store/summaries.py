"""The SQL of running conversation summaries (the `conversation_summary` table)."""

from __future__ import annotations

import peewee as pw

from .memory_models import ConversationSummary


def summaries_of(db: pw.Database, conversation_id: int, limit: int = 256) -> list[tuple[int, str, int]]:
    """(through_message_id, text, covered) of a conversation's saved summaries, the latest
    last message first, `limit` at most."""
    return db.execute_sql(
        "SELECT through_message_id, text, covered FROM conversation_summary "
        "WHERE conversation_id = ? ORDER BY through_message_id DESC LIMIT ?",
        (conversation_id, limit),
    ).fetchall()


def save_summary(db: pw.Database, conversation_id: int, through_message_id: int, text: str, covered: int) -> None:
    """Save a summary, replacing the one that ends at the same message."""
    with db.bind_ctx([ConversationSummary], bind_refs=False, bind_backrefs=False):
        ConversationSummary.insert(
            conversation=conversation_id, through_message=through_message_id, text=text, covered=covered,
        ).on_conflict_replace().execute()
