"""Walking a library folder: every regular file under it with its size and modification time,
and what could not be walked (no permission, a symlink loop, too many files), each with a
reason. Symlinked folders are followed once: a folder reached again (a loop, or the same
folder twice) is reported, not walked again."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

MAX_FILES = 200_000  # per source; a bigger tree is indexed up to here and says so
HIDDEN_FOLDERS = {".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", ".tox", ".cache"}


@dataclass
class Scan:
    files: dict[str, tuple[int, float]] = field(default_factory=dict)  # path -> (size, mtime)
    problems: dict[str, str] = field(default_factory=dict)  # path -> why it was not walked
    complete: bool = True  # False: stopped at MAX_FILES (files missing from it are not gone)


def scan(root: str, max_files: int = MAX_FILES) -> Scan:
    found = Scan()
    try:
        info = os.stat(root)
    except FileNotFoundError:
        found.problems[root] = "not found (moved or deleted?)"
        return found
    except PermissionError:
        found.problems[root] = "no permission to read it"
        return found
    if not stat.S_ISDIR(info.st_mode):
        found.files[root] = (info.st_size, info.st_mtime)
        return found
    seen = {(info.st_dev, info.st_ino)}
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except PermissionError:
            found.problems[folder] = "no permission to list this folder"
            continue
        except OSError as exc:
            found.problems[folder] = f"could not list this folder: {exc.strerror or exc}"
            continue
        for entry in entries:
            if not _take(entry, found, seen, stack):
                continue
            if len(found.files) >= max_files:
                found.problems[root] = (f"more than {max_files:,} files: the first {max_files:,} are indexed, "
                                        "add its subfolders separately for the rest")
                found.complete = False
                return found
    return found


def _take(entry: os.DirEntry, found: Scan, seen: set, stack: list[str]) -> bool:
    """Record a file or queue a folder; False when nothing was added."""
    if entry.name.startswith(".") or entry.name in HIDDEN_FOLDERS:
        return False
    try:
        info = entry.stat()  # follows a symlink
    except FileNotFoundError:
        if entry.is_symlink():
            found.problems[entry.path] = "a broken symbolic link, or one in a loop"
        return False
    except OSError as exc:
        found.problems[entry.path] = f"could not read it: {exc.strerror or exc}"
        return False
    if stat.S_ISDIR(info.st_mode):
        key = (info.st_dev, info.st_ino)
        if key in seen:
            found.problems[entry.path] = f"a symbolic link back to a folder already indexed ({Path(entry.path).resolve()})"
            return False
        seen.add(key)
        stack.append(entry.path)
        return False
    if stat.S_ISREG(info.st_mode):
        found.files[entry.path] = (info.st_size, info.st_mtime)
        return True
    return False
