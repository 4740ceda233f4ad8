"""Deleted chats and forgotten memories leave the raw database files: rows, FTS, WAL, copies."""

from __future__ import annotations

import asyncio

import pytest

from wren.engine.errors import NotFound
from wren.engine.privacy import FORGOTTEN

SECRET = "Quetzalwombat"  # a word found nowhere else


def run(coro):
    return asyncio.run(coro)


async def drain(stream):
    return [event async for event in stream]


def test_a_deleted_chat_leaves_the_files_after_the_undo_window(make_engine, shows):
    async def main():
        engine = make_engine("They live in the hills.")
        engine.privacy.undo_seconds = 0.2
        conv = await engine.conversations.create()
        await drain(engine.chat.send(conv.id, f"Where does the {SECRET} live?"))
        kept = await engine.conversations.create("other")
        await drain(engine.chat.send(kept.id, "An unrelated question"))
        before = shows(SECRET)
        await engine.conversations.delete(conv.id)
        during = shows(SECRET)
        restored = await engine.conversations.restore(conv.id)  # the undo window is open
        await engine.conversations.delete(conv.id)
        await asyncio.sleep(0.6)  # the window closes and the purge runs
        after = shows(SECRET)
        with pytest.raises(NotFound):
            await engine.conversations.restore(conv.id)
        left = [c.id for c in await engine.conversations.list()]
        hits = await engine.conversations.list(SECRET)
        await engine.close()
        return before, during, restored, after, left, kept, hits

    before, during, restored, after, left, kept, hits = run(main())
    assert before, "the chat's text should be on disk before it is deleted"
    assert during and restored.id
    assert after == []
    assert left == [kept.id] and hits == []


def test_delete_permanently_purges_at_once(make_engine, shows, db_path):
    async def main():
        engine = make_engine("Noted.")
        engine.privacy.undo_seconds = 3600  # only "permanently" can purge in this test
        conv = await engine.conversations.create(f"About {SECRET}")
        await drain(engine.chat.send(conv.id, f"my {SECRET} password hint"))
        assert shows(SECRET)
        await engine.conversations.delete(conv.id, permanently=True)
        after = shows(SECRET)
        wal = db_path.with_name(db_path.name + "-wal").stat().st_size  # checkpointed, truncated
        counts = engine.store.db.execute_sql(
            "SELECT (SELECT count(*) FROM message), (SELECT count(*) FROM message_vector), "
            "(SELECT count(*) FROM conversation)").fetchone()
        await engine.close()
        return after, counts, wal

    after, counts, wal = run(main())
    assert after == []
    assert counts == (0, 0, 0)
    assert wal == 0


def test_secure_delete_is_on_for_every_connection(make_engine):
    async def main():
        engine = make_engine()
        on_loop_thread = engine.store.db.execute_sql("PRAGMA secure_delete").fetchone()[0]
        on_db_thread = await engine.db(lambda: engine.store.db.execute_sql("PRAGMA secure_delete").fetchone()[0])
        await engine.close()
        return on_loop_thread, on_db_thread

    assert run(main()) == (1, 1)


def test_a_forgotten_memory_leaves_the_files_and_the_provenance(make_engine, shows):
    async def main():
        engine = make_engine("They like tuna.")
        memory = await engine.memories.add(f"My cat {SECRET} likes tuna")
        conv = await engine.conversations.create()
        events = await drain(engine.chat.send(conv.id, "What does my cat like to eat?"))
        answer = (await engine.conversations.messages(conv.id))[-1]
        used = answer.meta.get("context", {})
        before = shows(SECRET)
        await engine.memories.delete(memory.id)
        after = shows(SECRET)
        answer_after = await engine.conversations.message(answer.id)
        report = await engine.conversations.context_report(answer.id)
        await engine.close()
        return events, used, before, after, answer_after, report, memory

    events, used, before, after, answer_after, report, memory = run(main())
    assert SECRET in str(used), "the answer should have used the memory (its provenance copy)"
    assert before
    assert after == []
    assert SECRET not in str(answer_after.meta)
    assert memory.id in report.memory_ids  # the id stays: the inspector can say "forgotten"
    assert FORGOTTEN in str(answer_after.meta)


def test_a_memory_forgotten_by_chat_and_clear_all_leave_no_copy(make_engine, shows):
    async def main():
        engine = make_engine("OK.")
        await engine.memories.add(f"{SECRET} is my nickname")
        await engine.memories.add("I live in Lisbon")
        assert shows(SECRET)
        count = await engine.memories.clear()
        await engine.close()
        return count

    assert run(main()) == 2
    assert shows(SECRET) == []
    assert shows("Lisbon") == []


def test_a_purged_chat_is_scrubbed_from_other_answers_provenance(make_engine):
    from wren.engine.privacy import purge_conversations

    async def main():
        engine = make_engine("Fine.")
        old = await engine.conversations.create("old")
        await drain(engine.chat.send(old.id, f"The {SECRET} question"))
        old_ids = [m.id for m in await engine.conversations.messages(old.id)]
        new = await engine.conversations.create("new")
        await drain(engine.chat.send(new.id, "Something else"))
        answer = (await engine.conversations.messages(new.id))[-1]
        # Provenance as reference chat history writes it: a past message's id and excerpt.
        meta = {**answer.meta, "context": {**answer.meta.get("context", {}), "rendered_prompt": f"… The {SECRET} question …",
                "parts": [{"kind": "past_chat", "state": "included", "tokens": 5, "source_ids": [old_ids[0]],
                           "text": f"The {SECRET} question"}]}}
        await engine.db(engine.store.update_message, answer.id, meta=meta)
        await engine.db(engine.store.delete_conversation, old.id)
        purged = await engine.db(purge_conversations, engine.store)
        after = await engine.conversations.message(answer.id)
        await engine.close()
        return purged, after, old_ids

    purged, after, old_ids = run(main())
    assert purged == 1
    assert SECRET not in str(after.meta)
    assert after.meta["context"]["parts"][0]["source_ids"] == [old_ids[0]]
