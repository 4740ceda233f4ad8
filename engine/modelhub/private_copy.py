"""Copy a file the user picked into Wren's own folder, privately, and notice if it changed.

A model file is read once, front to back, through plain reads, never mapped: the user (or a
download still running) may cut it short, rewrite or delete it meanwhile, and a mapped file
that shrinks under its reader kills the process with SIGBUS. What the import checks is then
the copy, which nobody else writes.
"""

from __future__ import annotations

import os
import stat
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import ModelFileError
from .validate import describe_os_error

Progress = Callable[[int, int], None]

COPY_CHUNK = 16 << 20


def copy_private(source: Path, dest: Path, progress: Progress | None) -> int:
    """Copy `source` to the new file `dest` (mode 0600), refusing a source that changed
    while it was read: its size or modification time moved, or it ended early or grew."""
    src = _open_regular(source)
    with src:
        before = os.fstat(src.fileno())
        total = before.st_size
        if progress:
            progress(0, total)
        done, crc = _copy_chunks(src, source, dest, total, progress)
        after = os.fstat(src.fileno())
    if done != total or (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
        now = f"{after.st_size} bytes" if after.st_size != total else "rewritten"
        raise ModelFileError(
            f"{source} changed while it was being imported (it was {total} bytes, {done} were read, "
            f"now it is {now}); nothing was installed. Import it again once nothing is writing it"
        )
    return crc


def _open_regular(source: Path) -> Any:
    """`source` opened for reading, if it is a regular file (opening a named pipe would wait
    for a writer, so it is opened without blocking and checked first)."""
    try:
        fd = os.open(source, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        raise ModelFileError(f"{source} does not exist: it was moved or deleted before it could be read") from None
    except IsADirectoryError:
        raise ModelFileError(f"{source} is not a file") from None
    except OSError as exc:
        raise ModelFileError(f"{source} cannot be read: {exc.strerror or exc}") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ModelFileError(f"{source} is not a file")
    if hasattr(os, "O_NONBLOCK"):
        os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def _copy_chunks(src: Any, source: Path, dest: Path, total: int, progress: Progress | None) -> tuple[int, int]:
    done = crc = 0
    try:
        out = open(dest, "wb", opener=_private_opener)
    except OSError as exc:
        raise ModelFileError(_write_error(exc, dest)) from exc
    with out:
        while True:
            try:
                chunk = src.read(COPY_CHUNK)
            except OSError as exc:
                raise ModelFileError(f"{source} could not be read to the end: {exc.strerror or exc}; "
                                     "nothing was installed") from exc
            if not chunk or done > total:
                break
            try:
                out.write(chunk)
            except OSError as exc:
                raise ModelFileError(_write_error(exc, dest)) from exc
            crc = zlib.crc32(chunk, crc)
            done += len(chunk)
            if progress:
                progress(min(done, total), total)
        try:
            out.flush()
            os.fsync(out.fileno())
        except OSError as exc:
            raise ModelFileError(_write_error(exc, dest)) from exc
    return done, crc


def _private_opener(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_EXCL, 0o600)


def _write_error(exc: OSError, path: Path) -> str:
    return describe_os_error(exc, path) + "; the import was undone"
