"""The SQL of stored sentence embeddings: `memory_vector` and `message_vector` rows, each
tagged with the model that made it. The matrix built from them is `engine.memory.vectors`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import peewee as pw


@dataclass(frozen=True)
class VectorTable:
    """One kind of embedded text: where its vectors live and what should have one."""

    table: str  # the vectors' table
    key: str  # its column naming the embedded row
    source: str  # the embedded rows' table
    source_sql: str  # SELECT id, text of everything that should have a vector


MEMORY_VECTORS = VectorTable("memory_vector", "memory_id", "memory", "SELECT id, text FROM memory")
# Past messages worth finding again: finished, in a chat that is neither deleted nor temporary.
MESSAGE_VECTORS = VectorTable("message_vector", "message_id", "message", (
    "SELECT m.id AS id, m.content AS text FROM message m JOIN conversation c ON c.id = m.conversation_id "
    "WHERE m.status = 'complete' AND c.deleted_at IS NULL AND m.role IN ('user', 'assistant') "
    "AND length(trim(m.content)) > 0 AND coalesce(json_extract(c.settings, '$.temporary'), 0) = 0"
))


def has_table(db: pw.Database, kind: VectorTable) -> bool:
    """False on a database without the vectors' table (one not yet migrated)."""
    return bool(db.execute_sql(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (kind.table,)
    ).fetchone())


def missing_vectors(db: pw.Database, kind: VectorTable, model: str, limit: int | None = None) -> list[tuple[int, str]]:
    """(id, text) of rows without a vector of `model`, newest first."""
    sql = (f"SELECT s.id, s.text FROM ({kind.source_sql}) s LEFT JOIN {kind.table} v "
           f"ON v.{kind.key} = s.id WHERE v.vector IS NULL OR v.model != ? ORDER BY s.id DESC")
    args: tuple = (model,)
    if limit is not None:
        sql += " LIMIT ?"
        args = (model, limit)
    return [(r[0], r[1]) for r in db.execute_sql(sql, args).fetchall()]


def count_missing_vectors(db: pw.Database, kind: VectorTable, model: str) -> int:
    return db.execute_sql(
        f"SELECT count(*) FROM ({kind.source_sql}) s LEFT JOIN {kind.table} v ON v.{kind.key} = s.id "
        "WHERE v.vector IS NULL OR v.model != ?", (model,)
    ).fetchone()[0]


def save_vectors(db: pw.Database, kind: VectorTable, model: str, rows: Sequence[tuple[int, bytes]]) -> None:
    """Store (id, vector blob) rows made by `model`, in one transaction; a row whose id was
    deleted meanwhile (while it was being embedded) writes nothing."""
    with db.atomic():
        for row_id, blob in rows:
            db.execute_sql(
                f"INSERT OR REPLACE INTO {kind.table} ({kind.key}, model, vector) "
                f"SELECT ?, ?, ? WHERE EXISTS (SELECT 1 FROM {kind.source} WHERE id = ?)",
                (row_id, model, blob, row_id),
            )


def vectors_of(db: pw.Database, kind: VectorTable, model: str) -> list[tuple[int, bytes]]:
    """(id, vector blob) of `model`'s vectors whose row still exists, by id."""
    return db.execute_sql(
        f"SELECT v.{kind.key}, v.vector FROM {kind.table} v JOIN {kind.source} s ON s.id = v.{kind.key} "
        f"WHERE v.model = ? ORDER BY v.{kind.key}", (model,)
    ).fetchall()


def data_version(db: pw.Database) -> int:
    """SQLite's data_version: it changes when another connection commits."""
    return db.execute_sql("PRAGMA data_version").fetchone()[0]
