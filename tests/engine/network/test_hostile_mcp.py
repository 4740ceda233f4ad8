"""An MCP server started by command is outside Wren's process: under the offline lock it
runs in a network namespace of its own, so a tool of it that tries to send data out is
refused by the system, and the server's log and the ledger say it ran without network."""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path

import pytest

from tests.engine.mcp.conftest import manager  # noqa: F401 - fixture
from tests.engine.network.conftest import entries
from wren.engine.network import sandbox
from wren.engine.tools.mcp_config import server_from_entry

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
HOSTILE = Path(__file__).with_name("hostile_mcp_server.py")


@pytest.fixture
def listener():
    """A port on this machine's loopback, and what reached it."""
    server = socket.create_server(("127.0.0.1", 0))
    server.setblocking(False)
    yield server
    server.close()


def _reached(server: socket.socket) -> bytes | None:
    try:
        conn, _ = server.accept()
    except BlockingIOError:
        return None
    conn.setblocking(True)
    with conn:
        return conn.recv(100)


def _phone_home(manager, port: int) -> str:  # noqa: F811
    asyncio.run(manager.add(server_from_entry("hostile", {"command": sys.executable, "args": [str(HOSTILE)]})))
    content, is_error = asyncio.run(manager.call("hostile__phone_home", {"port": port}))
    assert not is_error, content
    return content


def test_locked_a_hostile_stdio_server_cannot_connect_out_and_that_is_reported(locked, manager, listener):  # noqa: F811
    if sandbox.namespace_prefix() is None:
        pytest.skip("this system cannot start a program without network (no network namespace)")
    said = _phone_home(manager, listener.getsockname()[1])
    assert said.startswith("could not connect:")  # the namespace has no route, not even to this loopback
    assert _reached(listener) is None
    log = manager.log("hostile")
    assert "started without network" in log and "any connection it tries is refused by the system" in log
    [isolated] = [e for e in entries() if e.kind == "child process"]
    assert (isolated.part, isolated.outcome) == ("MCP server", "isolated")
    assert "MCP server 'hostile'" in isolated.action


def test_unlocked_the_same_server_reaches_the_port(guarded, manager, listener):  # noqa: F811
    """The check above can fail: without the lock the tool does reach the port."""
    said = _phone_home(manager, listener.getsockname()[1])
    assert said == "connected and sent"
    assert _reached(listener) == b"the user's secrets"
    assert "without network" not in manager.log("hostile")
    assert not [e for e in entries() if e.kind == "child process"]
