"""One Wren per user and data folder: a second start hands its request to the first.

The window listens on a socket in the user's private runtime folder (a full path the
front end passes in; engine.paths.instance_socket_path), never under a guessable name in the
shared temporary folder, where another user could listen first, keep the window from
opening and read its requests. Before handing over, the socket and its folder must belong to
this user, the folder closed to others, and the listener must run as this user; the first
Wren reads only from peers running as its own user.
"""

from __future__ import annotations

import getpass
import hashlib
import logging
import os
import socket as pysocket
import stat
import struct
import sys
from pathlib import Path

from PySide6.QtCore import QDir, QObject, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket

log = logging.getLogger(__name__)

SHOW = "show"
QUICK = "quick"
_MESSAGES = {SHOW, QUICK}


def server_name(data_dir: str) -> str:
    """A pipe name per user and data folder, for Windows, whose named pipes have no folder."""
    digest = hashlib.sha1(data_dir.encode("utf-8")).hexdigest()[:12]
    user = "".join(ch for ch in getpass.getuser() if ch.isalnum())[:32] or "user"
    return f"wren-{user}-{digest}"


def untrusted_reason(name: str) -> str | None:
    """Why the socket `name` (a full path; a bare name lies in the shared temporary folder)
    cannot be this user's Wren; None where it can. Windows: None (a pipe has no folder)."""
    if sys.platform == "win32":
        return None
    path = Path(name) if os.path.isabs(name) else Path(QDir.tempPath()) / name
    me = os.getuid()
    try:
        folder = path.parent.lstat()
    except OSError as exc:
        return f"its folder {path.parent} cannot be read ({exc.strerror})"
    if not stat.S_ISDIR(folder.st_mode) or folder.st_uid != me or folder.st_mode & 0o077:
        return f"its folder {path.parent} is not private to this user"
    try:
        info = path.lstat()
    except FileNotFoundError:
        return None  # nobody listens yet
    except OSError as exc:
        return f"it cannot be read ({exc.strerror})"
    if not stat.S_ISSOCK(info.st_mode) or info.st_uid != me:
        return f"{path} is not a socket of this user's"
    return None


def peer_uid(descriptor: int) -> int | None:
    """The user id of the process at the other end of a connected Unix socket; None where
    the platform cannot tell (the private folder is the guard there)."""
    if descriptor < 0:
        return None
    sock = pysocket.socket(fileno=os.dup(descriptor))  # a copy: closing it leaves Qt's open
    try:
        if hasattr(pysocket, "SO_PEERCRED"):  # Linux: pid, uid, gid
            _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(pysocket.SOL_SOCKET, pysocket.SO_PEERCRED,
                                                                  struct.calcsize("3i")))
            return uid
        return _getpeereid(sock.fileno())
    except OSError:
        return None
    finally:
        sock.close()


def _getpeereid(descriptor: int) -> int | None:
    """macOS and the BSDs: getpeereid(2) from the C library."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        getpeereid = libc.getpeereid
    except (OSError, AttributeError, TypeError):
        return None
    uid, gid = ctypes.c_uint32(), ctypes.c_uint32()
    if getpeereid(descriptor, ctypes.byref(uid), ctypes.byref(gid)) != 0:
        return None
    return uid.value


def _same_user(socket: QLocalSocket) -> bool:
    if sys.platform == "win32":
        return True
    uid = peer_uid(int(socket.socketDescriptor()))
    return uid is None or uid == os.getuid()


class SingleInstance(QObject):
    message = Signal(str)  # SHOW or QUICK, from a second start

    def __init__(self, name: str, parent: QObject | None = None):
        super().__init__(parent)
        self.name = name  # the socket's full path (a pipe's name on Windows)
        self._server: QLocalServer | None = None
        self._clients: list[QLocalSocket] = []

    def forward(self, message: str, timeout_ms: int = 800) -> bool:
        """Hand `message` to this user's running Wren; False when there is none (or what
        listens there is not this user's: it is told nothing)."""
        if (why := untrusted_reason(self.name)) is not None:
            log.warning("not handing over to %s: %s", self.name, why)
            return False
        socket = QLocalSocket()
        socket.connectToServer(self.name)
        if not socket.waitForConnected(timeout_ms):
            return False
        if not _same_user(socket):
            log.warning("not handing over to %s: it is listened on by another user", self.name)
            socket.abort()
            return False
        socket.write(f"{message}\n".encode("ascii"))
        socket.flush()
        delivered = socket.waitForBytesWritten(timeout_ms) or socket.bytesToWrite() == 0
        socket.disconnectFromServer()
        return delivered

    def listen(self) -> bool:
        if (why := untrusted_reason(self.name)) is not None:
            log.warning("not listening on %s: %s", self.name, why)
            return False
        server = QLocalServer(self)
        server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
        if not server.listen(self.name):
            # Left behind by a Wren that crashed: nobody answered forward(), so it is stale.
            QLocalServer.removeServer(self.name)
            if not server.listen(self.name):
                return False
        server.newConnection.connect(self._accept)
        self._server = server
        return True

    def close(self) -> None:
        for socket in self._clients:
            socket.readyRead.disconnect()
            socket.abort()
        self._clients.clear()
        if self._server is not None:
            self._server.newConnection.disconnect(self._accept)
            self._server.close()
            self._server.deleteLater()
            self._server = None

    def _accept(self) -> None:
        assert self._server is not None
        while (socket := self._server.nextPendingConnection()) is not None:
            if not _same_user(socket):
                log.warning("refused a connection to %s from another user", self.name)
                socket.abort()
                socket.deleteLater()
                continue
            self._clients.append(socket)
            socket.readyRead.connect(self._read_all)
            socket.disconnected.connect(self._forget)
            self._read(socket)

    def _read_all(self) -> None:
        for socket in list(self._clients):
            self._read(socket)

    def _forget(self) -> None:
        for socket in [s for s in self._clients if s.state() == QLocalSocket.LocalSocketState.UnconnectedState]:
            self._read(socket)
            self._clients.remove(socket)
            socket.deleteLater()

    def _read(self, socket: QLocalSocket) -> None:
        while socket.canReadLine():
            line = bytes(socket.readLine().data()).decode("ascii", "replace").strip()
            if line in _MESSAGES:
                self.message.emit(line)
