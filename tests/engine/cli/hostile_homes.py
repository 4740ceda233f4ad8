"""Data folders in bad shape for the CLI's error tests: a real Wren database with six chats,
then damaged (garbage written over its pages), made unreadable (mode 000, read by another
user when the tests run as root), or put on a read-only file system; and `wren` run on them
as a real child process."""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.engine.cli.conftest import LAUNCHER, child_env

CHATS = 6
NOBODY = 65534


def make_home(home: Path, tiny_model_dir: Path | None = None) -> Path:
    """A data folder whose database holds CHATS chats of four messages each (through the
    real Store), with the tiny model chosen when given; every write checkpointed into the
    main file, so garbage written over it is what the next process reads."""
    from wren.engine.modelhub.registry import ModelRegistry
    from wren.engine.records import Role
    from wren.engine.store import Store

    home.mkdir(parents=True, exist_ok=True)
    store = Store(home / "wren.sqlite3")
    for i in range(CHATS):
        conv = store.create_conversation(f"chat {i}")
        parent = None
        for j in range(4):
            role = Role.USER if j % 2 == 0 else Role.ASSISTANT
            parent = store.add_message(conv.id, role, f"message {j} of chat {i}. " * 60,
                                       parent_id=parent and parent.id)
    if tiny_model_dir is not None:
        ModelRegistry(home / "models").register_folder(tiny_model_dir, name="tiny")
        store.set_setting("model", "tiny")
    store.close()  # the last connection checkpoints the WAL into the file
    assert not (home / "wren.sqlite3-wal").exists() or (home / "wren.sqlite3-wal").stat().st_size == 0
    return home


def _page(db: Path, table: str) -> tuple[int, int]:
    conn = sqlite3.connect(db)
    try:
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    finally:
        conn.close()
    return (root - 1) * size, size


def damage_table(db: Path, table: str = "message") -> None:
    """Garbage over the root page of `table`: SQLite's check finds it; the chats' own table
    (and so the list of chats) still reads."""
    offset, size = _page(db, table)
    garbage = random.Random(35).randbytes(size)
    with open(db, "r+b") as out:
        out.seek(offset)
        out.write(garbage)


def damage_middle(db: Path, pages: int = 3) -> None:
    """Garbage over `pages` pages in the middle of the file (as the issue did)."""
    size = db.stat().st_size
    with open(db, "r+b") as out:
        out.seek(size // 2)
        out.write(random.Random(36).randbytes(4096 * pages))


def damage_header(db: Path) -> None:
    """Garbage over the first page: not a database any more."""
    with open(db, "r+b") as out:
        out.write(random.Random(37).randbytes(4096))


def shared_dir() -> Path:
    """A folder another user can reach (pytest's tmp_path is root's own, mode 0700)."""
    path = Path(tempfile.mkdtemp(prefix="wren-hostile-"))
    path.chmod(0o755)
    return path


def as_other_user() -> list[str] | None:
    """The prefix that runs a command as a user without root's power over permissions;
    [] when the tests already run as one; None when root cannot drop it here."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        return None
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


def give_to_other_user(path: Path) -> None:
    if os.geteuid() == 0:
        for root, dirs, files in os.walk(path):
            for name in [*dirs, *files]:
                os.lchown(os.path.join(root, name), NOBODY, NOBODY)
        os.chown(path, NOBODY, NOBODY)


def mount_read_only(source: Path, where: Path) -> bool:
    """A copy of `source` on a read-only tmpfs at `where` (root and mount(8) needed)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    where.mkdir(parents=True, exist_ok=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(where)],
                      capture_output=True).returncode != 0:
        return False
    shutil.copytree(source, where, dirs_exist_ok=True, symlinks=True)
    if subprocess.run(["mount", "-o", "remount,ro", str(where)], capture_output=True).returncode != 0:
        unmount(where)
        return False
    return True


def unmount(where: Path) -> None:
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


def wren(home: Path, *args: str, prefix: list[str] | None = None, scripted: bool = False,
         stdin: str | None = None, timeout: float = 180, **env: str) -> subprocess.CompletedProcess:
    """`wren ARGS` over `home` as a child process: the real program (`python -m
    wren.engine.terminal`, crash hooks and all), or with the scripted backend (tests' launcher)."""
    program = [sys.executable, str(LAUNCHER)] if scripted else [sys.executable, "-m", "wren.engine.terminal"]
    variables = child_env(WREN_HOME=str(home), WREN_KEEP_ALIVE="0", PYTHONDONTWRITEBYTECODE="1",
                          HOME=str(home.parent), XDG_DATA_HOME=str(home.parent / "xdg-data"), **env)
    for name in ("WREN_API_KEY", "WREN_KEYRING_PASSPHRASE", "DBUS_SESSION_BUS_ADDRESS"):
        if name not in env:
            variables.pop(name, None)
    return subprocess.run([*(prefix or []), *program, *args], env=variables, capture_output=True, text=True,
                          timeout=timeout, input=stdin if stdin is not None else "", cwd=home.parent)


def crash_reports(home: Path) -> list[Path]:
    folder = home / "crashes"
    try:
        return sorted(folder.glob("crash-*.txt"))
    except OSError:
        return []
