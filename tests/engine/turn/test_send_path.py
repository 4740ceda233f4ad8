"""A Send is prepared once (engine/turn/plan.py): counted from outside, as
bench/send_path.py counts them, before the first token: at most 4 trips to the database
thread, the question scanned once, one context assembly, one memory retrieval."""

from __future__ import annotations

import asyncio
import sys
from collections import Counter

import pytest

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
