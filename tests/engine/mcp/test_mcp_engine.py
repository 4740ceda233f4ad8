"""MCP through the Engine facade (docs/tools.md): servers added, imported, tested and
removed; their tools in the registry (needing approval); a scripted model's call to an MCP
tool through engine.chat.send; faults as error results while the chat goes on; and every server
process gone after Engine.close."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.engine.mcp.conftest import SERVER, server_pids, stdio_entry, wait_gone
from wren.engine.errors import InvalidRequest, NotFound
from wren.engine.events import Delta, ToolApprovalNeeded, ToolCall, ToolResult
from wren.engine.records import MessageStatus, SendOptions
from wren.engine.tools.mcp import McpFailure

pytestmark = pytest.mark.timeout(180)


def run(coro):
    return asyncio.run(coro)


def tool_call(name: str, **arguments) -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


def by_round(*replies: str):
    """The n-th generation of one answer replies with replies[n] (n: results in the prompt)."""

    def reply(prompt: str) -> str:
        return replies[min(prompt.count("<tool_response>"), len(replies) - 1)]

    return reply


async def collect(engine, stream, decisions=()):
    """Every event; approvals answered in turn from `decisions`."""
    decisions = list(decisions)
    out = []
    async for event in stream:
        out.append(event)
        if isinstance(event, ToolApprovalNeeded):
            engine.tools.approve(event.id, decisions.pop(0))
    return out


def test_servers_are_configured_through_the_facade_without_starting(make_engine):
    async def main():
        engine = make_engine()
        info = await engine.tools.add_mcp_server("calc", command="python3", args=["server.py"], env={"K": "v"})
        web = await engine.tools.add_mcp_server("web", url="http://127.0.0.1:9/mcp", headers={"X-Key": "k"}, timeout=5)
        with pytest.raises(InvalidRequest, match="already exists"):
            await engine.tools.add_mcp_server("calc", command="other")
        with pytest.raises(InvalidRequest, match="needs a command"):
            await engine.tools.add_mcp_server("none")
        with pytest.raises(InvalidRequest, match="'url' must be an http"):
            await engine.tools.add_mcp_server("bad", url="file:///x")
        names = await engine.tools.import_mcp_servers('{"mcpServers": {"fs": {"command": "npx", "args": ["-y", "fs"]}}}')
        with pytest.raises(InvalidRequest, match="MCP server 'x' needs 'command'"):
            await engine.tools.import_mcp_servers('{"mcpServers": {"x": {"args": []}}}')
        servers = await engine.tools.mcp_servers()
        off = await engine.tools.set_mcp_server_enabled("fs", False)
        await engine.tools.remove_mcp_server("web")
        with pytest.raises(NotFound):
            await engine.tools.remove_mcp_server("web")
        with pytest.raises(NotFound):
            await engine.tools.mcp_server_log("web")
        left = [s.name for s in await engine.tools.mcp_servers()]
        started = engine.tools.mcp._loop is not None
        await engine.close()
        return info, web, names, servers, off, left, started

    info, web, names, servers, off, left, started = run(main())
    assert (info.name, info.command, info.args, info.env, info.url, info.state, info.tools) == (
        "calc", "python3", ("server.py",), {"K": "v"}, None, "stopped", ())
    assert (web.url, web.headers, web.timeout, web.transport) == ("http://127.0.0.1:9/mcp", {"X-Key": "k"}, 5, "http")
    assert names == ["fs"]
    assert [s.name for s in servers] == ["calc", "web", "fs"] and all(s.state == "stopped" for s in servers)
    assert off.enabled is False
    assert left == ["calc", "fs"]
    assert not started  # configuring starts no thread and no process


@pytest.mark.slow
def test_test_lists_tools_that_need_approval_and_close_stops_every_server(make_engine):
    async def main():
        engine = make_engine()
        await engine.tools.import_mcp_servers(json.dumps({"mcpServers": {"a": stdio_entry(), "off": stdio_entry(disabled=True)}}))
        tested = await engine.tools.test_mcp_server("a")
        await engine.tools.prepare_sources()  # a runs already; off stays off
        tools = await engine.tools.list()
        servers = await engine.tools.mcp_servers()
        log = await engine.tools.mcp_server_log("a")
        await engine.close()
        return tested, tools, servers, server_pids(log)

    tested, tools, servers, pids = run(main())
    assert {t.name for t in tested} >= {"a__add", "a__echo", "a__crash"}
    adder = next(t for t in tested if t.name == "a__add")
    assert (adder.needs_approval, adder.source, adder.enabled) == (True, "mcp:a", True)
    assert adder.parameters["required"] == ["a", "b"]
    assert {t.source for t in tools} == {"builtin", "mcp:a"}
    assert all(t.needs_approval for t in tools if t.source.startswith("mcp:"))
    assert {s.name: (s.state, s.enabled) for s in servers} == {"a": ("running", True), "off": ("stopped", False)}
    assert "a__add" in servers[0].to_dict()["tools"]
    assert len(pids) == 1  # started by the test, kept by prepare_tool_sources
    assert wait_gone(pids) == []  # Engine.close stopped it


@pytest.mark.slow
def test_a_server_that_cannot_start_is_a_clear_error_from_test(make_engine):
    async def main():
        engine = make_engine()
        await engine.tools.add_mcp_server("ghost", command="wren-no-such-mcp-server-command")
        try:
            with pytest.raises(McpFailure, match="MCP server 'ghost' could not start: the command .* was not found"):
                await engine.tools.test_mcp_server("ghost")
            return await engine.tools.mcp_servers()
        finally:
            await engine.close()

    (ghost,) = run(main())
    assert ghost.state == "failed" and "was not found" in ghost.error


@pytest.mark.slow
def test_send_calls_an_mcp_tool_feeds_the_result_back_and_replays_it(make_engine):
    """The issue's "what must be shown": through engine.chat.send with a scripted backend that
    emits a call to an MCP tool, the call waits for approval, runs on the stdio server, the
    result goes back to the model, the answer goes on, events arrive in order, and the
    stored message replays them; a crash mid-call and a hang are error results and the
    chat goes on."""

    async def main():
        engine = make_engine(by_round("Adding. " + tool_call("calc__add", a=2, b=40), "The sum is 42."))
        await engine.tools.add_mcp_server("calc", command=stdio_entry()["command"], args=[str(SERVER)], timeout=2)
        # no prepare_tool_sources here: a Send that names the tool starts its server
        conv = await engine.conversations.create()
        events = await collect(engine, engine.chat.send(conv.id, "add 2 and 40", SendOptions(tools=("calc__add",))),
                               decisions=["once"])
        shown = await engine.conversations.messages(conv.id)
        prompts = list(engine.scripted.loaded[0].prompts)

        # faults: the server crashes mid-call, then a call hangs past the timeout; the chat goes on
        engine.scripted.reply = by_round(tool_call("calc__crash"), tool_call("calc__sleep_forever"), "Still here.")
        faults = await collect(engine, engine.chat.send(conv.id, "break it", SendOptions(tools=("calc__crash", "calc__sleep_forever"))),
                               decisions=["once", "once"])
        # and the server restarted for the next call
        engine.scripted.reply = by_round(tool_call("calc__echo", text="back"), "Done.")
        again = await collect(engine, engine.chat.send(conv.id, "echo", SendOptions(tools=("calc__echo",))),
                              decisions=["once"])
        pids = server_pids(await engine.tools.mcp_server_log("calc"))
        await engine.close()
        return events, shown, prompts, faults, again, pids

    events, shown, prompts, faults, again, pids = run(main())
    order = [type(e).__name__ for e in events if isinstance(e, (ToolCall, ToolApprovalNeeded, ToolResult))]
    assert order == ["ToolCall", "ToolApprovalNeeded", "ToolResult"]  # MCP tools ask first
    call = next(e for e in events if isinstance(e, ToolCall))
    result = next(e for e in events if isinstance(e, ToolResult))
    assert (call.name, call.arguments) == ("calc__add", {"a": 2, "b": 40})
    assert (result.id, result.content, result.is_error) == (call.id, "42.0", False)
    text = "".join(e.text for e in events if isinstance(e, Delta))
    assert text == "Adding. The sum is 42."
    assert "<tool_response>\n42.0\n</tool_response>" in prompts[1]  # fed back in the tool role
    answer = shown[-1]
    assert answer.status is MessageStatus.COMPLETE and answer.content == text
    assert [(m["type"], m["id"]) for m in answer.meta["tools"]] == [("tool_call", call.id), ("tool_result", call.id)]
    assert answer.meta["tools"][1]["content"] == "42.0"

    crash, hang = [e for e in faults if isinstance(e, ToolResult)][:2]
    assert crash.is_error and "closed the connection during 'crash'" in crash.content
    assert hang.is_error and "did not answer 'sleep_forever' within 2 s" in hang.content
    assert "".join(e.text for e in faults if isinstance(e, Delta)).endswith("Still here.")
    echoed = next(e for e in again if isinstance(e, ToolResult))
    assert (echoed.content, echoed.is_error) == ("back", False)
    assert len(pids) == 2  # started again after the crash
    assert wait_gone(pids) == []


def test_a_listed_tool_that_makes_no_usable_spec_is_left_out_and_noted(tmp_path):
    from wren.engine.tools.mcp import McpManager, McpTool
    from wren.engine.tools.mcp_config import McpServerConfig
    from wren.engine.tools.mcp_facade import McpToolSource

    manager = McpManager(tmp_path / "mcp.json")
    run(manager.add(McpServerConfig("s", command="x")))
    listed = (
        McpTool("s", "ok", "s__ok", "fine", {"type": "object", "properties": {"q": {"type": "string"}}}),
        McpTool("s", "x" * 70, "s__" + "x" * 70, "a name longer than models take", {"type": "object"}),
        McpTool("s", "bad", "s__bad", "not JSON schema", {"type": "object", "properties": {"q": {"type": 5}}}),
    )
    manager.cached_tools = lambda name: listed  # what the server listed when it last ran
    source = McpToolSource(manager, "s")
    specs = source.specs()
    assert [(s.name, s.needs_approval) for s in specs] == [("s__ok", True)]
    assert source.specs() == specs  # the same listing is checked once
    log = manager.log("s")
    assert "tool 'xxxxxxxx" in log and "tool 'bad' left out: tool s__bad: its parameter schema is not valid" in log
    assert log.count("left out") == 2
