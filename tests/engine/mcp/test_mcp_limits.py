"""Limits on what an MCP server sends, with a real stdio server (mcp_limits_server.py): a
result past the message limit is reported as too large, with its size and the limit, at once
(it was read in quadratic time and reported as a timeout after the call's whole timeout),
and a large result within the limit is read in linear time."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import pytest

from wren.engine.tools.mcp import MAX_RESULT_CHARS, McpManager
from wren.engine.tools.mcp_config import server_from_entry
from wren.engine.tools.mcp_stdio import MAX_MESSAGE_BYTES, RESULT_TOO_LARGE, read_messages

SERVER = Path(__file__).with_name("mcp_limits_server.py")


def _entry(**extra) -> dict:
    return {"command": sys.executable, "args": [str(SERVER)], **extra}


@pytest.fixture(scope="module")
def limits(tmp_path_factory):
    manager = McpManager(tmp_path_factory.mktemp("mcp") / "mcp.json", start_timeout=60)
    asyncio.run(manager.add(server_from_entry("lim", _entry(timeout=45))))
    yield manager
    asyncio.run(manager.aclose())


def test_a_result_past_the_limit_is_reported_as_too_large_at_once(limits):
    started = time.monotonic()
    content, is_error = asyncio.run(limits.call("lim__big", {"megabytes": 50}))
    took = time.monotonic() - started
    assert is_error
    assert content == ("MCP server 'lim' answered 'big', but the result was too large (50 MB; the limit is "
                       f"{MAX_MESSAGE_BYTES >> 20} MB); Wren dropped the answer"), content
    assert took < 30, took  # the call's timeout is 45 s: it was not waited out
    assert "the result was too large (50 MB" in limits.log("lim")
    # the connection goes on
    assert asyncio.run(limits.call("lim__big", {"megabytes": 0.0001})) == ("x" * 104, False)


def test_a_large_result_within_the_limit_is_read_and_cut(limits):
    started = time.monotonic()
    content, is_error = asyncio.run(limits.call("lim__big", {"megabytes": 24}))
    took = time.monotonic() - started
    assert not is_error, content
    assert content.startswith("x" * 1000) and f"the first {MAX_RESULT_CHARS:,} are kept" in content
    assert took < 30, took


def _run_reader(chunks: list[bytes], limit: int) -> list:
    got: list = []

    async def source():
        for chunk in chunks:
            yield chunk

    async def deliver(message):
        got.append(message)

    asyncio.run(read_messages(source(), deliver, json.loads, limit=limit))
    return got


@pytest.mark.serial  # a wall-clock bound: runs with the machine to itself (make test)
def test_the_reader_is_linear_in_a_long_line():
    line = b'{"jsonrpc": "2.0", "id": 7, "result": "' + b"y" * (30 << 20) + b'"}\n'
    chunks = [line[i:i + 65536] for i in range(0, len(line), 65536)]
    started = time.monotonic()
    got = _run_reader(chunks, 64 << 20)
    assert time.monotonic() - started < 5  # the SDK's join-and-split took minutes for this
    assert len(got) == 1 and got[0]["id"] == 7 and len(got[0]["result"]) == 30 << 20


@pytest.mark.parametrize("head", [True, False], ids=["id-first", "id-last"])
def test_an_oversized_line_answers_its_request_and_the_next_line_is_read(head):
    body = '"result": {"text": "' + "z" * 5000 + '"}'
    big = ('{"jsonrpc": "2.0", "id": 42, ' + body + "}") if head else ("{" + body + ', "jsonrpc": "2.0", "id": 42}')
    after = '{"jsonrpc": "2.0", "id": 43, "result": {}}'
    data = (big + "\n" + after + "\n").encode()
    got = _run_reader([data[i:i + 100] for i in range(0, len(data), 100)], 1000)
    error = got[0].message
    assert error.id == 42 and error.error.code == RESULT_TOO_LARGE
    assert error.error.message == f"the result was too large ({len(big.encode()):,} bytes; the limit is 1,000 bytes)"
    assert got[1] == {"jsonrpc": "2.0", "id": 43, "result": {}}
