"""A server with thousands of tools, through the real stdio server (mcp_limits_server.py):
looking every tool up by name, as an answer with `--tools all` does, is fast (it rebuilt every
spec per name: 79 s for 5,000 tools), and a listing that changes is followed."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

from wren.engine.tools.mcp import McpManager
from wren.engine.tools.mcp_config import server_from_entry
from wren.engine.tools.mcp_facade import McpToolSource
from wren.engine.tools.registry import ToolRegistry

SERVER = Path(__file__).with_name("mcp_limits_server.py")
TEST_SERVER = Path(__file__).with_name("mcp_test_server.py")


@pytest.mark.serial  # a wall-clock bound: runs with the machine to itself (make test)
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


def _engine_with_window(wren_home, tmp_path, context: int, reply: str = "Fine."):
    from tests.fixtures.tiny import make_tiny_model_dir, tiny_engine
    from wren.engine.inference.backends.scripted import ScriptedBackend

    model = make_tiny_model_dir(tmp_path / f"tiny-{context}", max_position_embeddings=context)
    scripted = ScriptedBackend(reply)
    return tiny_engine(wren_home, model, backend_factory=lambda name: scripted)


def _ask_with_every_tool(wren_home, tmp_path, tools: int, context: int):
    from wren.engine.events import AnswerNotice, Finished
    from wren.engine.records import SendOptions

    async def main():
        engine = _engine_with_window(wren_home, tmp_path, context)
        try:
            await engine.tools.add_mcp_server("many", command=sys.executable, args=[str(SERVER)],
                                        env={"WREN_TEST_MCP_TOOLS": str(tools)})
            await engine.tools.prepare_sources()
            names = tuple(t.name for t in await engine.tools.list() if t.source == "mcp:many")
            conv = await engine.conversations.create()
            started = time.monotonic()
            events = [e async for e in engine.chat.send(conv.id, "Hello", SendOptions(tools=names))]
            took = time.monotonic() - started
            stored = (await engine.conversations.messages(conv.id))[-1]
            return names, events, took, stored
        finally:
            await engine.close()

    names, events, took, stored = asyncio.run(main())
    notices = [e for e in events if isinstance(e, AnswerNotice)]
    assert isinstance(events[-1], Finished)
    return names, notices, took, stored


def test_tools_past_the_window_are_dropped_with_a_notice(wren_home, tmp_path):
    """300 tools in a 4,096-token window: the first that fit are offered, and the user is
    told how many were left out and why (every tool was dropped, and only the log said so)."""
    names, notices, took, stored = _ask_with_every_tool(wren_home, tmp_path, 300, 4096)
    assert len(names) == 301
    assert len(notices) == 1 and notices[0].about.value == "tools_dropped", notices
    text = notices[0].text
    kept = int(text.split("the first ")[1].split(".")[0].replace(",", ""))
    assert 1 <= kept < 301 and text.startswith(f"{301 - kept:,} of the 301 tools were left out")
    assert "context window (4,096 tokens)" in text
    assert stored.meta["notices"] == [{"about": "tools_dropped", "text": text}]
    assert took < 60, took


def test_tools_that_fit_are_all_offered_without_a_notice(wren_home, tmp_path):
    names, notices, _, _ = _ask_with_every_tool(wren_home, tmp_path, 3, 32768)
    assert len(names) == 4 and notices == []


def _plan(count: int, forced: str | None = None):
    from wren.engine.tools.prompt import ToolPlan
    from wren.engine.tools.registry import ToolSpec

    return ToolPlan([(ToolSpec(f"t{i}", "d"), None) for i in range(count)], "hermes", True, forced=forced)


def _encode(plan) -> list[int]:  # 100 tokens of chat, 50 per tool
    return [0] * (100 + 50 * len(plan.entries))


def test_the_cut_keeps_the_forced_tool_and_leaves_a_quarter_of_the_window():
    from wren.engine.tools.fit import fit_tools

    fitted = fit_tools(_plan(100, forced="t99"), _encode, 1000)
    kept = [spec.name for spec, _ in fitted.plan.entries]
    assert kept[0] == "t99" and len(kept) == 13  # 100 + 13 x 50 <= 750, a quarter of 1,000 left
    assert len(fitted.prompt_ids) == 750 and fitted.offered == 100
    assert fitted.note.startswith("87 of the 100 tools were left out")


def test_when_not_one_tool_fits_none_is_offered_and_the_note_says_so():
    from wren.engine.tools.fit import fit_tools

    fitted = fit_tools(_plan(5), _encode, 120)
    assert fitted.plan is None and fitted.prompt_ids == []
    assert fitted.note == ("None of the 5 tools were offered to the model: their descriptions do not fit this "
                           "model's context window (120 tokens).")
