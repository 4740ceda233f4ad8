"""The window's single-instance socket cannot be taken by another user.

The socket lives in the user's private runtime folder and is a full path. A listener in the
old shared location, a folder open to others or owned by someone else, a socket file of
another user, or a listener running as another user: the second start tells it nothing and
the window opens on its own. The first Wren reads nothing from a peer of another user.

Real sockets throughout: QLocalServer/QLocalSocket, plain AF_UNIX listeners standing in for
the other user, and (as root) child processes that really run as another user."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from wren.desktop.tray.instance import QUICK, SHOW, SingleInstance, server_name, untrusted_reason

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="Unix sockets and folder modes")
ROOT = Path(__file__).resolve().parents[2]
AS_ROOT = pytest.mark.skipif(sys.platform == "win32" or os.geteuid() != 0, reason="acting as another user needs root")
NOBODY = 65534


@pytest.fixture
def folder():
    """A short private folder (socket paths must stay under ~100 bytes)."""
    made = Path(tempfile.mkdtemp(prefix="wren-si-"))
    yield made
    for path in made.iterdir():
        path.unlink()
    made.chmod(0o700)
    made.rmdir()


def _listener(path: Path) -> socket.socket:
    """Someone listening on `path` who never answers: the kernel accepts a connection into
    its backlog, so a sender's bytes would be delivered to it."""
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.listen(4)
    return sock


def _received(listener: socket.socket) -> bytes:
    """Everything sent to `listener` so far (b"" when nobody connected)."""
    listener.setblocking(False)
    got = b""
    while select.select([listener], [], [], 0.2)[0]:
        conn, _ = listener.accept()
        conn.settimeout(1)
        try:
            got += conn.recv(1024)
        except OSError:
            pass
        conn.close()
    return got


def test_hands_over_within_a_private_folder(qtbot, folder):
    name = str(folder / "desktop.sock")
    first, second = SingleInstance(name), SingleInstance(name)
    assert untrusted_reason(name) is None
    assert first.listen()
    with qtbot.waitSignal(first.message, timeout=5000) as got:
        assert second.forward(QUICK)
    assert got.args == [QUICK]
    first.close()


def test_a_listener_in_the_shared_temporary_folder_is_told_nothing(qtbot):
    from PySide6.QtCore import QDir

    bare = server_name(f"/wren-test/{os.getpid()}/{time.monotonic_ns()}")  # the old kind of name
    path = Path(QDir.tempPath()) / bare
    hostile = _listener(path)
    try:
        instance = SingleInstance(bare)
        assert not instance.forward(SHOW)
        assert "not private" in (untrusted_reason(bare) or "")
        assert not instance.listen()  # nor does it listen where others can reach it
        assert _received(hostile) == b""
    finally:
        hostile.close()
        path.unlink()


def test_a_folder_open_to_others_is_not_trusted(qtbot, folder):
    path = folder / "desktop.sock"
    hostile = _listener(path)
    folder.chmod(0o777)  # as a folder made by anyone, or left open
    try:
        instance = SingleInstance(str(path))
        assert not instance.forward(SHOW)
        assert not instance.listen()
        assert _received(hostile) == b""
    finally:
        hostile.close()


@AS_ROOT
def test_a_folder_or_a_socket_of_another_user_is_not_trusted(qtbot, folder):
    path = folder / "desktop.sock"
    hostile = _listener(path)
    try:
        os.chown(path, NOBODY, NOBODY)  # the socket file is someone else's
        assert not SingleInstance(str(path)).forward(SHOW)
        os.chown(path, os.getuid(), os.getgid())
        os.chown(folder, NOBODY, NOBODY)  # the folder is someone else's, closed as ours would be
        assert not SingleInstance(str(path)).forward(SHOW)
        assert _received(hostile) == b""
    finally:
        hostile.close()
        os.chown(folder, os.getuid(), os.getgid())


def _as_nobody() -> None:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def _as_nobody_child(work) -> tuple[int, int]:
    """Fork a child that runs `work(tell)`, where `tell(bytes)` writes to a pipe the parent
    reads; returns (pid, the pipe's read end)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: plain system calls only, then out without Python's clean-up
        status = 1
        try:
            os.close(read)
            work(lambda said: os.write(write, said))
            status = 0
        except BaseException as exc:  # said to the parent, whose assertion shows it
            os.write(write, repr(exc).encode())
        finally:
            os._exit(status)
    os.close(write)
    return pid, read


def _become_nobody() -> None:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def _child_result(pid: int, read: int) -> bytes:
    _, status = os.waitpid(pid, 0)
    with os.fdopen(read, "rb") as pipe:
        said = pipe.read()
    assert os.waitstatus_to_exitcode(status) == 0, said
    return said


def _readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


@AS_ROOT
def test_a_listener_running_as_another_user_is_told_nothing(qtbot, folder):
    # Bound by root in our private folder, then listening as nobody: the file and the folder
    # look like ours; only the listener's credentials say otherwise.
    path = folder / "desktop.sock"
    bound = socket.socket(socket.AF_UNIX)
    bound.bind(str(path))

    def listen_as_nobody(tell) -> None:
        _become_nobody()
        bound.listen(4)  # a connecting peer sees the credentials of the one that listens
        tell(b"listening;")
        bound.settimeout(5)
        conn, _ = bound.accept()
        conn.settimeout(2)
        try:
            tell(b"got " + conn.recv(64))
        except OSError:
            tell(b"got nothing")

    pid, read = _as_nobody_child(listen_as_nobody)
    bound.close()
    qtbot.waitUntil(lambda: _readable(read), timeout=5000)
    assert untrusted_reason(str(path)) is None  # file and folder alone would pass
    assert not SingleInstance(str(path)).forward(SHOW)
    said = _child_result(pid, read)
    assert said.startswith(b"listening;got") and b"show" not in said, said


@AS_ROOT
def test_the_first_wren_reads_nothing_from_another_user(qtbot, folder):
    path = folder / "desktop.sock"
    first = SingleInstance(str(path))
    assert first.listen()
    folder.chmod(0o755)  # let the other user reach the socket, as a leaky folder would
    path.chmod(0o777)

    def send_as_nobody(tell) -> None:
        _become_nobody()
        s = socket.socket(socket.AF_UNIX)
        s.connect(str(path))
        s.settimeout(5)
        try:
            s.sendall(b"show\n")
            got = s.recv(1)
        except (BrokenPipeError, ConnectionResetError):  # closed, our line unread
            got = b""
        tell(b"closed" if got == b"" else b"open")

    try:
        with qtbot.assertNotEmitted(first.message, wait=500):
            pid, read = _as_nobody_child(send_as_nobody)
            qtbot.waitUntil(lambda: _readable(read), timeout=10000)  # Qt runs the server meanwhile
        assert _child_result(pid, read) == b"closed"  # refused: dropped unread
    finally:
        first.close()
        folder.chmod(0o700)


def _desktop(home: Path, **extra: str) -> subprocess.Popen:
    env = {key: value for key, value in os.environ.items() if key != "XDG_RUNTIME_DIR"}
    env.update(WREN_HOME=str(home), QT_QPA_PLATFORM="offscreen", WREN_DESKTOP_SMOKE="hi",
               WREN_DESKTOP_SMOKE_TIMEOUT="60", **extra)
    return subprocess.Popen(
        [sys.executable, "-c", "import sys; from wren.desktop.app import main; sys.exit(main())"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _window_opened(proc: subprocess.Popen) -> tuple[bool, str]:
    """Whether the started Wren reported its window; it is stopped either way."""
    try:
        line = proc.stdout.readline()  # the first smoke line, or "" when it exits first
        said = json.loads(line) if line.startswith("{") else {}
        opened = said.get("smoke") == "window" and said.get("visible") is True
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            _out, err = proc.communicate()
    return opened, err


@pytest.mark.slow
def test_wren_desktop_opens_its_window_when_someone_listens_at_the_old_shared_name(tmp_path):
    from PySide6.QtCore import QDir

    home = tmp_path / "home"
    home.mkdir()
    old = Path(QDir.tempPath()) / server_name(str(home))  # where the window used to listen
    hostile = _listener(old)
    try:
        opened, err = _window_opened(_desktop(home))
        assert opened, err
        assert _received(hostile) == b""
    finally:
        hostile.close()
        old.unlink()


@AS_ROOT
@pytest.mark.slow
def test_wren_desktop_opens_its_window_when_the_runtime_folder_is_another_users(tmp_path):
    runtime = Path(tempfile.mkdtemp(prefix="wren-rt-"))  # short: a longer one falls back to /tmp/wren-UID
    taken = runtime / "wren"
    taken.mkdir()
    taken.chmod(0o777)
    os.chown(taken, NOBODY, NOBODY)  # another user made it first
    home = tmp_path / "home"
    home.mkdir()
    opened, err = _window_opened(_desktop(home, XDG_RUNTIME_DIR=str(runtime)))
    assert opened, err
    log = (home / "logs" / "wren.log").read_text()
    assert "is not private to this user" in log and "a second start will open a second window" in log
    try:
        assert taken.stat().st_uid == NOBODY and (taken.stat().st_mode & 0o777) == 0o777
        assert not list(taken.iterdir())  # nothing of ours went in
    finally:
        taken.rmdir()
        runtime.rmdir()
