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

from ..store.vectors import (
    MEMORY_VECTORS,
    MESSAGE_VECTORS,
    VectorTable,
    count_missing_vectors,
    data_version,
    has_table,
    missing_vectors,
    save_vectors,
    vectors_of,
)
from .embed import from_blob, one_blas_thread, to_blob


class VectorIndex:
    """One kind of text (memories or messages) and its vectors, as a matrix of unit rows."""

    def __init__(self, db, kind: VectorTable):
        self.db = db
        self.kind = kind
        self.ids = np.zeros(0, dtype=np.int64)
        self.matrix = np.zeros((0, 0), dtype=np.float32)
        self.position: dict[int, int] = {}
        self._seen: tuple | None = None
        self._saves = 0  # writes through this object; other connections' show in data_version

    @classmethod
    def for_memories(cls, db) -> VectorIndex:
        return cls(db, MEMORY_VECTORS)

    @classmethod
    def for_messages(cls, db) -> VectorIndex:
        return cls(db, MESSAGE_VECTORS)

    def available(self) -> bool:
        """False on a database without the table (one not yet migrated)."""
        return has_table(self.db, self.kind)

    def missing(self, model: str, limit: int | None = None) -> list[tuple[int, str]]:
        """(id, text) without a vector of `model`, newest first (most likely asked about)."""
        return missing_vectors(self.db, self.kind, model, limit)

    def count_missing(self, model: str) -> int:
        return count_missing_vectors(self.db, self.kind, model)

    def save(self, model: str, ids: Sequence[int], vectors: np.ndarray) -> None:
        """Store vectors made by `model` (rows of ids that vanished meanwhile are skipped)."""
        if not len(ids):
            return
        self._saves += 1
        save_vectors(self.db, self.kind, model, [(int(i), to_blob(v)) for i, v in zip(ids, vectors)])

    def load(self, model: str, generation: object = None) -> None:
        """Refresh `ids`/`matrix` with `model`'s vectors if anything changed since last time."""
        # No scan of the table per turn: this object's own writes, the memories' generation
        # and SQLite's data_version (bumped by other connections' commits) say what changed.
        seen = (model, generation, self._saves, data_version(self.db))
        if seen == self._seen:
            return
        rows = vectors_of(self.db, self.kind, model)
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
