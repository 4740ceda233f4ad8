"""Stored sentence embeddings of memories and past messages, and their in-memory matrix.

Each row is tagged with the id of the model that made it; rows of another model count as
missing, so changing the embedder re-embeds everything (newest first). Database-bound: call
these from the engine's database thread. The embedding itself is not done here: the caller
reads `missing()`, embeds wherever it likes (the Engine: its executor, never the event loop
or the database thread) and hands the vectors back to `save()`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .embed import from_blob, one_blas_thread, to_blob

# Past messages worth finding again: finished, in a chat that is neither deleted nor temporary.
_ELIGIBLE_MESSAGES = (
    "SELECT m.id AS id, m.content AS text FROM message m JOIN conversation c ON c.id = m.conversation_id "
    "WHERE m.status = 'complete' AND c.deleted_at IS NULL AND m.role IN ('user', 'assistant') "
    "AND length(trim(m.content)) > 0 AND coalesce(json_extract(c.settings, '$.temporary'), 0) = 0"
)


class VectorIndex:
    """One kind of text (memories or messages) and its vectors, as a matrix of unit rows."""

    def __init__(self, db, *, source_sql: str, table: str, key: str):
        self.db = db
        self.source_sql = source_sql  # SELECT id, text of everything that should have a vector
        self.table, self.key = table, key
        self.ids = np.zeros(0, dtype=np.int64)
        self.matrix = np.zeros((0, 0), dtype=np.float32)
        self.position: dict[int, int] = {}
        self._seen: tuple | None = None
        self._saves = 0  # writes through this object; other connections' show in data_version

    @classmethod
    def for_memories(cls, db) -> VectorIndex:
        return cls(db, source_sql="SELECT id, text FROM memory", table="memory_vector", key="memory_id")

    @classmethod
    def for_messages(cls, db) -> VectorIndex:
        return cls(db, source_sql=_ELIGIBLE_MESSAGES, table="message_vector", key="message_id")

    def available(self) -> bool:
        """False on a database without the table (one not yet migrated)."""
        return bool(self.db.execute_sql(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (self.table,)
        ).fetchone())

    def missing(self, model: str, limit: int | None = None) -> list[tuple[int, str]]:
        """(id, text) without a vector of `model`, newest first (most likely asked about)."""
        sql = (f"SELECT s.id, s.text FROM ({self.source_sql}) s LEFT JOIN {self.table} v "
               f"ON v.{self.key} = s.id WHERE v.vector IS NULL OR v.model != ? ORDER BY s.id DESC")
        args: tuple = (model,)
        if limit is not None:
            sql += " LIMIT ?"
            args = (model, limit)
        return [(r[0], r[1]) for r in self.db.execute_sql(sql, args).fetchall()]

    def count_missing(self, model: str) -> int:
        return self.db.execute_sql(
            f"SELECT count(*) FROM ({self.source_sql}) s LEFT JOIN {self.table} v ON v.{self.key} = s.id "
            "WHERE v.vector IS NULL OR v.model != ?", (model,)
        ).fetchone()[0]

    def save(self, model: str, ids: Sequence[int], vectors: np.ndarray) -> None:
        """Store vectors made by `model` (rows of ids that vanished meanwhile are skipped)."""
        if not len(ids):
            return
        self._saves += 1
        rows = [(int(i), model, to_blob(v)) for i, v in zip(ids, vectors)]
        with self.db.atomic():
            # INSERT … SELECT: an id deleted while it was being embedded writes nothing.
            source = "memory" if self.table == "memory_vector" else "message"
            for row in rows:
                self.db.execute_sql(
                    f"INSERT OR REPLACE INTO {self.table} ({self.key}, model, vector) "
                    f"SELECT ?, ?, ? WHERE EXISTS (SELECT 1 FROM {source} WHERE id = ?)",
                    (*row, row[0]),
                )

    def load(self, model: str, generation: object = None) -> None:
        """Refresh `ids`/`matrix` with `model`'s vectors if anything changed since last time."""
        # No scan of the table per turn: this object's own writes, the memories' generation
        # and SQLite's data_version (bumped by other connections' commits) say what changed.
        seen = (model, generation, self._saves, self.db.execute_sql("PRAGMA data_version").fetchone()[0])
        if seen == self._seen:
            return
        source = "memory" if self.table == "memory_vector" else "message"
        rows = self.db.execute_sql(
            f"SELECT v.{self.key}, v.vector FROM {self.table} v JOIN {source} s ON s.id = v.{self.key} "
            f"WHERE v.model = ? ORDER BY v.{self.key}", (model,)
        ).fetchall()
        self.ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        self.position = {int(i): n for n, i in enumerate(self.ids)}
        self.matrix = (np.vstack([from_blob(r[1]) for r in rows]).astype(np.float32, copy=False)
                       if rows else np.zeros((0, 0), np.float32))
        self._seen = seen

    def cosines(self, query: np.ndarray) -> np.ndarray:
        """Cosine of `query` with every row (one matrix-vector product); empty if none fit."""
        if not len(self.ids) or self.matrix.shape[1] != len(query):
            return np.zeros(0, dtype=np.float32)
        with one_blas_thread():
            return self.matrix @ np.asarray(query, dtype=np.float32)

    def nearest(self, cosine: np.ndarray, count: int, min_cosine: float) -> dict[int, float]:
        """Up to `count` ids (from `cosines()`) at least `min_cosine` close."""
        if not len(cosine):
            return {}
        count = min(count, len(cosine))
        top = np.argpartition(-cosine, count - 1)[:count]
        return {int(self.ids[n]): float(cosine[n]) for n in top if cosine[n] >= min_cosine}

    def forget(self) -> None:
        self._seen = None
