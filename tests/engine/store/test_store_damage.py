"""Damage met while a Store is open (the file was sound at open, then garbage reached it):
the DatabaseError that meets it runs SQLite's check, and from then on nothing more is
written into the file; damage at open makes the Store read-only from the start."""

from __future__ import annotations

import hashlib

import pytest

from tests.engine.cli.hostile_homes import damage_table
from wren.engine.errors import DatabaseDamaged
from wren.engine.records import Role
from wren.engine.store import Store


def _chat(store: Store) -> int:
    conv = store.create_conversation("kept")
    parent = None
    for j in range(40):
        parent = store.add_message(conv.id, Role.USER, f"line {j} " * 80, parent_id=parent and parent.id)
    return conv.id


def test_damage_found_while_open_stops_every_later_write(tmp_path):
    path = tmp_path / "wren.sqlite3"
    store = Store(path)
    conv = _chat(store)
    store.db.close_all()  # the file is checkpointed; the next query opens a new connection
    damage_table(path)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(DatabaseDamaged, match="is damaged"):
        store.messages(conv)
    assert store.damage
    with pytest.raises(DatabaseDamaged, match="wrote nothing"):
        store.create_conversation("refused")
    with pytest.raises(DatabaseDamaged):
        store.set_setting("model", "refused")
    store.close()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_damage_at_open_leaves_a_read_only_store(tmp_path):
    path = tmp_path / "wren.sqlite3"
    store = Store(path)
    _chat(store)
    store.close()
    damage_table(path)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    damaged = Store(path)
    assert damaged.damage  # what SQLite's check said
    assert [c.title for c in damaged.list_conversations()] == ["kept"]  # what still reads, reads
    with pytest.raises(DatabaseDamaged):
        damaged.create_conversation("refused")
    damaged.close()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_a_sound_database_opens_writable(tmp_path):
    store = Store(tmp_path / "wren.sqlite3")
    assert store.damage == ()
    store.create_conversation("fine")
    store.close()
