"""Another program holds the database mid-answer: checkpoints keep the text in memory and
in a side journal, the last write waits for the lock, and a lock that never frees leaves
the shown text for the next start to save as `interrupted`."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from wren.engine.errors import StoreError
from wren.engine.records import MessageStatus, Role
from wren.engine.store import Store


def _hold_exclusive(db, seconds: float) -> threading.Thread:
    """Another program: an EXCLUSIVE transaction for `seconds` (held when this returns)."""
    held = threading.Event()

    def run():
        con = sqlite3.connect(db, timeout=5, isolation_level=None)
        con.execute("BEGIN EXCLUSIVE")
        held.set()
        time.sleep(seconds)
        con.execute("COMMIT")
        con.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert held.wait(5)
    return thread


def _streaming(store):
    conv = store.create_conversation()
    q = store.add_message(conv.id, Role.USER, "question", parent_id=None)
    return store.add_message(conv.id, Role.ASSISTANT, "", parent_id=q.id, status=MessageStatus.STREAMING)


@pytest.mark.serial  # a wall-clock bound: runs with the machine to itself (make test)
def test_checkpoints_buffer_and_the_finish_waits_for_the_lock(tmp_path):
    db = tmp_path / "wren.sqlite3"
    store = Store(db, busy_timeout_ms=200, lock_retry_seconds=20)
    answer = _streaming(store)
    store.update_message(answer.id, content="Once upon")
    _hold_exclusive(db, 1.2)
    started = time.monotonic()
    store.update_message(answer.id, content="Once upon a time")  # locked: kept, not raised
    assert time.monotonic() - started < 1.0  # the stream does not stall behind the lock
    assert store.unsaved(answer.id)["content"] == "Once upon a time"
    journal = tmp_path / ".wren.sqlite3-journal" / f"{answer.id}.json"
    assert journal.is_file() and "Once upon a time" in journal.read_text("utf-8")
    store.update_message(answer.id, content="Once upon a time there", status=MessageStatus.COMPLETE,
                         completion_tokens=5)
    waited = time.monotonic() - started
    assert 1.0 < waited < 15
    msg = store.get_message(answer.id)
    assert (msg.status, msg.content, msg.completion_tokens) == (MessageStatus.COMPLETE, "Once upon a time there", 5)
    assert not journal.exists() and store.unsaved(answer.id) == {}
    store.close()


def test_a_lock_that_never_frees_is_saved_as_interrupted_at_the_next_start(tmp_path):
    db = tmp_path / "wren.sqlite3"
    store = Store(db, busy_timeout_ms=100, lock_retry_seconds=0.5)
    answer = _streaming(store)
    store.update_message(answer.id, content="The user saw")
    other_program = _hold_exclusive(db, 1.2)
    store.update_message(answer.id, content="The user saw these 21")
    with pytest.raises(StoreError, match="locked by another program.*saved the next time Wren starts"):
        store.update_message(answer.id, content="The user saw these 21 chars", status=MessageStatus.COMPLETE)
    store.close()  # the process ends while the other program still holds the lock
    other_program.join()
    again = Store(db)
    msg = again.get_message(answer.id)
    assert msg.status is MessageStatus.INTERRUPTED
    assert msg.content == "The user saw these 21 chars"
    assert "locked" in (msg.error or "")
    assert list((tmp_path / ".wren.sqlite3-journal").glob("*.json")) == []
    again.close()


def test_a_live_owners_journal_is_left_to_it(tmp_path):
    db = tmp_path / "wren.sqlite3"
    store = Store(db, busy_timeout_ms=100, lock_retry_seconds=0.2)
    answer = _streaming(store)
    other_program = _hold_exclusive(db, 0.6)
    store.update_message(answer.id, content="pending text")
    other_program.join()
    other = Store(db)  # the owner is alive: its journal and row stay as they are
    assert other.get_message(answer.id).status is MessageStatus.STREAMING
    other.close()
    store.update_message(answer.id, content="pending text, done", status=MessageStatus.COMPLETE)
    assert store.get_message(answer.id).content == "pending text, done"
    store.close()


def test_an_answer_streams_through_a_lock_and_is_kept_whole(make_engine, wren_home):
    """The field report: another program takes the database after a few deltas; the answer
    keeps streaming, and its row is finished when the lock frees."""
    import asyncio

    from wren.engine.events import Delta, Failed, Finished, FinishReason

    reply = "The lighthouse keeper watched the storm roll in over the grey water all night long."

    async def main():
        engine = make_engine(reply, delay=0.03)
        engine.store.lock_retry_seconds = 20
        conv = await engine.conversations.create()
        events, holder = [], None
        async for event in engine.chat.send(conv.id, "Tell me a story"):
            events.append(event)
            if isinstance(event, Delta) and holder is None and sum(isinstance(e, Delta) for e in events) == 5:
                holder = _hold_exclusive(wren_home / "wren.sqlite3", 3.5)  # past the 3 s busy timeout
        holder.join()
        shown = await engine.conversations.messages(conv.id)
        await engine.close()
        return events, shown

    events, shown = asyncio.run(main())
    assert not [e for e in events if isinstance(e, Failed)]
    assert isinstance(events[-1], Finished) and events[-1].reason is FinishReason.STOP
    text = "".join(e.text for e in events if isinstance(e, Delta))
    assert text == reply
    assert (shown[-1].status, shown[-1].content) == (MessageStatus.COMPLETE, reply)
