"""Migration 7: a database made before answers kept their thinking gains the columns, its
answers read back with none, and a new answer's thinking is kept apart from its text."""

from __future__ import annotations

import sqlite3

from wren.engine.records import MessageStatus, Role
from wren.engine.store import Store


def test_a_database_from_before_thinking_is_migrated_and_keeps_its_answers(tmp_path):
    path = tmp_path / "w.sqlite3"
    store = Store(path)
    conv = store.create_conversation("old")
    question = store.add_message(conv.id, Role.USER, "question", parent_id=None)
    store.add_message(conv.id, Role.ASSISTANT, "an old answer", parent_id=question.id)
    store.close()
    con = sqlite3.connect(path)  # as it was before migration 7
    con.execute("ALTER TABLE message DROP COLUMN reasoning")
    con.execute("ALTER TABLE message DROP COLUMN reasoning_seconds")
    con.execute("DELETE FROM schema_migrations WHERE version = 7")
    con.commit()
    con.close()

    store = Store(path)
    old = store.messages(conv.id)
    assert [m.content for m in old] == ["question", "an old answer"]
    assert all(m.reasoning == "" and m.reasoning_seconds is None for m in old)
    answer = store.add_message(conv.id, Role.ASSISTANT, "", parent_id=question.id, status=MessageStatus.STREAMING)
    store.update_message(answer.id, content="Paris.", reasoning="Recall capitals.", reasoning_seconds=1.5,
                         status=MessageStatus.COMPLETE)
    store.close()
    again = Store(path).get_message(answer.id)
    assert (again.content, again.reasoning, again.reasoning_seconds) == ("Paris.", "Recall capitals.", 1.5)
    con = sqlite3.connect(path)
    assert con.execute("SELECT max(version) FROM schema_migrations").fetchone()[0] == 7
    con.close()
