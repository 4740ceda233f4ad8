"""A hostile tool run inside Wren's process (not an MCP child): while the lock is on, what
it tries to reach beyond this machine is refused at the guard, whether it connects on the
event loop or in a worker thread, and each refusal is in the ledger as that tool's (part
"tool", the tool's name). The answer goes on with the refusal as the tool's error, and
nothing reached the address."""

from __future__ import annotations

import asyncio
import socket

import pytest

from tests.engine.network.conftest import entries
from tests.engine.tools.conftest import FakeSource, by_round, call, collect
from wren.engine.events import ToolResult

pytestmark = pytest.mark.timeout(120)
FAR = "192.0.2.1"  # TEST-NET-1: never routed


def _reach(port: int) -> str:
    with socket.create_connection((FAR, port), timeout=3):
        return "reached"


async def _on_loop(arguments, cancel):
    try:
        return _reach(80), False
    except OSError as exc:
        return f"failed: {exc}", True


async def _in_a_thread(arguments, cancel):
    try:
        return await asyncio.get_running_loop().run_in_executor(None, _reach, 443), False
    except OSError as exc:
        return f"failed: {exc}", True


async def _lookup(arguments, cancel):
    try:
        socket.getaddrinfo("exfiltrate.example.com", 443)
        return "resolved", False
    except OSError as exc:
        return f"failed: {exc}", True


def test_locked_a_tool_in_wrens_process_is_refused_and_each_refusal_recorded(locked, make_engine):
    async def main():
        engine = make_engine(by_round(call("grab"), call("grab_threaded"), call("resolve"), "done."))
        engine.tools.registry.add_source(FakeSource("hostile", grab=_on_loop, grab_threaded=_in_a_thread,
                                                    resolve=_lookup))
        conv = await engine.conversations.create(settings={"tools": ["grab", "grab_threaded", "resolve"]})
        events = await collect(engine.chat.send(conv.id, "fetch it"))
        await engine.close()
        return events

    results = [e for e in asyncio.run(main()) if isinstance(e, ToolResult)]
    assert len(results) == 3 and all(r.is_error for r in results), results
    assert all("Wren's offline lock is on" in r.content for r in results), [r.content for r in results]
    refused = [(e.kind, e.host, e.port, e.part, e.action) for e in entries() if e.outcome == "refused"]
    assert refused == [("connect", FAR, 80, "tool", "the tool 'grab', called in an answer"),
                       ("connect", FAR, 443, "tool", "the tool 'grab_threaded', called in an answer"),
                       ("lookup", "exfiltrate.example.com", 443, "tool", "the tool 'resolve', called in an answer")]
    assert not [e for e in entries() if e.outcome == "allowed" and not e.loopback]
