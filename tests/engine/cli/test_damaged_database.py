"""A damaged database (garbage written over pages of a real Wren database of six chats):
listing says so, `wren ask` writes nothing into it and says why, and `wren data erase`
deletes it without needing to read it. Every run is the real `wren` in a child process."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.engine.cli.hostile_homes import (
    CHATS,
    crash_reports,
    damage_header,
    damage_middle,
    damage_table,
    make_home,
    wren,
)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _clean(done) -> None:
    """No traceback, no "unexpected error": a message from Wren itself."""
    assert "Traceback" not in done.stderr, done.stderr
    assert "unexpected error" not in done.stderr, done.stderr


@pytest.fixture
def damaged(tmp_path, tiny_model_dir) -> Path:
    home = make_home(tmp_path / "home", tiny_model_dir)
    damage_table(home / "wren.sqlite3")
    return home


def test_listing_a_damaged_database_warns(damaged):
    done = wren(damaged, "conversations")
    _clean(done)
    assert done.returncode == 0
    assert len(done.stdout.splitlines()) == CHATS  # the chats' own table is intact
    assert "damaged" in done.stderr and str(damaged / "wren.sqlite3") in done.stderr
    assert "wren data erase --yes" in done.stderr


def test_ask_writes_nothing_into_a_damaged_database(damaged):
    db = damaged / "wren.sqlite3"
    before = _digest(db)
    done = wren(damaged, "ask", "--keep-alive", "0", "hello", scripted=True)
    assert _digest(db) == before
    wal = db.with_name("wren.sqlite3-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    _clean(done)
    assert done.returncode == 2
    assert "damaged" in done.stderr and "wrote nothing" in done.stderr
    assert crash_reports(damaged) == []


def test_erase_deletes_a_damaged_database_without_reading_it(damaged):
    done = wren(damaged, "data", "erase", "--yes")
    _clean(done)
    assert done.returncode == 0, done.stderr
    assert "damaged" in done.stdout
    assert not (damaged / "wren.sqlite3").exists()
    after = wren(damaged, "conversations")
    _clean(after)
    assert after.returncode == 0 and after.stdout == "" and "damaged" not in after.stderr


@pytest.mark.parametrize("damage", [damage_middle, damage_header], ids=["middle", "header"])
def test_any_damage_is_reported_cleanly_and_erase_still_works(tmp_path, damage):
    """Garbage in the middle of the file (as the issue did) or over its header (not a
    database at all): whatever still reads is listed with a warning, or the command says
    the file is damaged; never a traceback; erase works either way."""
    home = make_home(tmp_path / "home")
    damage(home / "wren.sqlite3")
    listed = wren(home, "conversations")
    _clean(listed)
    assert "damaged" in listed.stderr
    assert listed.returncode in (0, 2)
    erased = wren(home, "data", "erase", "--yes", "--json")
    _clean(erased)
    assert erased.returncode == 0, erased.stderr
    assert not (home / "wren.sqlite3").exists()
    assert crash_reports(home) == []


def test_showing_a_chat_in_the_damaged_part_says_it_cannot_be_read(damaged):
    done = wren(damaged, "conversations", "show", "1")
    _clean(done)
    assert done.returncode == 2
    assert "damaged, so what was asked for lies in its damaged part and cannot be read" in done.stderr
