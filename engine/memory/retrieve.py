"""Per-turn retrieval: BM25 over FTS5 plus recency, hybrid with cosine similarity when an
embedder is available, cut to top-k within a token budget."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Iterable

import numpy as np

from engine.memory import fts
from engine.memory.embed import Embedder, from_blob, one_blas_thread, to_blob
from engine.memory.records import Retrieved, SourceKind
from engine.memory.store import MemoryStore
from engine.store.memory_models import MemoryVector
from engine.store.models import utcnow

ITEM_OVERHEAD_TOKENS = 2  # the "- " and the newline around each item in the prompt


@dataclass(frozen=True)
class RetrievalSettings:
    top_k: int = 5
    candidates: int = 50  # BM25 rows scored per query
    semantic_weight: float = 0.7  # share of cosine in the hybrid score (measured best)
    recency_weight: float = 0.1  # a tie-breaker: never lifts an unrelated memory
    half_life_days: float = 180.0
    min_relative: float = 0.25  # lexical matches scoring below this share of the best are noise
    min_cosine: float = 0.35  # an embedding-only candidate must be at least this close
    past_chat_chars: int = 600  # the longest excerpt of a past message


class Retriever:
    """Finds memories (and past chat messages) for a turn. Runs on the database thread."""

    def __init__(self, memories: MemoryStore, embedder: Embedder | None = None,
                 settings: RetrievalSettings | None = None):
        self.memories = memories
        self.db = memories.db
        self.embedder = embedder
        self.settings = settings or RetrievalSettings()
        self.reset()

    def reset(self) -> None:
        """Forget the cached vectors (another embedder, or the database changed under us)."""
        self._ids = np.zeros(0, dtype=np.int64)
        self._position: dict[int, int] = {}
        self._matrix = np.zeros((0, 0), dtype=np.float32)
        self._seen_generation = None

    @property
    def hybrid(self) -> bool:
        return self.embedder is not None

    # -- ranking -------------------------------------------------------------------

    def rank(self, query: str, k: int | None = None, *, now: datetime | None = None,
             exclude: Iterable[int] = ()) -> list[tuple[int, float]]:
        """(memory id, score in 0..1) best first, without side effects."""
        return [(i, score) for i, score, _ in self._scored(query, k, now, exclude)]

    def _scored(self, query: str, k: int | None, now: datetime | None,
                exclude: Iterable[int]) -> list[tuple[int, float, str]]:
        s = self.settings
        k = s.top_k if k is None else k
        excluded = set(exclude)
        rows = {r[0]: r for r in self.memories.candidates(query, s.candidates) if r[0] not in excluded}
        best = max((r[1] for r in rows.values()), default=0.0)
        if self.hybrid:
            relevance = self._blend(query, {i: r[1] for i, r in rows.items()}, best, excluded)
            missing = [i for i in relevance if i not in rows]
            rows.update((r[0], r) for r in self.memories.rows_raw(missing))
        else:
            relevance = {i: r[1] / best for i, r in rows.items() if best > 0 and r[1] / best >= s.min_relative}
        now = now or utcnow()
        scored = []
        for memory_id, value in relevance.items():
            row = rows.get(memory_id)
            if row is None:
                continue
            touched = max(_when(row[3]), _when(row[4]) or _when(row[3]))
            age_days = max(0.0, (now - touched).total_seconds() / 86400)
            recency = math.exp(-math.log(2) * age_days / s.half_life_days)
            scored.append((memory_id, (1 - s.recency_weight) * value + s.recency_weight * recency, row[2]))
        scored.sort(key=lambda item: (-item[1], -item[0]))
        return scored[:k]

    def _blend(self, query: str, lexical: dict[int, float], best: float, excluded: set[int]) -> dict[int, float]:
        self.sync_vectors()
        if not len(self._ids):
            return {i: v / best for i, v in lexical.items()} if best else {}
        q = self.embedder.embed([query])[0]
        with one_blas_thread():
            cosine = self._matrix @ q
        position = self._position
        nearest = np.argpartition(-cosine, min(self.settings.candidates, len(cosine) - 1))[: self.settings.candidates]
        candidates = set(lexical) | {
            int(self._ids[n]) for n in nearest if cosine[n] >= self.settings.min_cosine
        }
        w = self.settings.semantic_weight
        out = {}
        for memory_id in candidates - excluded:
            n = position.get(memory_id)
            cos = float(cosine[n]) if n is not None else 0.0
            lex = lexical.get(memory_id, 0.0) / best if best else 0.0
            out[memory_id] = (1 - w) * lex + w * max(cos, 0.0)
        return out

    def sync_vectors(self, limit: int | None = 128) -> int:
        """Embed up to `limit` memories that have no vector yet (None: all of them) and reload
        the in-memory matrix if anything changed. Returns how many were embedded now.

        Bounded so a turn never waits for a whole backlog (10,000 memories take minutes on a
        CPU): the rest follow on later turns, matched by words until then.
        """
        if self.embedder is None:
            return 0
        generation = (self.memories.generation, self.db.execute_sql("PRAGMA data_version").fetchone()[0])
        if generation == self._seen_generation:
            return 0
        with self.memories._bound():
            rows = self.db.execute_sql(
                "SELECT m.id, m.text, v.vector, v.model FROM memory m "
                "LEFT JOIN memory_vector v ON v.memory_id = m.id ORDER BY m.id"
            ).fetchall()
            missing = [(i, text) for i, text, blob, model in rows if blob is None or model != self.embedder.name]
            todo = missing if limit is None else missing[-limit:]  # newest first: most likely asked about
            fresh = {}
            if todo:
                vectors = self.embedder.embed([text for _, text in todo])
                fresh = {i: v for (i, _), v in zip(todo, vectors)}
                with self.db.atomic():
                    MemoryVector.insert_many(
                        [{"memory": i, "model": self.embedder.name, "vector": to_blob(v)} for i, v in fresh.items()]
                    ).on_conflict_replace().execute()
            stale = {i for i, _ in missing}
            kept = [(i, fresh[i] if i in fresh else from_blob(blob)) for i, _, blob, _ in rows
                    if i in fresh or i not in stale]
        self._ids = np.asarray([i for i, _ in kept], dtype=np.int64)
        self._position = {i: n for n, (i, _) in enumerate(kept)}
        self._matrix = np.vstack([v for _, v in kept]).astype(np.float32) if kept else np.zeros((0, 0), np.float32)
        if len(todo) == len(missing):
            self._seen_generation = generation
        return len(todo)

    # -- per-turn selection --------------------------------------------------------

    def for_turn(self, query: str, *, budget_tokens: int, count: Callable[[str], int],
                 top_k: int | None = None, exclude: Iterable[int] = (),
                 mark_used: bool = True) -> list[Retrieved]:
        """The best memories for `query` that fit in `budget_tokens`, recording their use."""
        if budget_tokens <= 0:
            return []
        chosen, used = [], 0
        for memory_id, score, text in self._scored(query, top_k, None, exclude):
            tokens = count(text) + ITEM_OVERHEAD_TOKENS
            if used + tokens > budget_tokens:
                continue
            used += tokens
            chosen.append(Retrieved(SourceKind.MEMORY, memory_id, text, score, tokens))
        if mark_used and chosen:
            self.memories.mark_used([r.id for r in chosen])
        return chosen

    def past_chats(self, query: str, *, conversation_id: int | None, budget_tokens: int,
                   count: Callable[[str], int], limit: int = 3) -> list[Retrieved]:
        """Excerpts of other conversations' messages ("reference chat history").

        Deleted and temporary conversations are never searched.
        """
        match = fts.any_of(query)
        if not match or budget_tokens <= 0:
            return []
        rows = self.db.execute_sql(
            "SELECT m.id, m.conversation_id, m.content, -bm25(message_fts) AS s "
            "FROM message_fts f JOIN message m ON m.id = f.rowid "
            "JOIN conversation c ON c.id = m.conversation_id "
            "WHERE message_fts MATCH ? AND m.conversation_id IS NOT ? AND c.deleted_at IS NULL "
            "AND m.status = 'complete' AND coalesce(json_extract(c.settings, '$.temporary'), 0) = 0 "
            "ORDER BY s DESC LIMIT ?",
            (match, conversation_id, limit * 4),
        ).fetchall()
        best = max((r[3] for r in rows), default=0.0)
        chosen, used = [], 0
        for message_id, conv_id, content, score in rows:
            if best <= 0 or score / best < self.settings.min_relative or len(chosen) >= limit:
                continue
            text = _excerpt(content, query, self.settings.past_chat_chars)
            tokens = count(text) + ITEM_OVERHEAD_TOKENS
            if used + tokens > budget_tokens:
                continue
            used += tokens
            chosen.append(Retrieved(SourceKind.PAST_CHAT, message_id, text, score / best, tokens, conv_id))
        return chosen


def _when(value) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value)


def _excerpt(content: str, query: str, limit: int) -> str:
    """The part of a long message around the first query word, whole words, one line."""
    flat = " ".join(content.split())
    if len(flat) <= limit:
        return flat
    lowered = flat.lower()
    hits = [lowered.find(t) for t in fts.content_terms(query)]
    start = min((h for h in hits if h >= 0), default=0)
    start = max(0, start - limit // 3)
    end = min(len(flat), start + limit)
    piece = flat[start:end]
    if start > 0:
        piece = "…" + piece.split(" ", 1)[-1]
    if end < len(flat):
        piece = piece.rsplit(" ", 1)[0] + "…"
    return piece
