"""The memory table: CRUD, limits, FTS syntax in user text, ids that are never reused."""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wren.engine.errors import NotFound
from wren.engine.memory import MemoryRefused, MemoryService, MemoryStore, Origin
from wren.engine.records import Role
from wren.engine.store import Store
from wren.engine.store.migrations import MIGRATIONS


@pytest.fixture
def memories():
    return MemoryStore(Store(":memory:"))


def test_migration_creates_memory_tables_and_index(tmp_path):
    path = tmp_path / "w.sqlite3"
    Store(path).close()
    con = sqlite3.connect(path)
    names = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
    assert {"memory", "memory_fts", "memory_vector", "conversation_summary"} <= names
    assert "memory" in [name for _, name, _ in MIGRATIONS]
    con.close()


def test_add_edit_delete_list_search(memories):
    a = memories.add("I prefer metric units", origin=Origin.CHAT)
    b = memories.add("My sister Clara lives in Berlin")
    assert a.origin is Origin.CHAT and a.times_used == 0
    assert [m.id for m in memories.list()] == [b.id, a.id]
    assert [m.id for m in memories.search("which units?")] == [a.id]
    edited = memories.edit(a.id, "I prefer imperial units")
    assert edited.text == "I prefer imperial units" and edited.created_at == a.created_at
    assert memories.search("metric") == []
    assert memories.delete(b.id).text == b.text
    with pytest.raises(NotFound, match="forgotten already"):
        memories.get(b.id)
    assert memories.count() == 1
    assert memories.clear() == 1 and memories.list() == []


def test_saying_the_same_fact_twice_keeps_one_memory(memories):
    first = memories.add("I'm vegetarian.")
    again = memories.add("  i'm   vegetarian ")
    assert again.id == first.id and memories.count() == 1


def test_a_100kb_memory_is_refused_with_a_reason(memories):
    with pytest.raises(MemoryRefused) as caught:
        memories.add("x" * 100 * 1024)
    assert "short fact" in str(caught.value) and "102,400" in str(caught.value)
    with pytest.raises(MemoryRefused, match="empty"):
        memories.add("   ")
    assert memories.count() == 0


@pytest.mark.parametrize("query", ['"', "*", "NEAR", "a NEAR b", "NEAR(a b, 2)", "-x", "metric -units",
                                   "(", ")", "units*", "^units", "'; DROP TABLE memory; --", "AND OR NOT",
                                   "text:units", '"unbalanced', "{col}", ""])
def test_fts_syntax_in_user_text_never_raises(memories, query):
    memories.add("I prefer metric units NEAR the end - really *")
    assert isinstance(memories.search(query), list)
    assert isinstance(memories.bm25(query, 5), list)
    assert isinstance(memories.matching_all(query), list)


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=60))
def test_any_text_searches_safely(text):
    store = MemoryStore(Store(":memory:"))
    store.add("I prefer metric units")
    store.search(text)


def test_ids_of_forgotten_memories_are_never_reused(memories):
    a = memories.add("first fact is here")
    memories.delete(a.id)
    assert memories.add("second fact is here").id != a.id


def test_usage_is_recorded(memories):
    a = memories.add("I like tea")
    memories.mark_used([a.id])
    memories.mark_used([a.id])
    got = memories.get(a.id)
    assert got.times_used == 2 and got.last_used_at is not None


def test_memory_outlives_the_conversation_it_came_from():
    store = Store(":memory:")
    conv = store.create_conversation()
    msg = store.add_message(conv.id, Role.USER, "remember that I like tea", parent_id=None)
    service = MemoryService(store)
    saved = service.handle_message(msg.content, conversation_id=conv.id, message_id=msg.id).saved[0]
    assert (saved.source_conversation_id, saved.source_message_id) == (conv.id, msg.id)
    store.delete_conversation(conv.id)
    store.purge_deleted()
    left = service.get(saved.id)
    assert left.text == "I like tea" and left.source_conversation_id is None


def test_two_stores_in_one_process_do_not_mix_memories():
    one, two = MemoryStore(Store(":memory:")), MemoryStore(Store(":memory:"))
    one.add("only in the first store")
    two.add("only in the second store")
    assert [m.text for m in one.list()] == ["only in the first store"]
    assert [m.text for m in two.list()] == ["only in the second store"]


def test_restore_brings_a_forgotten_memory_back_with_its_id():
    store = Store(":memory:")
    service = MemoryService(store)
    kept = service.add("My dog is called Max")
    gone = service.forget_topic("my dog")
    assert [m.id for m in gone] == [kept.id] and service.list() == []
    back = service.restore(gone[0])
    assert back.id == kept.id and back.text == kept.text
    assert [m.id for m in service.search("dog")] == [kept.id]
