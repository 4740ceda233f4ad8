"""A full disk says so, and names the data folder, instead of "cannot rollback - no
transaction is active"."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import uuid

import peewee as pw
import pytest

from wren.engine.errors import StoreError
from wren.engine.records import Role
from wren.engine.store import Store, rows


@pytest.fixture
def tiny_disk(tmp_path):
    """A 1 MiB file system (tmpfs; mounting needs root)."""
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("mounting a tiny tmpfs needs root and mount(8)")
    where = tmp_path / f"tiny-{uuid.uuid4().hex[:6]}"
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)], check=False,
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False, capture_output=True)


def test_filling_the_disk_says_the_disk_is_full_and_where(tiny_disk):
    store = Store(tiny_disk / "wren.sqlite3")
    conv = store.create_conversation("big")
    parent = None
    with pytest.raises(StoreError) as raised:
        for _ in range(200):
            parent = store.add_message(conv.id, Role.USER, os.urandom(20_000).hex(), parent_id=parent and parent.id)
    message = str(raised.value)
    assert "disk is full" in message
    assert str(tiny_disk) in message
    assert "rollback" not in message
    store.close()


def test_disk_full_behind_a_failed_rollback_is_reported_as_disk_full(tmp_path, monkeypatch):
    """The shape seen in the field: the commit fails with SQLITE_FULL and peewee's rollback
    then raises "cannot rollback"; the disk-full cause is what the user reads."""
    store = Store(tmp_path / "wren.sqlite3")
    conv = store.create_conversation()

    def fail(*args, **kwargs):
        try:
            raise sqlite3.OperationalError("database or disk is full")
        except sqlite3.OperationalError as exc:
            raise pw.OperationalError("cannot rollback - no transaction is active") from exc

    monkeypatch.setattr(rows, "insert_message", fail)  # the message row's write
    with pytest.raises(StoreError, match="the disk is full") as raised:
        store.add_message(conv.id, Role.USER, "hello", parent_id=None)
    assert str(tmp_path) in str(raised.value)
    monkeypatch.undo()
    store.close()
