"""Every read and write of memories: add, edit, forget, clear, list, full-text search.

The SQL itself is in `engine.store.memories`; this keeps what a memory may say and the
records the rest of Wren sees."""

from __future__ import annotations

import builtins
import contextlib
import functools
from collections.abc import Iterable, Iterator
from datetime import datetime

from ..errors import NotFound
from ..store import Store
from ..store import memories as rows
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
        rows.bind_memory_tables(self.db)
        self.generation = 0  # bumped by every write here, so caches know to reload

    @contextlib.contextmanager
    def _bound(self) -> Iterator[None]:
        with rows.memory_tables(self.db):
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
        key = text.lower().rstrip(".!")
        row = rows.add_memory(
            self.db, text, match=fts.all_of(text), same=lambda found: found.lower().rstrip(".!") == key,
            origin=origin.value, conversation_id=conversation_id, message_id=message_id,
        )
        return _info(row)

    @_with_tables
    def edit(self, memory_id: int, text: str) -> MemoryInfo:
        text = clean_text(text)
        row = self._row(memory_id)
        self.generation += 1
        rows.set_memory_text(self.db, row, text)
        return _info(row)

    @_with_tables
    def delete(self, memory_id: int) -> MemoryInfo:
        row = self._row(memory_id)
        info = _info(row)
        self.generation += 1
        rows.delete_memory(row)
        self._forgotten({info.id: info.text})
        return info

    @_with_tables
    def delete_many(self, memory_ids: Iterable[int]) -> list[MemoryInfo]:
        self.generation += 1
        gone = [_info(r) for r in rows.delete_memories(self.db, memory_ids)]
        self._forgotten({m.id: m.text for m in gone})
        return gone

    @_with_tables
    def clear(self) -> int:
        self.generation += 1
        gone, count = rows.delete_all_memories(self.db)
        self._forgotten(gone)
        return count

    def _forgotten(self, memories: dict[int, str]) -> None:
        """Their text leaves the answers' provenance and the raw files (engine/privacy.py)."""
        from ..privacy import forget_memories

        forget_memories(self.db, memories, in_memory=self.store.path == ":memory:")

    @_with_tables
    def mark_used(self, memory_ids: Iterable[int], when: datetime | None = None) -> None:
        rows.mark_memories_used(memory_ids, when)

    # -- reads ---------------------------------------------------------------------

    @_with_tables
    def get(self, memory_id: int) -> MemoryInfo:
        return _info(self._row(memory_id))

    def _row(self, memory_id: int) -> rows.MemoryRow:
        row = rows.memory_row(memory_id)
        if row is None:
            raise NotFound(f"no memory with id {memory_id}; it may have been forgotten already")
        return row

    @_with_tables
    def get_many(self, memory_ids: Iterable[int]) -> dict[int, MemoryInfo]:
        """The memories that still exist among `memory_ids` (a past answer's may be gone)."""
        return {r.id: _info(r) for r in rows.memory_rows(memory_ids)}

    @_with_tables
    def count(self) -> int:
        return rows.count_memories()

    @_with_tables
    def list(self, limit: int | None = None, offset: int = 0) -> list[MemoryInfo]:
        """Newest first (by last edit), as the settings page shows them."""
        return [_info(r) for r in rows.newest_memories(limit, offset)]

    @_with_tables
    def search(self, query: str, limit: int = 50) -> builtins.list[MemoryInfo]:
        """Memories matching any word of `query`, best first (the settings search box)."""
        ranked = self.bm25(query, limit)
        if not ranked:
            return []
        found = {r.id: r for r in rows.memory_rows(i for i, _ in ranked)}
        return [_info(found[i]) for i, _ in ranked if i in found]

    def bm25(self, query: str, limit: int) -> builtins.list[tuple[int, float]]:
        """(memory id, BM25 score — higher is better) for rows matching any word of `query`."""
        match = fts.any_of(query)
        return rows.memory_bm25(self.db, match, limit) if match else []

    def candidates(self, query: str, limit: int) -> builtins.list[rows.RankedRow]:
        """(id, BM25 score, text, updated_at, last_used_at) of the best `limit` matches."""
        match = fts.any_of(query)
        return rows.memory_candidates(self.db, match, limit) if match else []

    def rows_raw(self, memory_ids: Iterable[int]) -> builtins.list[rows.RankedRow]:
        """Like `candidates` (score 0) for given ids: embedding-only candidates."""
        return rows.memory_rows_raw(self.db, memory_ids)

    def matching_all(self, topic: str, limit: int = 200) -> builtins.list[int]:
        """Ids of memories containing every topic word of `topic` ("forget everything about X")."""
        match = fts.all_of(topic)
        return rows.memory_ids_matching(self.db, match, limit) if match else []


def _info(row: rows.MemoryRow) -> MemoryInfo:
    return MemoryInfo(
        id=row.id, text=row.text, created_at=row.created_at, updated_at=row.updated_at,
        # peewee makes each foreign key's <name>_id accessor at runtime; the model class does not declare it
        source_conversation_id=row.source_conversation_id,  # type: ignore[attr-defined]
        source_message_id=row.source_message_id,  # type: ignore[attr-defined]
        last_used_at=row.last_used_at, times_used=row.times_used, origin=Origin(row.origin),
    )
