"""The network ledger: one JSON line per connection Wren's process opened (or was refused),
in the data folder's network/ledger.jsonl, shared by every Wren process of that folder.

An entry is written when the connection is made (so a crash loses nothing of it) and a
second, short line with the same id when its socket closes: the bytes sent and received.
Reading merges the two. Lines hold where, when, which part of Wren and the user's action in
a few words, never a prompt or an answer.

Capped and rotated: past MAX_BYTES the file becomes ledger.1.jsonl (the older one
ledger.2.jsonl, the one before that is dropped), so the ledger never holds more than
(KEEP + 1) * MAX_BYTES. Appends and rotation happen under an exclusive lock on
network/ledger.lock, so the window, `wren` commands and a resident engine write one ledger.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .. import paths

FOLDER = "network"
FILE = "ledger.jsonl"
MAX_BYTES = 512 * 1024
KEEP = 2  # rotated files kept besides the current one


@dataclass(frozen=True)
class Entry:
    """One connection (kind "connect"), name lookup ("lookup"), listening socket ("listen")
    or child process started without network ("isolated")."""

    part: str
    action: str
    kind: str
    host: str
    port: int | None
    loopback: bool
    outcome: str  # "allowed", "refused" or "isolated"
    reason: str | None = None  # why a refusal happened, in the words the refused code was given
    process: str = ""
    pid: int = field(default_factory=os.getpid)
    at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    sent: int | None = None  # payload bytes, counted by the kernel when the socket closed (None: not counted)
    received: int | None = None
    closed: str | None = None


def folder(home: Path | None = None) -> Path:
    return (home or paths.chosen_data_dir()) / FOLDER


def _files(where: Path) -> list[Path]:
    """Oldest first."""
    return [where / f"ledger.{n}.jsonl" for n in range(KEEP, 0, -1)] + [where / FILE]


@contextlib.contextmanager
def _locked(where: Path) -> Iterator[None]:
    paths.private_dir(where)
    fd = os.open(where / "ledger.lock", os.O_CREAT | os.O_RDWR, paths.PRIVATE_FILE)
    try:
        try:
            import fcntl
        except ImportError:  # Windows: appends of one short line are not interleaved there either
            yield
            return
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _rotate(where: Path) -> None:
    files = _files(where)
    for older, newer in zip(files, files[1:], strict=False):
        if newer.exists():
            os.replace(newer, older)


def _append(line: dict[str, Any], home: Path | None) -> None:
    where = folder(home)
    data = (json.dumps(line, separators=(",", ":")) + "\n").encode()
    with _locked(where):
        current = where / FILE
        with contextlib.suppress(FileNotFoundError):
            if current.stat().st_size + len(data) > MAX_BYTES:
                _rotate(where)
        fd = os.open(current, os.O_CREAT | os.O_WRONLY | os.O_APPEND, paths.PRIVATE_FILE)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)


_OPTIONAL = ("reason", "sent", "received", "closed")  # left out of a line when empty


def record(entry: Entry, home: Path | None = None) -> None:
    _append({key: value for key, value in asdict(entry).items() if value is not None or key not in _OPTIONAL}, home)


def record_close(entry_id: str, sent: int | None, received: int | None, home: Path | None = None) -> None:
    line: dict[str, Any] = {"id": entry_id, "closed": datetime.now(UTC).isoformat(timespec="seconds")}
    if sent is not None:
        line.update(sent=sent, received=received)
    _append(line, home)


def _lines(where: Path) -> Iterator[dict[str, Any]]:
    for path in _files(where):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            continue
        for raw in text.splitlines():
            with contextlib.suppress(ValueError):
                line = json.loads(raw)
                if isinstance(line, dict) and isinstance(line.get("id"), str):
                    yield line


_FIELDS = set(Entry.__dataclass_fields__)


def entries(home: Path | None = None) -> list[Entry]:
    """Every entry still in the ledger, oldest first, its close line merged in. A line that
    is not Wren's (edited by hand, cut by a crash) is skipped."""
    merged: dict[str, dict[str, Any]] = {}
    for line in _lines(folder(home)):
        known = merged.get(line["id"])
        if known is not None:
            known.update({k: v for k, v in line.items() if k in ("closed", "sent", "received")})
        elif "part" in line:
            merged[line["id"]] = {k: v for k, v in line.items() if k in _FIELDS}
    out = []
    for fields in merged.values():
        with contextlib.suppress(TypeError):
            out.append(Entry(**fields))
    return out


def clear(home: Path | None = None) -> None:
    """Forget the ledger (`wren data erase` removes its folder with the rest)."""
    where = folder(home)
    if where.is_dir():
        with _locked(where):
            for path in _files(where):
                path.unlink(missing_ok=True)
