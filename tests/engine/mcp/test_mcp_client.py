"""The MCP client against the test server (the SDK's MCPServer) over stdio and streamable
HTTP: listing, calls, server notifications, and the faults Wren must survive (a call that
never answers, a server that exits mid-call, a 10 MB result, a malformed reply, a command
that does not exist), each a clear error result while the other servers keep working."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.engine.mcp.conftest import server_pids, stdio_entry, wait_gone
from wren.engine.tools.mcp import MAX_RESULT_CHARS, McpFailure
from wren.engine.tools.mcp_config import server_from_entry

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]  # they start server processes

EXPECTED_TOOLS = {"add", "echo", "sleep_forever", "crash", "huge", "malformed", "chatty", "grow"}


def run(coro):
    return asyncio.run(coro)


def add(manager, name, entry):
    run(manager.add(server_from_entry(name, entry)))


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One stdio server ("calc", calls time out after 1 s) for the tests that leave it
    running: each server start costs a Python start and the SDK's import."""
    from wren.engine.tools.mcp import McpManager

    made = McpManager(tmp_path_factory.mktemp("mcp") / "mcp.json", start_timeout=60)
    run(made.add(server_from_entry("calc", stdio_entry(timeout=1, env={"WREN_TEST_TOKEN": "sekrit-token-value"}))))
    yield made
    run(made.aclose())


def test_stdio_server_starts_on_first_use_lists_and_calls(shared):
    assert [s.state for s in shared.states()] == ["stopped"]  # configured is not started
    tools = run(shared.list_tools())
    assert {t.name for t in tools} >= EXPECTED_TOOLS
    assert {t.qualified for t in tools} >= {f"calc__{n}" for n in EXPECTED_TOOLS}
    adder = next(t for t in tools if t.name == "add")
    assert adder.description == "Add two numbers."
    assert set(adder.input_schema["properties"]) == {"a", "b"}
    assert run(shared.call("calc__add", {"a": 2, "b": 40})) == ("42.0", False)
    assert run(shared.call("calc__echo", {"text": "héllo ✓"})) == ("héllo ✓", False)
    # the server's own refusal (bad arguments) is an error result, not a fault
    content, is_error = run(shared.call("calc__add", {"a": "x"}))
    assert is_error and "validation error" in content
    content, is_error = run(shared.call("calc__nope", {}))
    assert is_error and "has no tool named 'nope'" in content and "add, echo" in content
    state = shared.states()[0]
    assert (state.state, state.error) == ("running", None) and len(state.tools) >= len(EXPECTED_TOOLS)


def test_log_ring_holds_stderr_log_messages_and_what_wren_did(shared):
    assert run(shared.call("calc__chatty", {})) == ("said hello", False)
    text = shared.log("calc")
    assert "stderr: wren-test server starting, pid" in text
    assert "token [redacted]" in text and "sekrit-token-value" not in text  # env values are masked
    assert "log warning: chatty says hello" in text
    assert "wren: running (" in text and "8 tools" in text


@pytest.mark.serial  # a wall-clock bound: runs with the machine to itself (make test)
def test_a_call_that_never_answers_times_out_and_the_server_goes_on(shared):
    run(shared.list_tools())
    started = time.monotonic()
    content, is_error = run(shared.call("calc__sleep_forever", {}))
    took = time.monotonic() - started
    assert is_error and content.startswith("MCP server 'calc' did not answer 'sleep_forever' within 1 s")
    assert took < 5
    assert run(shared.call("calc__add", {"a": 1, "b": 1})) == ("2.0", False)
    assert "timed out after 1 s" in shared.log("calc")


def test_cancelling_a_call_cancels_it_on_the_server(shared):
    async def cancel_soon():
        task = asyncio.ensure_future(shared.call("calc__sleep_forever", {}))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(cancel_soon())
    assert run(shared.call("calc__add", {"a": 1, "b": 1})) == ("2.0", False)
    assert "call to 'sleep_forever' cancelled" in shared.log("calc")


def test_a_malformed_result_is_a_clear_error_and_the_server_goes_on(shared):
    content, is_error = run(shared.call("calc__malformed", {}))
    assert is_error
    assert content.startswith("MCP server 'calc' sent a malformed result for 'malformed'")
    assert "valid list" in content
    assert run(shared.call("calc__echo", {"text": "fine"})) == ("fine", False)


def test_a_ten_megabyte_result_is_cut_with_a_note(shared):
    run(shared.add(server_from_entry("big", stdio_entry())))  # calc's 1 s timeout is too short for 10 MB
    content, is_error = run(shared.call("big__huge", {}))
    assert not is_error
    assert content.startswith("x" * 1000)
    assert f"the tool returned {10 * 1024 * 1024:,} characters; the first {MAX_RESULT_CHARS:,} are kept" in content
    assert len(content) < MAX_RESULT_CHARS + 200
    assert run(shared.call("big__add", {"a": 1, "b": 1})) == ("2.0", False)
    run(shared.remove("big"))


def test_tools_list_changed_refreshes_the_listing(shared):
    run(shared.list_tools())
    seen = []
    shared.add_listener(seen.append)
    assert run(shared.call("calc__grow", {})) == ("grew", False)
    deadline = time.monotonic() + 10
    while "late" not in {t.name for t in shared.cached_tools("calc")} and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "late" in {t.name for t in shared.cached_tools("calc")}
    assert "calc" in seen
    assert run(shared.call("calc__late", {})) == ("late tool ran", False)
    assert len(server_pids(shared.log("calc"))) == 1  # every test above used the one process


def test_a_crash_mid_call_is_an_error_the_next_call_restarts_it_and_others_go_on(manager):
    add(manager, "fragile", stdio_entry())
    add(manager, "steady", stdio_entry())
    run(manager.list_tools())
    steady_pid = server_pids(manager.log("steady"))
    content, is_error = run(manager.call("fragile__crash", {}))
    assert is_error
    assert "MCP server 'fragile' closed the connection during 'crash'" in content
    assert "it may have crashed" in content and "starts it again on the next call" in content
    assert "crash: exiting mid-call" in content  # its last words on stderr
    states = {s.config.name: s for s in manager.states()}
    assert states["fragile"].state == "failed" and "closed during a call" in states["fragile"].error
    assert states["steady"].state == "running"
    assert run(manager.call("steady__add", {"a": 2, "b": 3})) == ("5.0", False)
    assert server_pids(manager.log("steady")) == steady_pid  # untouched
    assert run(manager.call("fragile__add", {"a": 1, "b": 2})) == ("3.0", False)  # restarted
    pids = server_pids(manager.log("fragile"))
    assert len(pids) == 2 and pids[0] != pids[1]
    assert {s.config.name: s.state for s in manager.states()} == {"fragile": "running", "steady": "running"}


def test_a_command_that_does_not_exist_fails_clearly_and_others_go_on(manager):
    add(manager, "ghost", {"command": "wren-no-such-mcp-server-command"})
    add(manager, "calc", stdio_entry())
    tools = run(manager.list_tools())  # the broken one is left out of the listing
    assert {t.server for t in tools} == {"calc"}
    states = {s.config.name: s for s in manager.states()}
    assert states["ghost"].state == "failed"
    assert "'wren-no-such-mcp-server-command' was not found" in states["ghost"].error
    content, is_error = run(manager.call("ghost__anything", {}))
    assert is_error and content.startswith("MCP server 'ghost' could not start: the command")
    with pytest.raises(McpFailure, match="was not found"):
        run(manager.test("ghost"))
    assert run(manager.call("calc__add", {"a": 1, "b": 1})) == ("2.0", False)


def test_a_server_that_exits_at_start_or_never_answers_fails_within_the_timeout(manager):
    import sys

    add(manager, "quits", {"command": sys.executable, "args": ["-c", "import sys; print('bye', file=sys.stderr)"]})
    manager.start_timeout = 3
    content, is_error = run(manager.call("quits__x", {}))
    assert is_error and "could not start" in content
    assert "stderr: bye" in manager.log("quits")
    add(manager, "mute", {"command": sys.executable, "args": ["-c", "import time; time.sleep(60)"]})
    started = time.monotonic()
    content, is_error = run(manager.call("mute__x", {}))
    assert is_error and "did not start within 3 s" in content
    assert time.monotonic() - started < 3 + 8


def test_every_server_process_stops_on_close(manager):
    add(manager, "a", stdio_entry())
    add(manager, "b", stdio_entry())
    run(manager.list_tools())
    pids = server_pids(manager.log("a")) + server_pids(manager.log("b"))
    assert len(pids) == 2
    started = time.monotonic()
    run(manager.aclose())
    assert time.monotonic() - started < 10
    assert wait_gone(pids) == []
    with pytest.raises(McpFailure, match="Wren is closing"):
        run(manager.list_tools())


def test_streamable_http_server(manager, http_server):
    add(manager, "wrong", {"url": http_server.replace("/mcp", "/nope")})  # not its MCP address
    content, is_error = run(manager.call("wrong__add", {}))
    assert is_error and "answered 'Not Found'; is it the server's streamable HTTP address" in content
    add(manager, "web", {"url": http_server, "timeout": 2})
    tools = run(manager.list_tools(["web"]))
    assert {t.name for t in tools} == EXPECTED_TOOLS
    assert run(manager.call("web__add", {"a": 20, "b": 22})) == ("42.0", False)
    content, is_error = run(manager.call("web__sleep_forever", {}))
    assert is_error and "did not answer 'sleep_forever' within 2 s" in content
    assert run(manager.call("web__chatty", {})) == ("said hello", False)
    assert "chatty says hello" in manager.log("web")
    content, is_error = run(manager.call("web__huge", {}))
    assert not is_error and "the first 200,000 are kept" in content
    content, is_error = run(manager.call("web__crash", {}))  # the whole HTTP server exits
    assert is_error and "MCP server 'web' closed the connection during 'crash'" in content
    assert {s.config.name: s.state for s in manager.states()}["web"] == "failed"
    content, is_error = run(manager.call("web__add", {"a": 1, "b": 1}))  # tried again: nobody there now
    assert is_error and f"could not start: cannot connect to {http_server}" in content



def test_an_http_server_that_is_not_there_fails_clearly(manager):
    from tests.engine.mcp.conftest import free_port

    add(manager, "nowhere", {"url": f"http://127.0.0.1:{free_port()}/mcp"})
    manager.start_timeout = 10
    content, is_error = run(manager.call("nowhere__add", {}))
    assert is_error and content.startswith("MCP server 'nowhere' could not start: cannot connect to http://127.0.0.1:")
