"""Ownership by operating-system file locks: held while a process lives, dropped by the
kernel the moment it dies (a SIGKILL included), so "is its owner still running?" needs no
heartbeat, no clock and no trust in process ids, which the system reuses.

A lock file's name is unique to its owner (a process id and a random part), so only that
owner ever locks it; anyone else only probes it, and removes it once the owner is gone.
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

from .. import paths

if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
    import msvcrt

    def _try_lock(fd: int) -> bool:
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
            return True
        except OSError:
            return False

    def _unlock(fd: int) -> None:
        try:
            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
        except OSError:
            pass
else:
    import fcntl

    def _try_lock(fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False

    def _unlock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)


def owner_token() -> str:
    """A name no other process, now or later, will use: this process's id and a random part."""
    return f"{os.getpid()}-{uuid.uuid4().hex[:12]}"


class HeldLock:
    """An exclusive lock on `path`, taken now (raises BlockingIOError if another holds it)."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        paths.make_dirs(self.path.parent)
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        if not _try_lock(self._fd):
            os.close(self._fd)
            self._fd = None
            raise BlockingIOError(f"{self.path} is locked by another process")

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self, *, remove: bool = True) -> None:
        """Drop the lock; with `remove`, the file goes first (nobody else locks a unique name)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        if remove:
            try:
                self.path.unlink()
            except OSError:
                pass
        _unlock(fd)
        os.close(fd)

    def __enter__(self) -> HeldLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def is_held(path: Path | str) -> bool:
    """Whether a live process holds the lock at `path` (a missing file: nobody does).
    A lock held by this very process also counts as held."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # cannot tell: assume alive, which only ever delays a clean-up
    try:
        if _try_lock(fd):
            _unlock(fd)
            return False
        return True
    finally:
        os.close(fd)
