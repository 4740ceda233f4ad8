"""Fixtures for the privacy tests: what the raw database files show."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def db_path(wren_home: Path) -> Path:
    return wren_home / "wren.sqlite3"


@pytest.fixture
def shows(db_path: Path) -> Callable[[str], list[str]]:
    """shows(word): the raw files (database, -wal, -shm) whose bytes contain `word`."""

    def find(word: str) -> list[str]:
        needle = word.encode("utf-8")
        found = []
        for suffix in ("", "-wal", "-shm"):
            path = Path(f"{db_path}{suffix}")
            if path.exists() and needle in path.read_bytes():
                found.append(path.name)
        return found

    return find
