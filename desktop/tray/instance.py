"""One Wren per user and data folder: a second start hands its request to the first."""

from __future__ import annotations

import getpass
import hashlib

from PySide6.QtCore import QObject, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket

SHOW = "show"
QUICK = "quick"
_MESSAGES = {SHOW, QUICK}


def server_name(data_dir: str) -> str:
    """Per user and per data folder, so a test's or a second profile's Wren stays separate."""
    digest = hashlib.sha1(data_dir.encode("utf-8")).hexdigest()[:12]
    user = "".join(ch for ch in getpass.getuser() if ch.isalnum())[:32] or "user"
    return f"wren-{user}-{digest}"


class SingleInstance(QObject):
    message = Signal(str)  # SHOW or QUICK, from a second start

    def __init__(self, name: str, parent: QObject | None = None):
        super().__init__(parent)
        self.name = name
        self._server: QLocalServer | None = None
        self._clients: list[QLocalSocket] = []

    def forward(self, message: str, timeout_ms: int = 800) -> bool:
        """Hand `message` to a running Wren; False when there is none."""
        socket = QLocalSocket()
        socket.connectToServer(self.name)
        if not socket.waitForConnected(timeout_ms):
            return False
        socket.write(f"{message}\n".encode("ascii"))
        socket.flush()
        delivered = socket.waitForBytesWritten(timeout_ms) or socket.bytesToWrite() == 0
        socket.disconnectFromServer()
        return delivered

    def listen(self) -> bool:
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
