"""Context assembly and memory through the Engine: reports, memories, summaries, temporary chats."""

from __future__ import annotations

import asyncio
import sqlite3

from wren.engine.context import PartKind, PartState
from wren.engine.events import MemoryNotice

SUMMARY_MARK = "You keep a running summary"


async def collect(stream):
    return [e async for e in stream]


def test_remembered_fact_reaches_a_later_chat_with_provenance(make_engine):
    prompts = []

    def reply(prompt):
        prompts.append(prompt)
        return "Noted."

    async def main():
        engine = make_engine(reply)
        first = await engine.conversations.create()
        events = await collect(engine.chat.send(first.id, "Remember that I prefer metric units"))
        notice = next(e for e in events if isinstance(e, MemoryNotice))
        second = await engine.conversations.create()
        await collect(engine.chat.send(second.id, "Which units should the recipe use?"))
        answer = (await engine.conversations.messages(second.id))[-1]
        report = await engine.conversations.context_report(answer.id)
        await engine.close()
        return notice, report

    notice, report = asyncio.run(main())
    assert notice.saved and "metric units" in notice.saved[0].text
    assert "metric units" in prompts[-1]
    assert notice.saved[0].id in report.memory_ids
    kinds = {p.kind for p in report.parts if p.state is PartState.INCLUDED}
    assert {PartKind.MEMORY, PartKind.NEW_MESSAGE} <= kinds
    assert report.rendered_prompt and "Which units" in report.rendered_prompt


def test_forget_removes_the_memory_and_says_which(make_engine):
    async def main():
        engine = make_engine("Okay.")
        conv = await engine.conversations.create()
        await collect(engine.chat.send(conv.id, "Remember that my dog is called Biscuit"))
        events = await collect(engine.chat.send(conv.id, "Forget that my dog is called Biscuit"))
        remaining = await engine.db(engine.memory.list)
        await engine.close()
        return events, remaining

    events, remaining = asyncio.run(main())
    notice = next(e for e in events if isinstance(e, MemoryNotice))
    assert notice.forgotten and "Biscuit" in notice.forgotten[0].text
    assert remaining == []


def test_long_conversation_is_summarized_once_and_the_summary_reused(make_engine):
    summaries = []

    def reply(prompt):
        if SUMMARY_MARK in prompt:
            summaries.append(prompt)
            return "The user and Wren talked about numbers."
        return "Fine, noted and understood."

    async def main():
        engine = make_engine(reply, context_length=1024)
        conv = await engine.conversations.create()
        for i in range(60):
            await collect(engine.chat.send(conv.id, f"Here is fact number {i}: the value is {i * 7}."))
        last = (await engine.conversations.messages(conv.id))[-1]
        report = await engine.conversations.context_report(last.id)
        await engine.close()
        return report

    report = asyncio.run(main())
    assert summaries, "older turns must be summarized, not silently dropped"
    assert len(summaries) <= 15, f"the running summary must be reused, not redone each turn ({len(summaries)} calls)"
    states = {(p.kind, p.state) for p in report.parts}
    assert (PartKind.SUMMARY, PartState.INCLUDED) in states
    assert report.prompt_tokens <= report.window - report.reserve


def test_temporary_chat_uses_no_memories_and_leaves_nothing_on_disk(make_engine, wren_home):
    async def main():
        engine = make_engine("Sure.")
        normal = await engine.conversations.create()
        await collect(engine.chat.send(normal.id, "Remember that I live in Lisbon"))
        temp = await engine.conversations.create(temporary=True)
        events = await collect(engine.chat.send(temp.id, "Remember that my secret hobby is falconry"))
        prompt = engine.scripted.loaded[0].prompts[-1]
        shown = await engine.conversations.messages(temp.id)
        listed = await engine.conversations.list()
        memories = await engine.db(engine.memory.list)
        await engine.conversations.delete(temp.id)
        await engine.close()
        return events, prompt, shown, listed, memories, temp

    events, prompt, shown, listed, memories, temp = asyncio.run(main())
    assert not any(isinstance(e, MemoryNotice) and e.saved for e in events)
    assert "Lisbon" not in prompt  # no memories are used
    assert next(m.content for m in shown) == "Remember that my secret hobby is falconry"
    assert temp.id not in [c.id for c in listed]
    assert [m.text for m in memories] == [m.text for m in memories if "falconry" not in m.text]
    for path in wren_home.glob("wren.sqlite3*"):
        assert b"falconry" not in path.read_bytes(), path
    con = sqlite3.connect(wren_home / "wren.sqlite3")
    assert con.execute("SELECT count(*) FROM message WHERE content LIKE '%falconry%'").fetchone()[0] == 0


def test_remember_with_memory_off_says_why(make_engine):
    async def main():
        engine = make_engine("ok")
        await engine.memories.update_settings(enabled=False)
        conv = await engine.conversations.create()
        events = await collect(engine.chat.send(conv.id, "Remember that I like tea"))
        memories = await engine.memories.list()
        await engine.close()
        return events, memories

    events, memories = asyncio.run(main())
    notice = next(e for e in events if isinstance(e, MemoryNotice))
    assert notice.skipped and not notice.saved and memories == []
