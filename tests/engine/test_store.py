"""The store: migrations from blank, branches, crash recovery, search, bad databases."""

from __future__ import annotations

import os
import sqlite3
import stat

import pytest

from wren.engine.errors import NotFound, StoreError
from wren.engine.records import MessageStatus, Role
from wren.engine.store import Store
from wren.engine.store.migrations import MIGRATIONS, latest_version


def test_migrate_from_blank_records_every_migration(tmp_path):
    path = tmp_path / "w.sqlite3"
    Store(path).close()
    con = sqlite3.connect(path)
    versions = [r[0] for r in con.execute("SELECT version FROM schema_migrations ORDER BY version")]
    assert versions == [v for v, _, _ in MIGRATIONS]
    assert versions[-1] == latest_version()
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"conversation", "message", "setting", "message_fts"} <= tables
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    con.close()
    # Re-opening applies nothing twice.
    store = Store(path)
    assert store.integrity_check() == "ok"
    store.close()


def test_branches_and_switching_persist(tmp_path):
    path = tmp_path / "w.sqlite3"
    store = Store(path)
    conv = store.create_conversation("branches")
    q = store.add_message(conv.id, Role.USER, "question", parent_id=None)
    a1 = store.add_message(conv.id, Role.ASSISTANT, "first", parent_id=q.id)
    a2 = store.add_message(conv.id, Role.ASSISTANT, "second", parent_id=q.id)
    shown = store.messages(conv.id)
    assert [m.content for m in shown] == ["question", "second"]
    assert (shown[-1].sibling_index, shown[-1].sibling_count) == (1, 2)
    store.switch_to(a1.id)
    store.close()

    again = Store(path)
    shown = again.messages(conv.id)
    assert [m.content for m in shown] == ["question", "first"]
    assert (shown[-1].sibling_index, shown[-1].sibling_count) == (0, 2)
    assert again.siblings(a2.id) == [a1.id, a2.id]
    assert [m.id for m in again.lineage(a2.id)] == [q.id, a2.id]


def test_streaming_messages_become_interrupted_on_open(tmp_path):
    path = tmp_path / "w.sqlite3"
    store = Store(path)
    conv = store.create_conversation()
    q = store.add_message(conv.id, Role.USER, "hi", parent_id=None)
    a = store.add_message(conv.id, Role.ASSISTANT, "partial", parent_id=q.id, status=MessageStatus.STREAMING)
    store.close()
    reopened = Store(path)
    msg = reopened.get_message(a.id)
    assert msg.status is MessageStatus.INTERRUPTED
    assert msg.content == "partial"


@pytest.mark.parametrize("query", ['"', "*", "NEAR", "a NEAR b", "-x", "(", "'; DROP TABLE message; --", "AND OR NOT", "^"])
def test_search_never_raises_on_fts_syntax(query):
    store = Store(":memory:")
    conv = store.create_conversation("t")
    store.add_message(conv.id, Role.USER, "text with NEAR and * inside", parent_id=None)
    assert isinstance(store.list_conversations(query), list)


def test_search_finds_words_inside_messages_and_titles():
    store = Store(":memory:")
    c1 = store.create_conversation("Trip planning")
    c2 = store.create_conversation("Other")
    store.add_message(c2.id, Role.USER, "what about the xylophone concert", parent_id=None)
    assert [c.id for c in store.list_conversations("xylophone")] == [c2.id]
    assert [c.id for c in store.list_conversations("trip")] == [c1.id]
    assert store.list_conversations("nothing-like-this") == []


def test_unicode_round_trips_unchanged(tmp_path):
    text = "emoji 🦜👩🏽‍💻, RTL مرحبا بالعالم שלום, zero\u200bwidth\u200d joiner\ufeff and \u202eoverride"
    store = Store(tmp_path / "w.sqlite3")
    conv = store.create_conversation(text)
    m = store.add_message(conv.id, Role.USER, text, parent_id=None)
    store.close()
    again = Store(tmp_path / "w.sqlite3")
    assert again.get_message(m.id).content == text
    assert again.get_conversation(conv.id).title == text


def test_soft_delete_and_restore():
    store = Store(":memory:")
    conv = store.create_conversation("gone")
    store.delete_conversation(conv.id)
    assert store.list_conversations() == []
    with pytest.raises(NotFound):
        store.get_conversation(conv.id)
    store.restore_conversation(conv.id)
    assert [c.id for c in store.list_conversations()] == [conv.id]


def test_unknown_ids_are_clear_errors():
    store = Store(":memory:")
    with pytest.raises(NotFound, match="no conversation with id 42"):
        store.get_conversation(42)
    conv = store.create_conversation()
    with pytest.raises(NotFound, match="no message 7"):
        store.add_message(conv.id, Role.USER, "x", parent_id=7)


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions")
def test_read_only_database_is_a_clear_error(tmp_path):  # pragma: no cover - CI runs as root
    path = tmp_path / "w.sqlite3"
    Store(path).close()
    path.chmod(stat.S_IRUSR)
    with pytest.raises(StoreError, match="read-only"):
        Store(path).create_conversation("x")


def test_read_only_database_is_a_clear_error_even_as_root(tmp_path):
    """Root ignores permission bits, so make SQLite itself refuse writes (query_only)."""
    path = tmp_path / "w.sqlite3"
    store = Store(path)
    conv = store.create_conversation("kept")
    store.add_message(conv.id, Role.USER, "saved before", parent_id=None)
    store.db.execute_sql("PRAGMA query_only = ON")
    with pytest.raises(StoreError, match="read-only; nothing was changed"):
        store.add_message(conv.id, Role.USER, "refused", parent_id=None)
    with pytest.raises(StoreError, match="read-only"):
        store.create_conversation("refused")
    store.close()
    again = Store(path)
    assert [m.content for m in again.messages(conv.id)] == ["saved before"]
    assert again.integrity_check() == "ok"


def test_locked_database_is_a_clear_error_and_loses_nothing(tmp_path):
    path = tmp_path / "w.sqlite3"
    store = Store(path, busy_timeout_ms=50)
    store.create_conversation("before the lock")
    blocker = sqlite3.connect(path, timeout=0)
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreError, match="locked"):
            store.create_conversation("during the lock")
    finally:
        blocker.rollback()
        blocker.close()
    titles = [c.title for c in store.list_conversations()]
    assert titles == ["before the lock"]
    assert store.integrity_check() == "ok"


def test_two_stores_in_one_process_never_cross(tmp_path):
    import threading

    a = Store(tmp_path / "a.sqlite3")
    b = Store(":memory:")
    ca = a.create_conversation("in a")
    cb = b.create_conversation("in b")
    assert [c.title for c in a.list_conversations()] == ["in a"]
    assert [c.title for c in b.list_conversations()] == ["in b"]
    seen = []
    worker = threading.Thread(target=lambda: seen.append(a.get_conversation(ca.id).title))
    worker.start()
    worker.join()
    assert seen == ["in a"] and b.get_conversation(cb.id).title == "in b"


def test_read_setting_reads_one_value_without_opening_a_store(tmp_path):
    from wren.engine.store.store import read_setting

    path = tmp_path / "wren.sqlite3"
    assert read_setting(path, "cli.keep_alive", 300) == 300  # no database yet
    assert not path.exists()  # and none was made
    store = Store(path)
    store.set_setting("cli.keep_alive", 0)
    store.set_setting("nested", {"a": [1, "é"]})
    store.close()
    before = path.stat().st_mtime_ns
    assert read_setting(path, "cli.keep_alive", 300) == 0
    assert read_setting(path, "nested") == {"a": [1, "é"]}
    assert read_setting(path, "missing", "fallback") == "fallback"
    assert path.stat().st_mtime_ns == before  # read-only
    garbage = tmp_path / "garbage.sqlite3"
    garbage.write_bytes(b"not a database at all" * 100)
    assert read_setting(garbage, "cli.keep_alive", 300) == 300
    with sqlite3.connect(path) as conn:  # a value that is not JSON: the default, not a crash
        conn.execute("UPDATE setting SET value = '{broken' WHERE key = 'nested'")
    assert read_setting(path, "nested", "fallback") == "fallback"
