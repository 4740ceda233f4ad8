"""A Send is prepared once (engine/turn/plan.py): counted from outside, as
bench/send_path.py counts them, before the first token: at most 4 trips to the database
thread (2 where the question needs no vector: the read retrieves its memories too), the
question scanned once, one context assembly, one memory retrieval."""

from __future__ import annotations

import asyncio
import sys
from collections import Counter

import pytest

from tests.engine.memory.test_embeddings import NamedLetters
from wren.engine.context import report_from_meta
from wren.engine.context.assemble import ContextAssembler, ContextOverflow
from wren.engine.events import Delta
from wren.engine.memory.service import MemoryService
from wren.engine.safety import scanner

QUESTION = "What should I plant along a shady north wall? Something that flowers in spring."


@pytest.fixture
def counted(monkeypatch):
    """Counts of calls through the database executor, the scanner (of the question), the
    assembler and the memory retrieval; `arm(engine)` starts counting that engine's trips."""
    calls: Counter[str] = Counter()
    scan = scanner.scan

    def counted_scan(text, *args, **kwargs):
        calls["scans"] += QUESTION in text
        return scan(text, *args, **kwargs)

    for module in list(sys.modules.values()):
        if (getattr(module, "__name__", "") or "").startswith("wren.") and getattr(module, "scan", None) is scan:
            monkeypatch.setattr(module, "scan", counted_scan)
    assemble = ContextAssembler.assemble

    async def counted_assemble(self, *args, **kwargs):
        calls["assemblies"] += 1
        return await assemble(self, *args, **kwargs)

    monkeypatch.setattr(ContextAssembler, "assemble", counted_assemble)
    retrieve = MemoryService.retrieve

    def counted_retrieve(self, *args, **kwargs):
        calls["retrievals"] += 1
        return retrieve(self, *args, **kwargs)

    monkeypatch.setattr(MemoryService, "retrieve", counted_retrieve)

    def arm(engine) -> None:
        pool = engine._db_pool
        submit = pool.submit

        def counted_submit(fn, *args, **kwargs):
            calls["trips"] += 1
            return submit(fn, *args, **kwargs)

        monkeypatch.setattr(pool, "submit", counted_submit)

    calls.arm = arm  # type: ignore[attr-defined]
    return calls


async def first_token_counts(engine, calls: Counter, conv_id: int) -> dict:
    calls.clear()
    before: dict = {}
    async for event in engine.chat.send(conv_id, QUESTION):
        if isinstance(event, Delta) and not before:
            before = dict(calls)
    return before


def test_a_send_reads_scans_assembles_and_retrieves_once_before_its_first_token(make_engine, counted):
    async def main():
        engine = make_engine("A climbing hydrangea would do well there.")
        await engine.models.load()
        counted.arm(engine)
        conv = await engine.conversations.create("garden")
        await first_token_counts(engine, counted, conv.id)  # warm: the first Send of a chat
        before = await first_token_counts(engine, counted, conv.id)
        shown = await engine.conversations.messages(conv.id)
        await engine.close()
        return before, shown

    before, shown = asyncio.run(main())
    assert before.get("trips", 0) <= 4, before
    assert before.get("scans") == 1 and before.get("assemblies") == 1 and before.get("retrievals") == 1, before
    # what is stored is what was before: the question, then its answer, twice
    assert [m.content for m in shown] == [QUESTION, "A climbing hydrangea would do well there."] * 2
    new = [p for p in shown[-1].meta["context"]["parts"] if p["kind"] == "new_message"]
    assert [p["source_ids"] for p in new] == [[shown[-2].id]]  # the report names the stored question


def test_a_question_that_cannot_fit_is_refused_before_anything_is_stored(make_engine):
    async def main():
        engine = make_engine("never", context_length=64)
        await engine.models.load()
        conv = await engine.conversations.create("small window")
        with pytest.raises(ContextOverflow):
            async for _ in engine.chat.send(conv.id, "a long question " * 40):
                pass
        shown = await engine.conversations.messages(conv.id)
        await engine.close()
        return shown

    assert asyncio.run(main()) == []


async def _memory_send(engine, counted, embedder) -> tuple[dict, tuple[int, ...], int]:
    """A saved memory, two Sends that name it; the second's counts before its first token,
    the memories its answer's prompt held, and the memory's id."""
    engine.memories.embedder_factory = lambda: embedder
    await engine.models.load()
    memory = await engine.memories.add("My garden's north wall is shady and damp.")
    await engine.memories.embedding_idle()
    counted.arm(engine)
    conv = await engine.conversations.create("garden")
    await first_token_counts(engine, counted, conv.id)  # the first need loads the embedder
    before = await first_token_counts(engine, counted, conv.id)
    answer = (await engine.conversations.messages(conv.id))[-1]
    return before, report_from_meta(answer.meta).memory_ids, memory.id


def test_without_an_embedder_the_read_retrieves_the_memories_too(make_engine, counted):
    """No vector to make: the memories come with the turn's one read (2 trips in all)."""
    async def main():
        engine = make_engine("A climbing hydrangea would do well there.")
        try:
            return await _memory_send(engine, counted, None)
        finally:
            await engine.close()

    before, used, memory_id = asyncio.run(main())
    assert before.get("trips") == 2 and before.get("retrievals") == 1, before
    assert used == (memory_id,)  # the retrieved memory is in the prompt, as before


def test_with_an_embedder_the_question_is_embedded_before_the_retrieval(make_engine, counted, monkeypatch):
    """A vector to make (on the loop's executor, between trips): retrieved with it, as before."""
    fake = NamedLetters("letters-v1")
    vectors: list = []
    retrieve = MemoryService.retrieve

    def seen(self, query, **kwargs):
        vectors.append((query, kwargs.get("query_vector")))
        return retrieve(self, query, **kwargs)

    monkeypatch.setattr(MemoryService, "retrieve", seen)

    async def main():
        engine = make_engine("A climbing hydrangea would do well there.")
        try:
            return await _memory_send(engine, counted, fake)
        finally:
            await engine.close()

    before, used, memory_id = asyncio.run(main())
    assert before.get("retrievals") == 1, before  # (embedding the backlog takes trips of its own)
    assert vectors[-1][0] == QUESTION and vectors[-1][1] is not None  # retrieved with the question's vector
    assert used == (memory_id,)


def test_the_model_starts_while_the_question_is_stored(make_engine, monkeypatch):
    """The answer's generation is submitted before the rows are written (one trip less before
    the first token); what is stored and shown is as before."""
    from wren.engine.turns import Turns

    seen: list[bool] = []
    commit = Turns._commit

    def watched(self, store, reads, *args):
        seen.append(self.e.answering(reads.conversation.id))  # its request is registered already
        return commit(self, store, reads, *args)

    monkeypatch.setattr(Turns, "_commit", watched)

    async def main():
        engine = make_engine("A climbing hydrangea would do well there.")
        await engine.models.load()
        conv = await engine.conversations.create("garden")
        events = [event async for event in engine.chat.send(conv.id, QUESTION)]
        shown = await engine.conversations.messages(conv.id)
        answering = engine.chat.e.answering()
        await engine.close()
        return events, shown, answering

    events, shown, answering = asyncio.run(main())
    assert seen == [True] and not answering
    assert "".join(e.text for e in events if isinstance(e, Delta)) == "A climbing hydrangea would do well there."
    assert [m.content for m in shown] == [QUESTION, "A climbing hydrangea would do well there."]


def test_a_failed_write_stops_the_early_generation(make_engine, monkeypatch):
    """The rows cannot be written: the error is raised and the generation submitted for them
    is stopped and forgotten (nothing left answering)."""
    from wren.engine.errors import StoreError
    from wren.engine.turns import Turns

    requests: list = []

    def broken(self, store, reads, *args):
        requests.extend(request for request, _ in self.e._active)
        raise StoreError("the disk is full")

    monkeypatch.setattr(Turns, "_commit", broken)

    async def main():
        engine = make_engine("never shown")
        await engine.models.load()
        conv = await engine.conversations.create("garden")
        with pytest.raises(StoreError):
            async for _ in engine.chat.send(conv.id, QUESTION):
                pass
        answering = engine.chat.e.answering()
        await engine.close()
        return answering

    assert asyncio.run(main()) is False
    assert len(requests) == 1 and requests[0].cancel.is_set()


def test_a_question_that_changes_memories_is_answered_once_after_it_is_stored(make_engine):
    """"Remember …" saves a memory while the question is stored: the early generation is
    dropped and the answer planned again (with the memory); one answer, shown whole."""
    async def main():
        engine = make_engine("Noted.")
        await engine.models.load()
        conv = await engine.conversations.create("garden")
        events = [event async for event in engine.chat.send(conv.id, "Remember that my garden faces north.")]
        shown = await engine.conversations.messages(conv.id)
        answering = engine.chat.e.answering()
        await engine.close()
        return events, shown, answering

    events, shown, answering = asyncio.run(main())
    assert "".join(e.text for e in events if isinstance(e, Delta)) == "Noted." and not answering
    assert [m.content for m in shown] == ["Remember that my garden faces north.", "Noted."]
    assert [m["text"] for m in shown[-1].meta["memory"]["saved"]] == ["My garden faces north"]
