"""Where Wren keeps its data: $WREN_HOME, else the platform's user data dir."""

from __future__ import annotations

import os
from pathlib import Path

PRIVATE_DIR = 0o700  # the data folder and Wren's folders in it: the user alone
PRIVATE_FILE = 0o600  # the database, logs and exports


def private_dir(path: Path) -> Path:
    """Make `path` (and missing parents) a folder only its owner can open."""
    if not path.is_dir():
        path.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    try:
        if path.stat().st_mode & 0o777 != PRIVATE_DIR:
            os.chmod(path, PRIVATE_DIR)
    except OSError:  # not ours (a shared mount): leave it as it is
        pass
    return path


def private_file(path: Path) -> Path:
    """Create `path` if missing, readable and writable by its owner alone (0600)."""
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_APPEND, PRIVATE_FILE))
    try:
        if path.stat().st_mode & 0o777 != PRIVATE_FILE:
            os.chmod(path, PRIVATE_FILE)
    except OSError:
        pass
    return path


def data_dir() -> Path:
    override = os.environ.get("WREN_HOME")
    if override:
        path = Path(override).expanduser()
    else:
        import platformdirs

        path = Path(platformdirs.user_data_dir("Wren", appauthor=False))
    return private_dir(path)


def models_dir() -> Path:
    return private_dir(data_dir() / "models")


def database_path() -> Path:
    return data_dir() / "wren.sqlite3"


def logs_dir() -> Path:
    return private_dir(data_dir() / "logs")
