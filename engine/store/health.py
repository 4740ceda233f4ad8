"""Whether the database file is sound, by SQLite's own `PRAGMA quick_check`, and what to
tell the user when it is not.

A Store checks its file when it opens it, before anything is written (engine/store/store.py):
the check reads every page once, about 1 ms per MB (a 5 MB database of 4,000 messages: 6 ms;
50 MB, 40,000 messages: 46 ms), against the ~600 ms a `wren conversations` takes. A damaged
file is then opened for reading only (SQLite's query_only), so Wren shows what it can still
read and never writes into it. Any other DatabaseError met later runs the check again.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import peewee as pw

_CORRUPT = 11  # SQLITE_CORRUPT
_NOTADB = 26  # SQLITE_NOTADB
_SHOWN = 3  # problems named in a message; quick_check can list thousands
_TEXTS = ("malformed", "not a database", "database corruption", "disk image")


def error_chain(exc: BaseException) -> list[BaseException]:
    """`exc` and the errors it was raised from or during (a failed commit's rollback says
    "no transaction is active"; the disk-full error that caused it is its context)."""
    seen: list[BaseException] = []
    node: BaseException | None = exc
    while node is not None and node not in seen:
        seen.append(node)
        node = node.__cause__ or node.__context__
    return seen


def is_damage(exc: BaseException) -> bool:
    """Whether SQLite said the file itself is damaged (not locked, full or read-only)."""
    for e in error_chain(exc):
        code = getattr(e, "sqlite_errorcode", None)
        if code is not None and code & 0xFF in (_CORRUPT, _NOTADB):
            return True
        if isinstance(e, (sqlite3.DatabaseError, pw.DatabaseError)) and any(t in str(e).lower() for t in _TEXTS):
            return True
    return False


def _locked(exc: BaseException) -> bool:
    text = " ".join(str(e) for e in error_chain(exc)).lower()
    return "locked" in text or "busy" in text


def quick_check(db: pw.Database | sqlite3.Connection, limit: int = 10) -> tuple[str, ...]:
    """The problems SQLite's quick_check finds in the open database (empty: none). A check
    that cannot run at all on a readable file is itself the problem it names; a lock is
    not damage and is raised."""
    run = db.execute_sql if isinstance(db, pw.Database) else db.execute
    try:
        rows = run(f"PRAGMA quick_check({int(limit)})").fetchall()
    except (pw.DatabaseError, sqlite3.DatabaseError) as exc:
        if _locked(exc) or not is_damage(exc):
            raise
        return (str(exc),)
    lines = [line.strip() for row in rows for line in str(row[0]).splitlines()]
    found = tuple(line for line in lines if line and not line.startswith("***"))  # "*** in database main ***"
    return () if found == ("ok",) else found


def check_file(path: Path | str) -> tuple[str, ...]:
    """quick_check on a database file opened read-only (nothing written, nothing created);
    empty when it is sound or cannot be opened at all (a missing or unreadable file is
    not a damaged one)."""
    try:
        conn = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True, timeout=1.0)
    except (sqlite3.Error, OSError, ValueError):
        return ()
    try:
        return quick_check(conn)
    except sqlite3.Error as exc:
        return (str(exc),) if is_damage(exc) else ()
    finally:
        conn.close()


def refused_message(path: Path | str, *, reading: bool = False) -> str:
    """A read that met the damage, or a write refused because of it (the problems were
    named when the file was found damaged)."""
    what = "what was asked for lies in its damaged part and cannot be read" if reading else "Wren wrote nothing to it"
    return (f"the database {path} is damaged, so {what}; restore a backup of that file or start afresh with "
            "`wren data erase --yes` (installed models are kept)")


def damaged_message(path: Path | str, problems: tuple[str, ...], *, readable: bool = True) -> str:
    """One sentence for the user: what is wrong, what Wren does about it, what to do."""
    named = "; ".join(problems[:_SHOWN]) or "unknown damage"
    more = f" and {len(problems) - _SHOWN} more" if len(problems) > _SHOWN else ""
    if readable:
        done = ("Wren reads what it still can and writes nothing to it, so conversations may be missing. "
                "Copy out what you need (`wren conversations show ID`), then")
    else:
        done = "Wren cannot read it and writes nothing to it;"
    return (f"the database {path} is damaged (SQLite's check found: {named}{more}); {done} restore a backup "
            "of that file or start afresh with `wren data erase --yes` (installed models are kept)")


def remove_database_files(path: Path | str) -> list[str]:
    """Delete a database that cannot be read without reading it: the file, its -wal, -shm
    and -journal, and the side folders a Store keeps beside it (answers' journals, owners'
    locks). Each file is overwritten with zeros first (its text must not stay in free disk
    blocks; as VACUUM does for a sound one). Returns what was removed."""
    path = Path(path)
    removed = []
    for name in (path.name, f"{path.name}-wal", f"{path.name}-shm", f"{path.name}-journal"):
        target = path.with_name(name)
        if target.is_file() and not target.is_symlink():
            _zero(target)
        if target.exists() or target.is_symlink():
            target.unlink()
            removed.append(str(target))
    for name in (f".{path.name}-journal", f".{path.name}-owners"):
        folder = path.with_name(name)
        if folder.is_dir() and not folder.is_symlink():
            shutil.rmtree(folder)
            removed.append(str(folder))
    return removed


def _zero(path: Path) -> None:
    try:
        with open(path, "r+b") as out:
            size = out.seek(0, os.SEEK_END)
            out.seek(0)
            chunk = bytes(1 << 20)
            while size > 0:
                size -= out.write(chunk[:size])
            out.flush()
            os.fsync(out.fileno())
    except OSError:  # unreadable (mode 000) or on a read-only disk: deleting is what is left
        pass


def is_database_error(exc: BaseException) -> bool:
    """Whether `exc` came from SQLite (through peewee or not)."""
    return any(isinstance(e, (sqlite3.Error, pw.DatabaseError)) for e in error_chain(exc))
