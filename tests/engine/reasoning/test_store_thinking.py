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
    assert con.execute("SELECT count(*) FROM schema_migrations WHERE version = 7").fetchone()[0] == 1  # later ones follow
    con.close()


def test_thinking_is_saved_while_it_streams(thinking_engine):
    """As the answer's text is (engine/turn/checkpoint.py): the database holds the thinking so
    far while the model still thinks, so a crash mid-thinking keeps it."""
    import asyncio

    from wren.engine.events import Reasoning

    thought = " ".join(f"step{i}" for i in range(120))
    engine = thinking_engine(f"<think>\n{thought}\n</think>\n\nDone.", delay=0.01)

    async def main():
        conv = await engine.conversations.create()
        seen = []
        async for event in engine.chat.send(conv.id, "go"):
            if isinstance(event, Reasoning):
                last = (await engine.conversations.messages(conv.id))[-1]
                if last.status is MessageStatus.STREAMING and last.reasoning:
                    seen.append(last.reasoning)
        final = (await engine.conversations.messages(conv.id))[-1]
        await engine.close()
        return seen, final

    seen, final = asyncio.run(main())
    assert seen, "the thinking must reach the database before the answer ends"
    assert all(thought.startswith(s) for s in seen)
    # Some save was of part of the thinking. Not necessarily the last one seen: the final
    # Reasoning event can be read after the checkpoint that already holds the whole thought
    # (the clean-clone run, on a loaded machine, saw exactly that).
    assert any(len(s) < len(thought) for s in seen), [len(s) for s in seen]
    assert final.reasoning == thought and final.content == "Done."
