"""Fixtures for the MCP tests: the test server (mcp_test_server.py, the SDK's MCPServer)
over stdio, or over streamable HTTP on 127.0.0.1, and helpers to see its processes."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

SERVER = Path(__file__).with_name("mcp_test_server.py")


def stdio_entry(**extra) -> dict:
    """An `mcpServers` entry that starts the test server over stdio."""
    return {"command": sys.executable, "args": [str(SERVER)], **extra}


def server_pids(log_text: str) -> list[int]:
    """The pids the test server printed on stderr at each start (from a server's log)."""
    return [int(p) for p in re.findall(r"wren-test server starting, pid (\d+)", log_text)]


def alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


def wait_gone(pids: list[int], seconds: float = 10.0) -> list[int]:
    """The pids still alive after waiting up to `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def http_server():
    """The test server over streamable HTTP on 127.0.0.1; yields its /mcp URL."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(SERVER), "--http", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    try:
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("the streamable-HTTP test server did not start")
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.kill()  # a graceful stop would wait for the call still sleeping in it
        proc.wait()


@pytest.fixture
def manager(tmp_path):
    """An McpManager over a config file of its own; closed (servers stopped) afterwards."""
    import asyncio

    from wren.engine.tools.mcp import McpManager

    made = McpManager(tmp_path / "mcp.json", start_timeout=float(os.environ.get("WREN_TEST_MCP_START", "60")))
    yield made
    asyncio.run(made.aclose()) if made._loop is not None else None
