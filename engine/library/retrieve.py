"""Hybrid search over the library's chunks: the words' index (FTS5, BM25) and sentence
vectors (the memories' all-MiniLM-L6-v2 and their VectorIndex, numpy over a table), fused by
reciprocal rank (RRF). Database-bound: call `search` on the database thread, with the query's
vector made beforehand off it (`embed_queries`).

Vectors: numpy over the `doc_vector` table, loaded once into one matrix and refreshed when
rows change. Measured (bench/docs.py, 2 cores): a 100k x 384 matrix-vector product takes
about 10 ms on one BLAS thread; sqlite-vec's brute-force scan does the same work in C plus a
blob read per row and is an extra native package to ship, so it was not taken."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..memory import fts
from ..memory.embed import Embedder
from ..memory.vectors import VectorIndex
from ..store import library as sql
from .chunking import describe

CANDIDATES = 50  # from each ranking, before fusion
RRF_K = 60  # the usual constant: a rank's weight is 1 / (RRF_K + rank)
MIN_COSINE = 0.15


@dataclass(frozen=True)
class Passage:
    chunk_id: int
    path: str
    location: dict
    text: str
    score: float
    tokens: int

    @property
    def where(self) -> str:
        return describe(self.location)

    def to_dict(self) -> dict:
        return {"id": self.chunk_id, "path": self.path, "location": self.location, "where": self.where,
                "text": self.text, "score": round(self.score, 6), "tokens": self.tokens}


def embed_queries(embedder: Embedder | None, queries: Sequence[str]) -> list[tuple[str, np.ndarray] | None]:
    """Each query's vector (None for a blank one, or every one without an embedder), in one
    call of the model: a question and its other phrasings cost one batch, not one each."""
    texts = [q for q in queries if q.strip()]
    if embedder is None or not texts:
        return [None] * len(queries)
    vectors = iter(embedder.embed(texts))
    return [(embedder.name, next(vectors)) if q.strip() else None for q in queries]


def search(db, vectors: VectorIndex, query: str, query_vector: tuple[str, np.ndarray] | None, limit: int,
           source_ids: Sequence[int] | None = None, generation: object = None,
           also: Sequence[tuple[str, tuple[str, np.ndarray] | None]] = ()) -> list[Passage]:
    """The best `limit` passages for `query` (within `source_ids` when given), best first.
    `also`: other phrasings of it (engine/library/expand.py), each with its vector; their
    rankings are fused with the query's own."""
    rankings = []
    for text, vector in ((query, query_vector), *also):
        rankings.append([cid for cid, _ in sql.bm25(db, fts.any_of(text), CANDIDATES, source_ids)])
        rankings.append(_by_vector(db, vectors, vector, source_ids, generation))
    fused = fuse(rankings)
    best = sorted(fused, key=lambda c: -fused[c])[: max(limit * 2, limit + 5)]
    rows = sql.chunks_by_id(db, best)  # a chunk deleted since the matrix was loaded is absent
    out = [Passage(cid, rows[cid]["path"], rows[cid]["location"], rows[cid]["text"], fused[cid],
                   rows[cid]["tokens"]) for cid in best if cid in rows]
    return out[:limit]


def fuse(rankings: Sequence[Sequence[int]]) -> dict[int, float]:
    """Reciprocal rank fusion: each chunk's sum over the rankings of 1 / (RRF_K + its rank)."""
    fused: dict[int, float] = {}
    for ranking in rankings:
        for rank, cid in enumerate(ranking):
            fused[cid] = fused.get(cid, 0.0) + 1.0 / (RRF_K + rank + 1)
    return fused


def _by_vector(db, vectors: VectorIndex, query_vector: tuple[str, np.ndarray] | None,
               source_ids: Sequence[int] | None, generation: object) -> list[int]:
    if query_vector is None:
        return []
    model, vector = query_vector
    vectors.load(model, generation)
    cosine = vectors.cosines(vector)
    if not len(cosine):
        return []
    if source_ids is not None:
        allowed = np.isin(vectors.ids, np.asarray(sql.chunk_ids_of_sources(db, source_ids), dtype=np.int64))
        cosine = np.where(allowed, cosine, -1.0)
    nearest = vectors.nearest(cosine, CANDIDATES, MIN_COSINE)
    return sorted(nearest, key=lambda c: -nearest[c])
