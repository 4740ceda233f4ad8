"""Every read and write of memories: add, edit, forget, clear, list, full-text search."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterable, Iterator
from datetime import datetime

import peewee as pw

from ..errors import NotFound
from ..store import Store
from ..store.memory_models import MEMORY_TABLES, Memory, MemoryVector
from ..store.models import utcnow
from . import fts
from .records import MAX_MEMORY_CHARS, MemoryInfo, MemoryRefused, Origin


def _with_tables(method):
    """Run with the memory tables bound to this store's database.

    Peewee binds models globally; binding per call keeps two stores in one process (the
    user's and a test's, or a temporary in-memory one) from writing into each other.
    """

    @functools.wraps(method)
    def wrapper(self: MemoryStore, *args, **kwargs):
        with self._bound():
            return method(self, *args, **kwargs)

    return wrapper


def clean_text(text: str) -> str:
    """One line of normalised whitespace; refuses what is not a short fact."""
    if not isinstance(text, str):
        raise MemoryRefused("a memory must be text")
    cleaned = " ".join(text.split())
    if not cleaned:
        raise MemoryRefused("a memory cannot be empty")
    if len(cleaned) > MAX_MEMORY_CHARS:
        raise MemoryRefused(
            f"a memory is a short fact of at most {MAX_MEMORY_CHARS:,} characters and this one "
            f"has {len(cleaned):,}; save the key point instead, or keep the document in a chat"
        )
    return cleaned


class MemoryStore:
    """Memories in the store's SQLite database. Called from the engine's one database thread."""

    def __init__(self, store: Store):
        self.store = store
        self.db = store.db
        self.db.bind(MEMORY_TABLES, bind_refs=False, bind_backrefs=False)
        self.generation = 0  # bumped by every write here, so caches know to reload

    @contextlib.contextmanager
    def _bound(self) -> Iterator[None]:
        if Memory._meta.database is self.db:
            yield
            return
        with self.db.bind_ctx(MEMORY_TABLES, bind_refs=False, bind_backrefs=False):
            yield

    # -- writes --------------------------------------------------------------------

    @_with_tables
    def add(
        self, text: str, *, origin: Origin = Origin.MANUAL, conversation_id: int | None = None,
        message_id: int | None = None,
    ) -> MemoryInfo:
        """Save a fact; the same fact said again refreshes the old memory instead of doubling it."""
        text = clean_text(text)
        self.generation += 1
        with self.db.atomic():
            same = self._same_text(text)
            if same is not None:
                same.updated_at = utcnow()
                same.save()
                return _info(same)
            row = Memory.create(
                text=text, origin=origin.value, source_conversation=conversation_id,
                source_message=message_id,
            )
        return _info(row)

    def _same_text(self, text: str) -> Memory | None:
        key = text.lower().rstrip(".!")
        query = fts.all_of(text)
        if not query:
            return Memory.get_or_none(pw.fn.lower(Memory.text) == text.lower())
        rows = self.db.execute_sql(
            "SELECT rowid FROM memory_fts WHERE memory_fts MATCH ? LIMIT 50", (query,)
        ).fetchall()
        for row in Memory.select().where(Memory.id.in_([r[0] for r in rows])):
            if row.text.lower().rstrip(".!") == key:
                return row
        return None

    @_with_tables
    def edit(self, memory_id: int, text: str) -> MemoryInfo:
        text = clean_text(text)
        row = self._row(memory_id)
        self.generation += 1
        with self.db.atomic():
            row.text = text
            row.updated_at = utcnow()
            row.save()
            # The old vector describes the old text.
            MemoryVector.delete().where(MemoryVector.memory == memory_id).execute()
        return _info(row)

    @_with_tables
    def delete(self, memory_id: int) -> MemoryInfo:
        row = self._row(memory_id)
        info = _info(row)
        self.generation += 1
        row.delete_instance()
        self._forgotten({info.id: info.text})
        return info

    @_with_tables
    def delete_many(self, memory_ids: Iterable[int]) -> list[MemoryInfo]:
        ids = list(memory_ids)
        self.generation += 1
        with self.db.atomic():
            rows = [_info(r) for r in Memory.select().where(Memory.id.in_(ids)).order_by(Memory.id)]
            Memory.delete().where(Memory.id.in_(ids)).execute()
        self._forgotten({m.id: m.text for m in rows})
        return rows

    @_with_tables
    def clear(self) -> int:
        self.generation += 1
        with self.db.atomic():
            gone = {r.id: r.text for r in Memory.select(Memory.id, Memory.text)}
            count = Memory.delete().execute()
        self._forgotten(gone)
        return count

    def _forgotten(self, memories: dict[int, str]) -> None:
        """Their text leaves the answers' provenance and the raw files (engine/privacy.py)."""
        from ..privacy import forget_memories

        forget_memories(self.db, memories, in_memory=self.store.path == ":memory:")

    @_with_tables
    def mark_used(self, memory_ids: Iterable[int], when: datetime | None = None) -> None:
        ids = list(memory_ids)
        if ids:
            Memory.update(last_used_at=when or utcnow(), times_used=Memory.times_used + 1).where(
                Memory.id.in_(ids)
            ).execute()

    # -- reads ---------------------------------------------------------------------

    @_with_tables
    def get(self, memory_id: int) -> MemoryInfo:
        return _info(self._row(memory_id))

    def _row(self, memory_id: int) -> Memory:
        row = Memory.get_or_none(Memory.id == memory_id)
        if row is None:
            raise NotFound(f"no memory with id {memory_id}; it may have been forgotten already")
        return row

    @_with_tables
    def get_many(self, memory_ids: Iterable[int]) -> dict[int, MemoryInfo]:
        """The memories that still exist among `memory_ids` (a past answer's may be gone)."""
        return {r.id: _info(r) for r in Memory.select().where(Memory.id.in_(list(memory_ids)))}

    @_with_tables
    def count(self) -> int:
        return Memory.select().count()

    @_with_tables
    def list(self, limit: int | None = None, offset: int = 0) -> list[MemoryInfo]:
        """Newest first (by last edit), as the settings page shows them."""
        rows = Memory.select().order_by(Memory.updated_at.desc(), Memory.id.desc()).offset(offset)
        if limit is not None:
            rows = rows.limit(limit)
        return [_info(r) for r in rows]

    @_with_tables
    def search(self, query: str, limit: int = 50) -> list[MemoryInfo]:
        """Memories matching any word of `query`, best first (the settings search box)."""
        ranked = self.bm25(query, limit)
        if not ranked:
            return []
        rows = {r.id: r for r in Memory.select().where(Memory.id.in_([i for i, _ in ranked]))}
        return [_info(rows[i]) for i, _ in ranked if i in rows]

    def bm25(self, query: str, limit: int) -> list[tuple[int, float]]:
        """(memory id, BM25 score — higher is better) for rows matching any word of `query`."""
        match = fts.any_of(query)
        if not match:
            return []
        cursor = self.db.execute_sql(
            "SELECT rowid, -bm25(memory_fts) AS s FROM memory_fts WHERE memory_fts MATCH ? "
            "ORDER BY s DESC LIMIT ?",
            (match, limit),
        )
        return [(r[0], r[1]) for r in cursor.fetchall()]

    def candidates(self, query: str, limit: int) -> list[tuple[int, float, str, str, str | None]]:
        """(id, BM25 score, text, updated_at, last_used_at) of the best `limit` matches.

        Raw SQL on purpose: this runs every turn, and building model objects costs more than
        the search itself at 10,000 memories.
        """
        match = fts.any_of(query)
        if not match:
            return []
        return self.db.execute_sql(
            "SELECT t.id, t.s, m.text, m.updated_at, m.last_used_at FROM ("
            "SELECT rowid AS id, -bm25(memory_fts) AS s FROM memory_fts WHERE memory_fts MATCH ? "
            "ORDER BY s DESC LIMIT ?) AS t JOIN memory AS m ON m.id = t.id ORDER BY t.s DESC",
            (match, limit),
        ).fetchall()

    def rows_raw(self, memory_ids: Iterable[int]) -> list[tuple[int, float, str, str, str | None]]:
        """Like `candidates` (score 0) for given ids: embedding-only candidates."""
        ids = list(memory_ids)
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        return self.db.execute_sql(
            f"SELECT id, 0.0, text, updated_at, last_used_at FROM memory WHERE id IN ({marks})", ids
        ).fetchall()

    def matching_all(self, topic: str, limit: int = 200) -> list[int]:
        """Ids of memories containing every topic word of `topic` ("forget everything about X")."""
        match = fts.all_of(topic)
        if not match:
            return []
        cursor = self.db.execute_sql(
            "SELECT rowid FROM memory_fts WHERE memory_fts MATCH ? ORDER BY bm25(memory_fts) LIMIT ?",
            (match, limit),
        )
        return [r[0] for r in cursor.fetchall()]


def _info(row: Memory) -> MemoryInfo:
    return MemoryInfo(
        id=row.id, text=row.text, created_at=row.created_at, updated_at=row.updated_at,
        source_conversation_id=row.source_conversation_id, source_message_id=row.source_message_id,
        last_used_at=row.last_used_at, times_used=row.times_used, origin=Origin(row.origin),
    )
