"""The SQL of long-term memories: rows of the `memory` table, its full-text index and the
`memory_vector` rows that go with it.

Plain row access only; what a memory may say, its records and its undo live in
`engine.memory`. Call from the engine's database thread. Functions that use the peewee
models expect them bound to the database (`memory_tables`); the raw-SQL ones take `db`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime

import peewee as pw

from .memory_models import MEMORY_TABLES, Memory, MemoryVector
from .models import utcnow

# A memory's row as these functions hand it out: read its fields; every write goes through
# a function here.
MemoryRow = Memory
# A raw row for ranking: (id, score, text, updated_at, last_used_at).
RankedRow = tuple[int, float, str, str, str | None]


def bind_memory_tables(db: pw.Database) -> None:
    """Bind the memory tables to `db` for this process (the last store opened wins)."""
    db.bind(MEMORY_TABLES, bind_refs=False, bind_backrefs=False)


@contextlib.contextmanager
def memory_tables(db: pw.Database) -> Iterator[None]:
    """The memory tables bound to `db` for the duration (peewee binds models globally, so
    two stores in one process would otherwise write into each other)."""
    if Memory._meta.database is db:
        yield
        return
    with db.bind_ctx(MEMORY_TABLES, bind_refs=False, bind_backrefs=False):
        yield


# -- writes (models bound) -------------------------------------------------------------

def add_memory(db: pw.Database, text: str, *, match: str, same: Callable[[str], bool], origin: str,
               conversation_id: int | None, message_id: int | None) -> Memory:
    """Insert a memory, or refresh the one that says the same already, in one transaction.

    "The same": among the rows the FTS query `match` finds (50 at most), the first whose text
    `same(text)` accepts; with an empty `match`, a row whose text equals `text` ignoring case.
    """
    with db.atomic():
        found = _same_text(db, text, match, same)
        if found is not None:
            found.updated_at = utcnow()
            found.save()
            return found
        return Memory.create(text=text, origin=origin, source_conversation=conversation_id,
                             source_message=message_id)


def _same_text(db: pw.Database, text: str, match: str, same: Callable[[str], bool]) -> Memory | None:
    if not match:
        return Memory.get_or_none(pw.fn.lower(Memory.text) == text.lower())
    rows = db.execute_sql("SELECT rowid FROM memory_fts WHERE memory_fts MATCH ? LIMIT 50", (match,)).fetchall()
    for row in Memory.select().where(Memory.id.in_([r[0] for r in rows])):
        if same(row.text):
            return row
    return None


def set_memory_text(db: pw.Database, row: Memory, text: str) -> None:
    """New text for a memory; its vector (which describes the old text) is dropped."""
    with db.atomic():
        row.text = text
        row.updated_at = utcnow()
        row.save()
        MemoryVector.delete().where(MemoryVector.memory == row.id).execute()


def delete_memory(row: Memory) -> None:
    row.delete_instance()


def delete_memories(db: pw.Database, memory_ids: Iterable[int]) -> list[Memory]:
    """Delete the memories among `memory_ids`; returns their rows, by id."""
    ids = list(memory_ids)
    with db.atomic():
        rows = list(Memory.select().where(Memory.id.in_(ids)).order_by(Memory.id))
        Memory.delete().where(Memory.id.in_(ids)).execute()
    return rows


def delete_all_memories(db: pw.Database) -> tuple[dict[int, str], int]:
    """Delete every memory: ({id: text} of those deleted, how many rows went)."""
    with db.atomic():
        gone = {r.id: r.text for r in Memory.select(Memory.id, Memory.text)}
        count = Memory.delete().execute()
    return gone, count


def mark_memories_used(memory_ids: Iterable[int], when: datetime | None = None) -> None:
    """Count one more use of each memory, and when it was."""
    ids = list(memory_ids)
    if ids:
        Memory.update(last_used_at=when or utcnow(), times_used=Memory.times_used + 1).where(
            Memory.id.in_(ids)
        ).execute()


def restore_memory(*, id: int, text: str, created_at: datetime, updated_at: datetime,
                   source_conversation_id: int | None, source_message_id: int | None,
                   last_used_at: datetime | None, times_used: int, origin: str) -> None:
    """Put a deleted memory back with its old id (the caller checked the id is free)."""
    Memory.insert(
        id=id, text=text, created_at=created_at, updated_at=updated_at,
        source_conversation=source_conversation_id, source_message=source_message_id,
        last_used_at=last_used_at, times_used=times_used, origin=origin,
    ).execute()


# -- reads (models bound) ---------------------------------------------------------------

def memory_row(memory_id: int) -> Memory | None:
    return Memory.get_or_none(Memory.id == memory_id)


def memory_rows(memory_ids: Iterable[int]) -> list[Memory]:
    """The rows that still exist among `memory_ids`, in no particular order."""
    return list(Memory.select().where(Memory.id.in_(list(memory_ids))))


def count_memories() -> int:
    # plain SQL: a Send asks (is there anything to find?), and peewee's count wraps a subquery
    return Memory._meta.database.execute_sql(f'SELECT COUNT(*) FROM "{Memory._meta.table_name}"').fetchone()[0]


def newest_memories(limit: int | None = None, offset: int = 0) -> list[Memory]:
    """Newest first by last edit (then by id), as the settings page lists them."""
    rows = Memory.select().order_by(Memory.updated_at.desc(), Memory.id.desc()).offset(offset)
    if limit is not None:
        rows = rows.limit(limit)
    return list(rows)


# -- raw reads (every turn: no model objects) -------------------------------------------

def memory_bm25(db: pw.Database, match: str, limit: int) -> list[tuple[int, float]]:
    """(memory id, BM25 score, higher is better) of rows matching the FTS query `match`."""
    cursor = db.execute_sql(
        "SELECT rowid, -bm25(memory_fts) AS s FROM memory_fts WHERE memory_fts MATCH ? "
        "ORDER BY s DESC LIMIT ?",
        (match, limit),
    )
    return [(r[0], r[1]) for r in cursor.fetchall()]


def memory_candidates(db: pw.Database, match: str, limit: int) -> list[RankedRow]:
    """The best `limit` rows for the FTS query `match`, best first, as RankedRow.

    Raw SQL on purpose: this runs every turn, and building model objects costs more than
    the search itself at 10,000 memories.
    """
    return db.execute_sql(
        "SELECT t.id, t.s, m.text, m.updated_at, m.last_used_at FROM ("
        "SELECT rowid AS id, -bm25(memory_fts) AS s FROM memory_fts WHERE memory_fts MATCH ? "
        "ORDER BY s DESC LIMIT ?) AS t JOIN memory AS m ON m.id = t.id ORDER BY t.s DESC",
        (match, limit),
    ).fetchall()


def memory_rows_raw(db: pw.Database, memory_ids: Iterable[int]) -> list[RankedRow]:
    """Like `memory_candidates` (score 0) for the given ids."""
    ids = list(memory_ids)
    if not ids:
        return []
    marks = ",".join("?" * len(ids))
    return db.execute_sql(
        f"SELECT id, 0.0, text, updated_at, last_used_at FROM memory WHERE id IN ({marks})", ids
    ).fetchall()


def memory_ids_matching(db: pw.Database, match: str, limit: int) -> list[int]:
    """Ids of memories matching the FTS query `match`, best first."""
    cursor = db.execute_sql(
        "SELECT rowid FROM memory_fts WHERE memory_fts MATCH ? ORDER BY bm25(memory_fts) LIMIT ?",
        (match, limit),
    )
    return [r[0] for r in cursor.fetchall()]


def row_exists(db: pw.Database, table: str, row_id: int) -> bool:
    """Whether `table` ("conversation", "message", "memory") has a row with this id."""
    if table not in ("conversation", "message", "memory"):
        raise ValueError(f"row_exists: unknown table {table!r}")
    return db.execute_sql(f"SELECT 1 FROM {table} WHERE id = ?", (row_id,)).fetchone() is not None


def setting_text(db: pw.Database, key: str) -> str | None:
    """A setting's stored JSON text, or None; raw SQL because it is read every turn."""
    row = db.execute_sql("SELECT value FROM setting WHERE key = ?", (key,)).fetchone()
    return row[0] if row else None
