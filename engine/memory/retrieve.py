"""Per-turn retrieval: BM25 over FTS5 plus recency, hybrid with cosine similarity when an
embedder is available, cut to top-k within a token budget."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from ..store.models import utcnow
from ..store.past_messages import past_messages, search_past_messages
from . import fts
from .embed import Embedder
from .records import Retrieved, SourceKind
from .store import MemoryStore
from .vectors import VectorIndex

log = logging.getLogger(__name__)

ITEM_OVERHEAD_TOKENS = 2  # the "- " and the newline around each item in the prompt


@dataclass(frozen=True)
class RetrievalSettings:
    top_k: int = 5
    candidates: int = 50  # BM25 rows scored per query
    semantic_weight: float = 0.7  # share of cosine in the hybrid score (measured best)
    recency_weight: float = 0.1  # a tie-breaker: never lifts an unrelated memory
    half_life_days: float = 180.0
    min_relative: float = 0.25  # lexical matches scoring below this share of the best are noise
    # An embedding-only candidate must be at least this close. Measured (all-MiniLM-L6-v2):
    # at 0.35 / 0.30 / 0.25, recall@3 on paraphrase_data.py is 0.86 / 0.92 / 0.94, while 8
    # questions unrelated to any memory bring 0.5 / 0.6 / 1.0 memories each into the prompt;
    # retrieval_data.py stays 0.98 at all three. Chosen on those sets, so the held-out
    # figure is the 0.86 at 0.35.
    min_cosine: float = 0.30
    past_chat_chars: int = 600  # the longest excerpt of a past message
    # Memories that go together: one this close to a memory chosen for the turn comes with it
    # (vegetarian and a peanut allergy for "what should I cook?", where the allergy alone is
    # too far from the question: cosine 0.14), if it is at least `companion_floor` close to
    # the question too (a penicillin allergy is near the peanut one, 0.47, not near dinner,
    # 0.08). Measured on all-MiniLM-L6-v2 over paraphrase_data.py's memories: facts of one
    # kind pair at 0.44-0.63 (diet, allergies), most unrelated pairs below 0.40
    # (tests/engine/memory/test_companions.py). The direct hits' order does not change.
    companion_cosine: float = 0.44
    companion_floor: float = 0.10


class Retriever:
    """Finds memories (and past chat messages) for a turn. Runs on the database thread.

    With an embedder attached, ranking is hybrid: BM25 candidates plus the nearest vectors,
    scored by a blend of both. The query's vector may be passed in (the Engine embeds it on
    its executor); otherwise it is embedded here. Memories without a vector of the current
    model are found by their words until `sync_vectors` (or the Engine's background job) has
    embedded them.
    """

    def __init__(self, memories: MemoryStore, embedder: Embedder | None = None,
                 settings: RetrievalSettings | None = None):
        self.memories = memories
        self.db = memories.db
        self.embedder = embedder
        self.settings = settings or RetrievalSettings()
        self.vectors = VectorIndex.for_memories(self.db)
        self.message_vectors = VectorIndex.for_messages(self.db)
        self.reset()

    def reset(self) -> None:
        """Forget the cached vectors (another embedder, or the database changed under us)."""
        self.vectors.forget()
        self.message_vectors.forget()

    @property
    def hybrid(self) -> bool:
        return self.embedder is not None

    @property
    def model_id(self) -> str | None:
        """The id stored with every vector; vectors of another id are re-embedded."""
        return self.embedder.name if self.embedder is not None else None

    @property
    def _ids(self) -> np.ndarray:
        return self.vectors.ids

    def query_vector(self, query: str) -> np.ndarray:
        """The query's vector, made here (on the database thread): for callers without one."""
        assert self.embedder is not None, "no embedder attached"
        return self.embedder.embed([query])[0]

    # -- ranking -------------------------------------------------------------------

    def rank(self, query: str, k: int | None = None, *, now: datetime | None = None,
             exclude: Iterable[int] = (), query_vector: np.ndarray | None = None) -> list[tuple[int, float]]:
        """(memory id, score in 0..1) best first, without side effects."""
        return [(i, score) for i, score, _ in self._scored(query, k, now, exclude, query_vector)]

    def _scored(self, query: str, k: int | None, now: datetime | None,
                exclude: Iterable[int], query_vector: np.ndarray | None = None) -> list[tuple[int, float, str]]:
        s = self.settings
        k = s.top_k if k is None else k
        excluded = set(exclude)
        rows = {r[0]: r for r in self.memories.candidates(query, s.candidates) if r[0] not in excluded}
        best = max((r[1] for r in rows.values()), default=0.0)
        if self.hybrid:
            relevance = self._blend(query, {i: r[1] for i, r in rows.items()}, best, excluded, query_vector)
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
            created = _when(row[3])
            assert created is not None  # every memory has its creation time
            touched = max(created, _when(row[4]) or created)
            age_days = max(0.0, (now - touched).total_seconds() / 86400)
            recency = math.exp(-math.log(2) * age_days / s.half_life_days)
            scored.append((memory_id, (1 - s.recency_weight) * value + s.recency_weight * recency, row[2]))
        scored.sort(key=lambda item: (-item[1], -item[0]))
        return scored[:k]

    def _blend(self, query: str, lexical: dict[int, float], best: float, excluded: set[int],
               query_vector: np.ndarray | None) -> dict[int, float]:
        self.load_vectors()
        if not len(self.vectors.ids):
            return {i: v / best for i, v in lexical.items()} if best else {}
        try:
            q = self.query_vector(query) if query_vector is None else query_vector
        except Exception:  # a broken embedder: words alone, as without one
            log.exception("embedding the query failed; ranking by words only")
            return {i: v / best for i, v in lexical.items()} if best else {}
        cosine = self.vectors.cosines(q)
        close = self.vectors.nearest(cosine, self.settings.candidates, self.settings.min_cosine)
        position = self.vectors.position
        w = self.settings.semantic_weight
        out = {}
        for memory_id in (set(lexical) | set(close)) - excluded:
            n = position.get(memory_id)
            cos = float(cosine[n]) if n is not None and len(cosine) else 0.0
            lex = lexical.get(memory_id, 0.0) / best if best else 0.0
            out[memory_id] = (1 - w) * lex + w * max(cos, 0.0)
        return out

    def sync_vectors(self, limit: int | None = 128) -> int:
        """Embed, here and now, up to `limit` memories with no vector of the current model
        (None: all of them). Returns how many were embedded.

        For the CLI, tests and benchmarks; the Engine embeds on its executor instead
        (engine/memory/facade.py). Bounded so a caller never waits for a whole backlog.
        """
        return self._sync(self.vectors, limit)

    def sync_message_vectors(self, limit: int | None = 128) -> int:
        """Like `sync_vectors`, for past messages ("reference chat history")."""
        if not self.message_vectors.available():
            return 0
        return self._sync(self.message_vectors, limit)

    def _sync(self, index: VectorIndex, limit: int | None) -> int:
        if self.embedder is None:
            return 0
        model = self.embedder.name
        with self.memories._bound():
            todo = index.missing(model, limit)
            if todo:
                index.save(model, [i for i, _ in todo], self.embedder.embed([t for _, t in todo]))
            self.load_vectors(index)
        return len(todo)

    def load_vectors(self, index: VectorIndex | None = None) -> None:
        """Bring the in-memory matrix up to date with the stored vectors (cheap when unchanged)."""
        index = index or self.vectors
        if self.embedder is None:
            return
        with self.memories._bound():
            index.load(self.embedder.name, self.memories.generation if index is self.vectors else None)

    # -- per-turn selection --------------------------------------------------------

    def for_turn(self, query: str, *, budget_tokens: int, count: Callable[[str], int],
                 top_k: int | None = None, exclude: Iterable[int] = (),
                 mark_used: bool = True, query_vector: np.ndarray | None = None) -> list[Retrieved]:
        """The best memories for `query` that fit in `budget_tokens`, recording their use."""
        if budget_tokens <= 0:
            return []
        chosen, used = [], 0
        k = self.settings.top_k if top_k is None else top_k
        scored = self._scored(query, k, None, exclude, query_vector)
        scored += self._companions(query, scored, k - len(scored), exclude, query_vector)
        for memory_id, score, text in scored:
            tokens = count(text) + ITEM_OVERHEAD_TOKENS
            if used + tokens > budget_tokens:
                continue
            used += tokens
            chosen.append(Retrieved(SourceKind.MEMORY, memory_id, text, score, tokens))
        if mark_used and chosen:
            self.memories.mark_used([r.id for r in chosen])
        return chosen

    def _companions(self, query: str, found: list[tuple[int, float, str]], room: int, exclude: Iterable[int],
                    query_vector: np.ndarray | None) -> list[tuple[int, float, str]]:
        """Up to `room` memories close to one in `found` (RetrievalSettings.companion_cosine)
        and not far from the question, each scored below the memory it came with."""
        s = self.settings
        if room <= 0 or not found or not self.hybrid or not len(self.vectors.ids):
            return []
        try:
            q = self.query_vector(query) if query_vector is None else query_vector
        except Exception:  # a broken embedder: no companions, as without one
            return []
        to_query = self.vectors.cosines(q)
        if not len(to_query):
            return []
        taken = {i for i, _, _ in found} | set(exclude)
        best: dict[int, float] = {}
        for memory_id, score, _ in found:
            n = self.vectors.position.get(memory_id)
            if n is None:
                continue
            near = self.vectors.cosines(self.vectors.matrix[n])
            for m in np.flatnonzero((near >= s.companion_cosine) & (to_query >= s.companion_floor)):
                other = int(self.vectors.ids[m])
                if other not in taken:
                    best[other] = max(best.get(other, 0.0), score * float(near[m]))
        ranked = sorted(best.items(), key=lambda item: (-item[1], -item[0]))[:room]
        texts = {r[0]: r[2] for r in self.memories.rows_raw([i for i, _ in ranked])}
        return [(i, score, texts[i]) for i, score in ranked if i in texts]

    def past_chats(self, query: str, *, conversation_id: int | None, budget_tokens: int,
                   count: Callable[[str], int], limit: int = 3,
                   query_vector: np.ndarray | None = None) -> list[Retrieved]:
        """Excerpts of other conversations' messages ("reference chat history").

        BM25 over the messages' FTS index, blended with cosine similarity when an embedder is
        attached (as for memories). Deleted and temporary conversations are never searched.
        """
        if budget_tokens <= 0:
            return []
        match = fts.any_of(query)
        rows = search_past_messages(self.db, match, conversation_id, limit * 4) if match else []
        best = max((r[3] for r in rows), default=0.0)
        lexical = {r[0]: r[3] / best for r in rows if best > 0}
        found = {r[0]: (r[1], r[2]) for r in rows}
        if self.hybrid and self.message_vectors.available():
            self.load_vectors(self.message_vectors)
            q = self.query_vector(query) if query_vector is None else query_vector
            cosine = self.message_vectors.cosines(q)
            close = self.message_vectors.nearest(cosine, limit * 4, self.settings.min_cosine)
            extra = [i for i in close if i not in found]
            if extra:
                found.update((r[0], (r[1], r[2])) for r in past_messages(self.db, extra, conversation_id))
            position, w = self.message_vectors.position, self.settings.semantic_weight
            scores = {}
            for message_id in found:
                n = position.get(message_id)
                cos = float(cosine[n]) if n is not None and len(cosine) else 0.0
                scores[message_id] = (1 - w) * lexical.get(message_id, 0.0) + w * max(cos, 0.0)
        else:
            scores = {i: v for i, v in lexical.items() if v >= self.settings.min_relative}
        chosen: list[Retrieved] = []
        used = 0
        for message_id, score in sorted(scores.items(), key=lambda item: (-item[1], -item[0])):
            if len(chosen) >= limit:
                break
            conv_id, content = found[message_id]
            text = _excerpt(content, query, self.settings.past_chat_chars)
            tokens = count(text) + ITEM_OVERHEAD_TOKENS
            if used + tokens > budget_tokens:
                continue
            used += tokens
            chosen.append(Retrieved(SourceKind.PAST_CHAT, message_id, text, score, tokens, conv_id))
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
