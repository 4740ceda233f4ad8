"""`wren chat`'s input history on disk: each line typed, tagged with the conversation it
went to, so that deleting a chat for good deletes what was typed into it.

The file is `chat_history` in the data folder, readable by its owner alone, one JSON
object a line: `{"c": conversation id or null, "t": "the text"}`. A line typed before a
chat exists (a command, the first question) takes the id of the chat that the next
question makes; lines that never reached a chat (commands, a blocked question) keep
null and stay until `wren data erase`, which removes the file.

When a conversation is purged (engine/privacy.py: delete permanently, the undo window
closing) `forget` rewrites the file without its lines. Lines in the older untagged format
(plain readline history) are dropped at the first rewrite: nothing says which chat they
came from, and a deleted chat's words must not stay. Appends and rewrites hold an
exclusive lock on the file, so a `wren chat` ending while the window purges loses nothing
and keeps nothing it should not.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

FILE_NAME = "chat_history"
KEEP_LINES = 1000  # the newest lines kept; older ones go at the next rewrite


@dataclass(frozen=True)
class Entry:
    conversation_id: int | None
    text: str

    def line(self) -> str:
        return json.dumps({"c": self.conversation_id, "t": self.text}, ensure_ascii=False) + "\n"


def path_in(folder: Path) -> Path:
    return Path(folder) / FILE_NAME


def _parse(line: str) -> Entry | None:
    """An entry, or None for a line of the old untagged format or a damaged one."""
    try:
        value = json.loads(line)
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("t"), str):
        return None
    cid = value.get("c")
    if cid is not None and (not isinstance(cid, int) or isinstance(cid, bool)):
        return None
    return Entry(cid, value["t"])


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[int]:
    """The file opened for reading and writing (created 0600), under an exclusive lock."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        if sys.platform != "win32":
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX)
        if hasattr(os, "fchmod"):  # a file left by an older Wren may be wider
            os.fchmod(fd, 0o600)
        yield fd
    finally:
        os.close(fd)  # drops the lock


def _read_fd(fd: int) -> tuple[list[Entry], bool]:
    """The entries, and whether any line was not one (old format or damaged)."""
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    entries, stray = [], False
    for line in b"".join(chunks).decode("utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        entry = _parse(line)
        if entry is None:
            stray = True
        else:
            entries.append(entry)
    return entries, stray


def _rewrite_fd(fd: int, entries: list[Entry]) -> None:
    data = "".join(e.line() for e in entries[-KEEP_LINES:]).encode("utf-8")
    os.lseek(fd, 0, os.SEEK_SET)
    os.ftruncate(fd, 0)
    os.write(fd, data)
    os.fsync(fd)


def load(path: Path) -> list[Entry]:
    """The saved entries, oldest first; old-format lines are dropped from the file now."""
    if not path.exists():
        return []
    with _locked(path) as fd:
        entries, stray = _read_fd(fd)
        if stray or len(entries) > KEEP_LINES:
            _rewrite_fd(fd, entries)
    return entries[-KEEP_LINES:]


def append(path: Path, entries: Iterable[Entry]) -> None:
    new = list(entries)
    if not new:
        return
    with _locked(path) as fd:
        old, stray = _read_fd(fd)
        if stray or len(old) + len(new) > 2 * KEEP_LINES:
            _rewrite_fd(fd, old + new)
        else:
            os.lseek(fd, 0, os.SEEK_END)
            os.write(fd, "".join(e.line() for e in new).encode("utf-8"))


def forget(folder: Path, conversation_ids: Iterable[int]) -> int:
    """Drop the lines typed into `conversation_ids` (purged chats). Returns how many."""
    path = path_in(folder)
    gone = {int(c) for c in conversation_ids}
    if not gone or not path.exists():
        return 0
    with _locked(path) as fd:
        entries, stray = _read_fd(fd)
        kept = [e for e in entries if e.conversation_id not in gone]
        if stray or len(kept) != len(entries):
            _rewrite_fd(fd, kept)
    return len(entries) - len(kept)
