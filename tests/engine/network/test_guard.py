"""The audit-hook guard on real sockets: what it records (part, action, bytes as the kernel
counts them), what the offline lock refuses and says, and the ledger's cap and rotation."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest

from tests.engine.network.conftest import entries
from wren.engine.network import guard, ledger, lock
from wren.engine.network.purpose import Part, acting

TEST_NET = "192.0.2.1"  # TEST-NET-1: never routed


def _echo_server(reply: bytes) -> tuple[socket.socket, threading.Thread, list[int]]:
    """A loopback server that reads until the client stops sending, answers `reply`, closes."""
    server = socket.create_server(("127.0.0.1", 0))
    got: list[int] = []

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            total = 0
            while chunk := conn.recv(65536):
                total += len(chunk)
            got.append(total)
            conn.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return server, thread, got


def test_a_connection_is_recorded_with_its_purpose_and_the_kernels_byte_counts(guarded):
    server, thread, got = _echo_server(b"r" * 5000)
    port = server.getsockname()[1]
    with acting(Part.MODEL_DOWNLOAD, "model pull of someone/model"):
        client = socket.create_connection(("127.0.0.1", port))
        client.sendall(b"s" * 12345)
        client.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := client.recv(65536):
            received += chunk
        client.close()
    thread.join(10)
    server.close()
    assert got == [12345] and len(received) == 5000
    [entry] = [e for e in entries() if e.kind == "connect"]
    assert (entry.part, entry.action, entry.host, entry.port) == ("model download", "model pull of someone/model",
                                                                   "127.0.0.1", port)
    assert entry.loopback and entry.outcome == "allowed" and entry.process == "test"
    if guard.tcp_bytes(socket.socket()) == (None, None) and not hasattr(socket, "TCP_INFO"):
        pytest.skip("this system does not count a socket's bytes")
    assert (entry.sent, entry.received) == (12345, 5000)  # payload only; the peer's FIN is not a byte
    assert entry.closed is not None


def test_a_connection_no_code_named_is_recorded_as_not_attributed(guarded):
    server = socket.create_server(("127.0.0.1", 0))
    socket.create_connection(server.getsockname()).close()
    server.close()
    connects = [e for e in entries() if e.kind == "connect"]
    assert [(e.part, e.loopback) for e in connects] == [("not attributed", True)]
    listens = [e for e in entries() if e.kind == "listen"]
    assert listens and listens[0].host == "127.0.0.1"


def test_an_asyncio_task_keeps_the_purpose_of_the_code_that_started_it(guarded):
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    async def main() -> None:
        async def connect() -> None:
            _reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            await writer.wait_closed()

        with acting(Part.REMOTE_PROVIDER, "an answer from the remote model fake/chat"):
            task = asyncio.ensure_future(connect())
        await task

    asyncio.run(main())
    server.close()
    [entry] = [e for e in entries() if e.kind == "connect"]
    assert (entry.part, entry.action) == ("remote provider", "an answer from the remote model fake/chat")


def test_the_lock_refuses_what_is_not_loopback_and_says_what_and_why(locked):
    with acting(Part.REMOTE_PROVIDER, "an answer from the remote model far/away"):
        with pytest.raises(lock.NetworkLocked) as refused:
            socket.create_connection((TEST_NET, 443), timeout=2)
        with pytest.raises(lock.NetworkLocked) as looked_up:
            socket.getaddrinfo("example.com", 443)
        raw = socket.socket()
        with pytest.raises(lock.NetworkLocked):
            raw.connect((TEST_NET, 80))  # an address given straight to connect, no lookup
        raw.close()
    said = str(refused.value)
    assert f"refused to connect to {TEST_NET}:443" in said
    assert "remote provider: an answer from the remote model far/away" in said
    assert "`wren privacy offline off`" in said
    assert "refused to look up example.com:443" in str(looked_up.value)
    refusals = [(e.kind, e.host, e.port, e.outcome) for e in entries()]
    assert refusals == [("connect", TEST_NET, 443, "refused"), ("lookup", "example.com", 443, "refused"),
                        ("connect", TEST_NET, 80, "refused")]
    assert all(not e.loopback and e.part == "remote provider" and e.reason for e in entries())


def test_the_lock_lets_loopback_through_and_refuses_listening_on_every_interface(locked):
    server = socket.create_server(("127.0.0.1", 0))
    socket.create_connection(server.getsockname(), timeout=2).close()
    server.close()
    with pytest.raises(OSError, match="refused to listen on 0.0.0.0"):  # create_server rebuilds the error
        socket.create_server(("0.0.0.0", 0))
    kinds = [(e.kind, e.outcome, e.loopback) for e in entries()]
    assert kinds == [("listen", "allowed", True), ("connect", "allowed", True), ("listen", "refused", False)]


def test_the_environment_lock_cannot_be_turned_off_from_wren(guarded, monkeypatch):
    monkeypatch.setenv("WREN_OFFLINE", "1")
    assert lock.state().source == "environment"
    with pytest.raises(Exception, match="set by WREN_OFFLINE=1"):
        lock.set_offline(False)
    with pytest.raises(lock.NetworkLocked, match=r"set by WREN_OFFLINE=1 in the environment.*unset WREN_OFFLINE"):
        socket.create_connection((TEST_NET, 80), timeout=2)
    monkeypatch.delenv("WREN_OFFLINE")
    assert not lock.state().on


def test_an_inert_guard_records_and_refuses_nothing(wren_home):
    guard.install("test")
    guard.deactivate()
    lock.set_offline(True)
    with pytest.raises(OSError) as failed:
        socket.create_connection(("127.0.0.1", 1), timeout=2)  # nobody listens on port 1
    assert not isinstance(failed.value, lock.NetworkLocked)
    assert entries() == []


def test_the_ledger_is_capped_and_rotated(wren_home, monkeypatch):
    monkeypatch.setattr(ledger, "MAX_BYTES", 4000)
    for n in range(200):
        ledger.record(ledger.Entry("model download", f"pull {n}", "connect", "127.0.0.1", n, True, "allowed"))
    folder = ledger.folder()
    files = sorted(p.name for p in folder.glob("ledger*.jsonl"))
    assert files == ["ledger.1.jsonl", "ledger.2.jsonl", "ledger.jsonl"]
    assert all(p.stat().st_size <= 4000 for p in folder.glob("ledger*.jsonl"))
    kept = ledger.entries()
    assert 0 < len(kept) < 200 and kept[-1].action == "pull 199"  # the oldest went, the newest stayed
    assert [e.port for e in kept] == sorted(e.port for e in kept)


def test_a_line_that_is_not_wrens_is_skipped(wren_home):
    ledger.record(ledger.Entry("MCP server", "MCP server 'a'", "connect", "127.0.0.1", 1, True, "allowed"))
    with open(ledger.folder() / ledger.FILE, "a") as out:
        out.write('{"id": "x", "part": 3}\nnot json\n{"cut": \n')
    assert [e.action for e in ledger.entries()] == ["MCP server 'a'"]


def test_a_unix_socket_is_recorded_only_when_wren_named_it(guarded, tmp_path):
    from wren.engine import engine_sockets

    path = tmp_path / "engine.sock"

    async def main() -> None:
        server = await asyncio.start_unix_server(lambda r, w: w.close(), str(path))
        line = await engine_sockets.connect(path)  # `wren ask` reaching a running engine
        assert line is not None
        line[1].close()
        _r, writer = await asyncio.open_unix_connection(str(path))  # a socket nobody named (a session bus)
        writer.close()
        server.close()
        await server.wait_closed()

    asyncio.run(main())
    [entry] = entries()
    assert (entry.part, entry.host, entry.port, entry.loopback) == ("Wren's own engine", str(path), None, True)


def test_a_ledger_that_cannot_be_written_does_not_stop_a_connection(guarded, caplog):
    (guarded / "network").write_text("a file where the ledger's folder should be")
    server = socket.create_server(("127.0.0.1", 0))
    socket.create_connection(server.getsockname(), timeout=2).close()  # goes on as it would
    server.close()
    assert "the network ledger cannot be written" in caplog.text


_WRITER = """
import sys
from wren.engine.network import ledger
for n in range(150):
    ledger.record(ledger.Entry("MCP server", f"writer {sys.argv[1]} entry {n}", "connect", "127.0.0.1", n, True,
                               "allowed", process=sys.argv[1]))
"""


def test_processes_writing_at_once_leave_whole_lines(wren_home):
    import os
    import subprocess
    import sys

    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, f"p{n}"], env={**os.environ}) for n in range(4)]
    assert [w.wait(120) for w in writers] == [0, 0, 0, 0]
    lines = (ledger.folder() / ledger.FILE).read_text().splitlines()
    assert len(lines) == 600 and len(ledger.entries()) == 600  # every line whole, none lost


def test_the_lock_refuses_a_reverse_lookup_but_lets_an_address_reach_its_connect(locked):
    with pytest.raises(lock.NetworkLocked, match=f"refused to look up {TEST_NET}"):
        socket.gethostbyaddr(TEST_NET)  # asks the DNS for the address's name
    assert socket.getaddrinfo(TEST_NET, 80)  # an address resolves to itself: no one is asked
    assert [(e.kind, e.host) for e in entries()] == [("lookup", TEST_NET)]


def test_an_inert_guard_writes_nothing_when_a_recorded_socket_closes_later(guarded):
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname(), timeout=2)
    before = (ledger.folder() / ledger.FILE).read_text()
    guard.deactivate()  # as after a test: another test's data folder must not get its close line
    client.close()
    server.close()
    assert (ledger.folder() / ledger.FILE).read_text() == before
