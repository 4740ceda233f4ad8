"""A server with thousands of tools, through the real stdio server (mcp_limits_server.py):
looking every tool up by name, as an answer with `--tools all` does, is fast (it rebuilt every
spec per name: 79 s for 5,000 tools), and a listing that changes is followed."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from wren.engine.tools.mcp import McpManager
from wren.engine.tools.mcp_config import server_from_entry
from wren.engine.tools.mcp_facade import McpToolSource
from wren.engine.tools.registry import ToolRegistry

SERVER = Path(__file__).with_name("mcp_limits_server.py")
TEST_SERVER = Path(__file__).with_name("mcp_test_server.py")


def test_looking_up_two_thousand_tools_by_name_is_fast(tmp_path):
    manager = McpManager(tmp_path / "mcp.json", start_timeout=120)
    entry = {"command": sys.executable, "args": [str(SERVER)], "env": {"WREN_TEST_MCP_TOOLS": "2000"}}

    async def scenario():
        await manager.add(server_from_entry("many", entry))
        listed = await manager.list_tools()
        registry = ToolRegistry()
        started = time.monotonic()
        registry.add_source(McpToolSource(manager, "many"))
        names = registry.names()
        missing = [n for n in names if registry.find(n) is None]  # as the answer's tool plan checks them
        entries = registry.entries()
        return len(listed), names, missing, len(entries), time.monotonic() - started

    try:
        listed, names, missing, entries, took = asyncio.run(scenario())
    finally:
        asyncio.run(manager.aclose())
    assert listed == 2001 and len(names) == 2001 and entries == 2001
    assert missing == []
    assert took < 3.0, f"{took:.1f} s to check 2,001 tools"  # it was about 20 s here


def test_a_changed_listing_is_followed_by_the_lookups(tmp_path):
    manager = McpManager(tmp_path / "mcp.json", start_timeout=60)

    async def scenario():
        await manager.add(server_from_entry("calc", {"command": sys.executable, "args": [str(TEST_SERVER)]}))
        await manager.list_tools()
        registry = ToolRegistry()
        registry.add_source(McpToolSource(manager, "calc"))
        before = registry.find("calc__late"), registry.find("calc__add")
        assert await manager.call("calc__grow", {}) == ("grew", False)  # the server adds `late`
        deadline = time.monotonic() + 10
        while registry.find("calc__late") is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return before, registry.find("calc__late")

    try:
        (late_before, add_before), late_after = asyncio.run(scenario())
    finally:
        asyncio.run(manager.aclose())
    assert late_before is None and add_before is not None
    assert late_after is not None and late_after[1].name == "mcp:calc"
