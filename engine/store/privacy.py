"""The SQL of privacy: purging deleted chats for good, rewriting provenance copies, erasing
every user row, reading rows for an export, and compacting the file so deleted text leaves
the disk. What to scrub and why is `engine.privacy`; this only reads and writes rows."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import peewee as pw

log = logging.getLogger(__name__)

FTS_TABLES = ("message_fts", "memory_fts", "doc_chunk_fts")
USER_TABLES = ("project_chat", "project_doc", "project", "doc_vector", "doc_chunk", "doc_file", "doc_source",
               "message_vector", "memory_vector", "conversation_summary", "message_citation", "message", "conversation",
               "memory", "setting")
EXPORTED_MEMORY_COLUMNS = ("id", "text", "created_at", "updated_at", "source_conversation_id", "origin")


def table_names(db: pw.Database) -> set[str]:
    """The names of the database's tables (the FTS tables' shadow tables included)."""
    return {r[0] for r in db.execute_sql("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()}


def compact(db: pw.Database) -> None:
    """Merge the full-text indexes (dropping deleted entries from every segment), rebuild
    the file (VACUUM: `secure_delete` zeroes freed cells and pages, but a page SQLite
    rebalanced can keep stale bytes in its unused middle) and fold the WAL into it,
    truncating the WAL."""
    tables = table_names(db)
    for fts in FTS_TABLES:
        if fts in tables:
            db.execute_sql(f"INSERT INTO {fts}({fts}) VALUES ('optimize')")
    try:
        db.execute_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        db.execute_sql("VACUUM")
        db.execute_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    except Exception as exc:  # another program reading the file: the rows are gone already,
        # their bytes go at the next purge or close (the last connection folds the WAL in)
        log.warning("could not compact %s after a purge: %s", db.database, exc)


def delete_deleted_conversations(db: pw.Database, *, deleted_before: str | None, ids: list[int] | None,
                                 then: Callable[[set[int]], object]) -> list[int]:
    """In one transaction: delete the soft-deleted conversations (those deleted at or
    before `deleted_before`, a stored time text, and/or among `ids`) with their rows (the
    foreign keys cascade), then call `then(ids of their messages)` before it commits.
    Returns the ids of the conversations deleted (nothing is called when there are none)."""
    where: list[str] = ["deleted_at IS NOT NULL"]
    args: list[Any] = []
    if deleted_before is not None:
        where.append("deleted_at <= ?")
        args.append(deleted_before)
    if ids is not None:
        if not ids:
            return []
        where.append(f"id IN ({','.join('?' * len(ids))})")
        args += ids
    clause = " AND ".join(where)
    with db.atomic():
        conv_ids = [r[0] for r in db.execute_sql(f"SELECT id FROM conversation WHERE {clause}", args).fetchall()]
        if not conv_ids:
            return []
        marks = ",".join("?" * len(conv_ids))
        message_ids = {r[0] for r in db.execute_sql(
            f"SELECT id FROM message WHERE conversation_id IN ({marks})", conv_ids).fetchall()}
        db.execute_sql(f"DELETE FROM conversation WHERE id IN ({marks})", conv_ids)  # cascades
        then(message_ids)
    return conv_ids


def metas_containing(db: pw.Database, needle: str) -> list[tuple[int, str]]:
    """(message id, meta JSON text) of messages whose meta text contains `needle`."""
    return db.execute_sql("SELECT id, meta FROM message WHERE instr(meta, ?) > 0", (needle,)).fetchall()


def set_meta_text(db: pw.Database, message_id: int, meta: str) -> None:
    """Replace a message's meta JSON text."""
    db.execute_sql("UPDATE message SET meta = ? WHERE id = ?", (meta, message_id))


def delete_user_rows(db: pw.Database) -> dict[str, int]:
    """Delete every user row (USER_TABLES, and the FTS indexes emptied) in one transaction;
    returns how many rows each existing table had."""
    tables = table_names(db)
    counts: dict[str, int] = {}
    with db.atomic():
        for table in USER_TABLES:
            if table in tables:
                counts[table] = db.execute_sql(f"SELECT count(*) FROM {table}").fetchone()[0]
                db.execute_sql(f"DELETE FROM {table}")
        for fts in FTS_TABLES:
            if fts in tables:
                db.execute_sql(f"INSERT INTO {fts}({fts}) VALUES ('delete-all')")
    return counts


def memories_for_export(db: pw.Database) -> list[dict[str, Any]]:
    """Every memory as a dict of EXPORTED_MEMORY_COLUMNS, by id ([] before the table exists)."""
    if "memory" not in table_names(db):
        return []
    cols = EXPORTED_MEMORY_COLUMNS
    return [dict(zip(cols, row))
            for row in db.execute_sql(f"SELECT {', '.join(cols)} FROM memory ORDER BY id").fetchall()]


def settings_text(db: pw.Database) -> list[tuple[str, str]]:
    """(key, stored JSON text) of every setting, by key."""
    return db.execute_sql("SELECT key, value FROM setting ORDER BY key").fetchall()


def in_transaction(db: pw.Database) -> bool:
    return db.in_transaction()
