"""Where Wren keeps its data ($WREN_HOME, else the platform's user data dir) and its sockets.

Folders Wren makes itself are made 0700, missing parents included. The data folder a user
names (or the platform's, when it exists already) keeps the permissions it has: Wren never
changes them. It refuses a data folder that other users can write to, or that belongs to
someone else, with a message naming the folder and what to do, rather than keep the user's
conversations where another user could replace or delete them, or quietly move them to a
subfolder the user never chose.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shlex
import stat
from pathlib import Path

from .errors import WrenError

PRIVATE_DIR = 0o700  # the folders Wren makes: the user alone
PRIVATE_FILE = 0o600  # the database, logs and exports
# The longest socket name Wren uses (engine/resident.py): a socket's whole path must fit
# in 104 bytes (macOS; 108 on Linux).
_LONGEST_SOCKET_NAME = "window-0123456789abcdef-01234567.sock"
_SOCKET_PATH_LIMIT = 100


class DataFolderError(WrenError):
    """The data (or runtime) folder cannot be made, or is open to other users; the message
    names the folder and what to do."""


def _make_private(path: Path) -> None:
    """Create `path` and any missing parents, each 0700 (whatever the umask)."""
    missing = [path, *(parent for parent in path.parents)]
    missing = list(reversed([p for p in missing if not p.is_dir()]))
    for folder in missing:
        try:
            folder.mkdir(mode=PRIVATE_DIR)
        except FileExistsError:  # made meanwhile by someone else: checked by the caller
            continue
        os.chmod(folder, PRIVATE_DIR)  # ours, just made: the umask may have taken bits away


def make_dirs(path: Path) -> Path:
    """`path` as a folder, like `mkdir -p` but each folder it makes 0700 (whatever the umask);
    one that exists already keeps its permissions (the data folder a user named, a folder a
    caller chose). For Wren's own folders inside the data folder, private_dir."""
    if not path.is_dir():
        _make_private(path)
    return path


def private_dir(path: Path) -> Path:
    """One of Wren's own folders (inside its data or runtime folder): made 0700 with any
    missing parents; an existing one of this user's is closed to others again."""
    if not path.is_dir():
        _make_private(path)
    try:
        info = path.lstat()
        # A symlink the user made (models on another disk) points at a folder they named.
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) != PRIVATE_DIR:
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


def chosen_data_dir() -> Path:
    """The data folder's path, as chosen ($WREN_HOME, else the platform's); nothing is made."""
    override = os.environ.get("WREN_HOME")
    if override:
        return Path(override).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("Wren", appauthor=False))


def data_dir() -> Path:
    """The data folder: made private when missing, checked (never changed) when it exists.
    Raises DataFolderError for a folder that other users can write to or that is not this user's."""
    path = chosen_data_dir()
    if not path.is_dir():
        try:
            _make_private(path)
        except OSError as exc:
            raise DataFolderError(f"cannot make the data folder {path}: {exc.strerror}; "
                                  "set WREN_HOME to a folder you can write to") from None
    check_data_dir(path)
    return path


def check_data_dir(path: Path) -> None:
    """Raise DataFolderError when `path` is not a folder this user alone can write to."""
    if os.name == "nt":  # no POSIX modes; the profile folder's ACLs are the user's
        return
    try:
        info = path.stat()
    except OSError as exc:
        raise DataFolderError(f"cannot open the data folder {path}: {exc.strerror}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise DataFolderError(f"the data folder {path} is not a folder; set WREN_HOME to a folder")
    problem = _open_to_others(info)
    if problem is not None:
        raise DataFolderError(_refusal(path, info, problem))


def _open_to_others(info: os.stat_result) -> str | None:
    """Who besides this user could change what is in a folder with this status; None: nobody."""
    if info.st_uid not in (os.getuid(), 0):  # root can change anything anyway
        return f"belongs to {_user_name(info.st_uid)}"
    if info.st_mode & stat.S_IWOTH:  # sticky or not: others can add files, a sqlite journal, a symlink
        return "can be written by every user"
    if info.st_mode & stat.S_IWGRP and not _private_group(info.st_gid):
        return f"can be written by the group {_group_name(info.st_gid)}"
    return None


def _refusal(path: Path, info: os.stat_result, problem: str) -> str:
    mode = stat.S_IMODE(info.st_mode)
    said = (f"the data folder {path} {problem} (mode {mode:04o}): others could replace or delete your "
            "conversations and models there, so Wren does not use it (and leaves its permissions as they are). ")
    if info.st_uid not in (os.getuid(), 0):
        advice = "Set WREN_HOME to a folder of your own (Wren creates a missing one, private)."
    elif mode & stat.S_ISVTX:  # shared like /tmp: a subfolder of the user's own stays theirs
        advice = (f"Set WREN_HOME to a folder only you can write to, such as a new subfolder that "
                  f"Wren creates private: WREN_HOME={shlex.quote(str(path / 'wren'))}")
    else:
        advice = (f"If the folder is meant for you alone, close it with `chmod go-w {shlex.quote(str(path))}`; "
                  "else set WREN_HOME to a folder only you can write to (Wren creates a missing one, private).")
    return said + advice


@functools.lru_cache(maxsize=8)
def _private_group(gid: int) -> bool:
    """A user private group: its only member, primary or listed, is this user (as sshd allows)."""
    import grp
    import pwd

    try:
        me = pwd.getpwuid(os.getuid()).pw_name
        group = grp.getgrgid(gid)
    except KeyError:
        return False
    members = set(group.gr_mem) | {user.pw_name for user in pwd.getpwall() if user.pw_gid == gid}
    return members == {me}


def _user_name(uid: int) -> str:
    import pwd

    try:
        return f"the user {pwd.getpwuid(uid).pw_name}"
    except KeyError:
        return f"the user with id {uid}"


def _group_name(gid: int) -> str:
    import grp

    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return f"with id {gid}"


def models_dir() -> Path:
    return private_dir(data_dir() / "models")


def database_path() -> Path:
    return data_dir() / "wren.sqlite3"


def logs_dir() -> Path:
    return private_dir(data_dir() / "logs")


def cache_dir() -> Path:
    """What Wren can make again (compiled decode graphs): made private like the rest."""
    return private_dir(data_dir() / "cache")


# -- the runtime folder: Wren's sockets --------------------------------------------------------

def runtime_dir(home: Path) -> Path:
    """Where Wren's sockets for the data folder `home` go: the session's runtime folder
    ($XDG_RUNTIME_DIR/wren), else the data folder's run/; /tmp/wren-UID where that path
    would be too long for a socket's name. Nothing is made (private_runtime_dir does that)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    folder = Path(runtime) / "wren" if runtime and Path(runtime).is_dir() else home / "run"
    if len(os.fsencode(folder / _LONGEST_SOCKET_NAME)) > _SOCKET_PATH_LIMIT:
        folder = Path(f"/tmp/wren-{os.getuid()}")
    return folder


def private_runtime_dir(folder: Path) -> Path:
    """The sockets' folder, made and checked: owned by this user, closed to everyone else.
    Raises DataFolderError otherwise (another user made it first, for example)."""
    if folder.is_symlink() or (folder.exists() and folder.stat().st_uid != os.getuid()):
        _refuse_runtime_dir(folder)  # made by someone else: nothing of it is touched
    private_dir(folder)
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        _refuse_runtime_dir(folder)
    return folder


def _refuse_runtime_dir(folder: Path) -> None:
    info = folder.lstat()
    kind = "a symlink" if stat.S_ISLNK(info.st_mode) else f"mode {stat.S_IMODE(info.st_mode):04o}"
    raise DataFolderError(f"{folder} is not private to this user ({_user_name(info.st_uid)} owns it, "
                          f"{kind}); Wren will not put its sockets there")


def instance_socket_path(home: Path | None = None) -> Path:
    """The window's single-instance socket, one per user and data folder, in the runtime
    folder (not made here: the window makes it with private_runtime_dir)."""
    home = (home or data_dir()).resolve()
    digest = hashlib.sha256(os.fsencode(home)).hexdigest()[:16]
    return runtime_dir(home) / f"desktop-{digest}.sock"
