"""The one place under all of Wren's networking: a Python audit hook on the socket events
(connect, name lookup, bind, sendto) that records each connection in the ledger and, while
the offline lock is on, refuses what is not loopback.

Every Python socket goes through it, whoever made it (httpx, huggingface_hub, the MCP SDK,
asyncio, the standard library). What it cannot see: connections made by native code that
bypasses Python's socket module (none in Wren's process; Qt's local sockets are Unix
sockets) and child processes (MCP servers started by command: engine/network/sandbox.py).

Bytes: audit events carry none, so the kernel's own counts are read (TCP_INFO on Linux:
payload bytes sent less retransmissions, payload bytes received; TLS records included, IP
and TCP headers not) when the socket is really closed, which a patch of socket.socket's
_real_close (the one path every close of a Python socket takes, TLS sockets included) makes
possible. A socket still open when the process exits is counted then. Elsewhere, or for a
socket dropped without being closed, the bytes are recorded as not counted, never guessed.
"""

from __future__ import annotations

import atexit
import ipaddress
import logging
import socket
import struct
import sys
import threading
import weakref
from typing import Any
from urllib.parse import urlsplit

from ..loopback import is_loopback
from . import ledger, lock
from .purpose import Part, Purpose, carry_into_threads, current, set_process_default

log = logging.getLogger(__name__)

_EVENTS = {"socket.connect", "socket.getaddrinfo", "socket.bind", "socket.sendto", "socket.sendmsg",
           "socket.gethostbyname", "socket.gethostbyaddr", "socket.getnameinfo"}
_INET = (socket.AF_INET, socket.AF_INET6)

_state: dict[str, Any] = {"hooked": False, "active": False, "process": ""}
_inside = threading.local()  # the hook's own file writes never come back into it
_open: dict[int, tuple[str, Any, Any]] = {}  # fd -> (entry id, weak socket, peer) of a recorded connection
_open_lock = threading.Lock()
_warned: set[str] = set()
# States in which the peer's FIN came: TIME_WAIT, CLOSE, CLOSE_WAIT, LAST_ACK, CLOSING. CLOSE also
# follows a reset, when no FIN came: such a connection's count may be one byte short.
_PEER_CLOSED = (6, 7, 8, 9, 11)


# -- turning it on ---------------------------------------------------------------------------

# Processes that are one part of Wren as a whole: what they connect to without naming an
# action is theirs (the sockets `wren serve` listens on, a resident engine's).
_PROCESS_PURPOSES = {
    "wren serve": Purpose(Part.SERVER, "`wren serve` answering its clients"),
    "wren resident": Purpose(Part.ENGINE, "the resident engine answering `wren ask`"),
}


def install(process: str) -> None:
    """Record and guard this process's connections from now on, as `process` ("wren ask",
    "window", ...). Audit hooks cannot be removed; `deactivate` makes it inert (tests)."""
    _state["process"] = process
    _state["active"] = True
    set_process_default(_PROCESS_PURPOSES.get(process))
    if not _state["hooked"]:
        _state["hooked"] = True
        _patch_close()
        carry_into_threads()
        sys.addaudithook(_hook)
        atexit.register(_count_still_open)


def deactivate() -> None:
    _state["active"] = False
    set_process_default(None)
    with _open_lock:
        _open.clear()  # nothing more is written, not even the bytes of connections still open


def process_name() -> str:
    return str(_state["process"])


def active() -> bool:
    return bool(_state["active"])


# -- checks Wren's own callers make first ----------------------------------------------------

def check(host: str, port: int | None, purpose: Purpose | None = None, *, listen: bool = False) -> None:
    """Raise OfflineLocked (and record the refusal) before an action that would connect to
    `host`, so it says at once that it is locked, in Wren's words, instead of failing in a
    client library. Loopback, or the lock off: nothing."""
    state = lock.state()
    if not state.on or _is_local(host):
        return
    purpose = purpose or current()
    error = lock.refusal(_target(host, port), purpose, state, verb="listen on" if listen else "connect to")
    _write(_entry(purpose, "listen" if listen else "connect", host, port, False, "refused", str(error)))
    raise lock.OfflineLocked(str(error))


def check_url(url: str, purpose: Purpose | None = None) -> None:
    parts = urlsplit(url)
    if parts.hostname:
        default = 443 if parts.scheme == "https" else 80
        check(parts.hostname, parts.port or default, purpose)


# -- the hook --------------------------------------------------------------------------------

def _hook(event: str, args: tuple) -> None:
    if event not in _EVENTS or not _state["active"] or getattr(_inside, "busy", False):
        return
    _inside.busy = True
    try:
        if event == "socket.connect":
            _on_connect(args[0], args[1])
        elif event == "socket.bind":
            _on_bind(args[0], args[1])
        elif event in ("socket.sendto", "socket.sendmsg"):
            _on_send(args[0], args[1])
        else:
            _on_lookup(event, args)
    finally:
        _inside.busy = False


def _on_connect(sock: socket.socket, address: Any) -> None:
    purpose = current()
    if sock.family == getattr(socket, "AF_UNIX", None):
        if purpose.part is not Part.UNATTRIBUTED:  # Wren's own engine sockets; a session bus is not recorded
            name = address.decode(errors="replace") if isinstance(address, bytes) else str(address)
            _write(_entry(purpose, "connect", name, None, True, "allowed"))
        return
    if sock.family not in _INET:
        return
    host, port = str(address[0]), int(address[1])
    local = _is_local(host)
    state = lock.state()
    if state.on and not local:
        _refuse(purpose, "connect", host, port, state)
    entry = _entry(purpose, "connect", host, port, local, "allowed")
    _write(entry)
    if sock.type == socket.SOCK_STREAM:
        with _open_lock:
            _open[sock.fileno()] = (entry.id, weakref.ref(sock), (host, port))


def _on_bind(sock: socket.socket, address: Any) -> None:
    if sock.family not in _INET:
        return
    host, port = str(address[0]), int(address[1])
    local = _is_local(host)
    state = lock.state()
    purpose = current()
    if state.on and not local:
        _refuse(purpose, "listen", host or "every interface", port, state, verb="listen on")
    if sock.type == socket.SOCK_STREAM:
        _write(_entry(purpose, "listen", host or "every interface", port, local, "allowed"))


def _on_send(sock: socket.socket, address: Any) -> None:
    if address is None or sock.family not in _INET:  # a connected socket was checked at connect
        return
    host, port = str(address[0]), int(address[1])
    state = lock.state()
    if state.on and not _is_local(host):
        _refuse(current(), "send", host, port, state, verb="send to")


def _on_lookup(event: str, args: tuple) -> None:
    host = args[0]
    if event == "socket.getnameinfo" and isinstance(host, tuple):
        host = host[0]
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    # An address to resolve asks no resolver anything: the connect or bind that follows is what
    # is judged (a lookup cannot tell a client's address from one a server will listen on). A
    # reverse lookup of an address does ask the DNS, so it is judged here.
    forward = event in ("socket.getaddrinfo", "socket.gethostbyname")
    if host is None or host == "" or _is_local(str(host)) or (forward and _is_address(str(host))):
        return
    state = lock.state()
    if state.on:
        port = args[1] if event == "socket.getaddrinfo" and isinstance(args[1], int) else None
        _refuse(current(), "lookup", str(host), port, state, verb="look up")


def _refuse(purpose: Purpose, kind: str, host: str, port: int | None, state: lock.LockState,
            verb: str = "connect to") -> None:
    error = lock.refusal(_target(host, port), purpose, state, verb=verb)
    _write(_entry(purpose, kind, host, port, False, "refused", str(error)))
    raise error


# -- helpers ---------------------------------------------------------------------------------

def _is_local(host: str) -> bool:
    if is_loopback(host):
        return True
    try:  # a bare IPv6 address with a zone, or 127.x written in full, is covered above; this adds ::ffff:127.x
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return ip.is_loopback


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return False
    return True


def _target(host: str, port: int | None) -> str:
    shown = f"[{host}]" if ":" in host else host
    return shown if port is None else f"{shown}:{port}"


def _entry(purpose: Purpose, kind: str, host: str, port: int | None, local: bool, outcome: str,
           reason: str | None = None) -> ledger.Entry:
    return ledger.Entry(purpose.part.value, purpose.action, kind, host, port, local, outcome, reason,
                        process=_state["process"])


def _write(entry: ledger.Entry) -> None:
    """Into the ledger; a ledger that cannot be written is said once in the log, and the
    connection (or the refusal) goes on as it would."""
    try:
        ledger.record(entry)
    except Exception as exc:  # whatever went wrong, the connection is not the ledger's to stop
        _warn_once(f"the network ledger cannot be written: {exc}")


def _warn_once(text: str) -> None:
    if text not in _warned:
        _warned.add(text)
        log.warning("%s", text)


# -- bytes -----------------------------------------------------------------------------------

def tcp_bytes(sock: socket.socket) -> tuple[int | None, int | None]:
    """(sent, received) payload bytes of a TCP socket as the kernel counts them; (None, None)
    where it does not say (not Linux, not TCP, an old kernel)."""
    option = getattr(socket, "TCP_INFO", None)
    if option is None:
        return None, None
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, option, 256)
    except OSError:
        return None, None
    if len(info) < 136:
        return None, None
    # tcpi_bytes_received counts the peer's FIN as one byte once it came (these states)
    received = max(0, struct.unpack_from("Q", info, 128)[0] - (info[0] in _PEER_CLOSED))
    if len(info) >= 216:  # tcpi_bytes_sent less tcpi_bytes_retrans (Linux 4.19)
        sent, retrans = struct.unpack_from("QQ", info, 200)
        return sent - retrans, received
    return struct.unpack_from("Q", info, 120)[0], received  # tcpi_bytes_acked (Linux 4.2)


def _take(sock: socket.socket) -> str | None:
    try:
        fd = sock.fileno()
    except OSError:
        return None
    with _open_lock:
        known = _open.get(fd)
        if known is None:
            return None
        entry_id, _ref, peer = known
        try:
            if sock.getpeername()[:2] != peer:  # the fd was reused by another socket
                return None
        except OSError:
            pass  # the peer went away: still the socket recorded on this fd
        del _open[fd]
    return entry_id


def _counted_close(sock: socket.socket) -> None:
    if not _open or not _state["active"] or getattr(_inside, "busy", False):
        return
    entry_id = _take(sock)
    if entry_id is None:
        return
    sent, received = tcp_bytes(sock)
    _inside.busy = True
    try:
        ledger.record_close(entry_id, sent, received)
    except OSError as exc:
        _warn_once(f"the network ledger cannot be written: {exc}")
    finally:
        _inside.busy = False


def _patch_close() -> None:
    original = socket.socket._real_close  # type: ignore[attr-defined]

    def _real_close(self: socket.socket, *args: Any, **kwargs: Any) -> Any:
        try:
            _counted_close(self)
        except Exception:  # counting must never stop a socket from closing
            log.debug("counting a socket's bytes failed", exc_info=True)
        return original(self, *args, **kwargs)

    socket.socket._real_close = _real_close  # type: ignore[attr-defined]


def _count_still_open() -> None:
    with _open_lock:
        still = list(_open.items())
    for _fd, (_entry_id, ref, _peer) in still:
        sock = ref()
        if sock is not None:
            _counted_close_at_exit(sock)


def _counted_close_at_exit(sock: socket.socket) -> None:
    entry_id = _take(sock)
    if entry_id is not None:
        sent, received = tcp_bytes(sock)
        try:
            ledger.record_close(entry_id, sent, received)
        except OSError:
            pass
