"""`wren mcp …` and `wren tools …` through engine.terminal.main.main."""

from __future__ import annotations

import json
import sys

import pytest

from tests.engine.mcp.conftest import SERVER, server_pids
from wren.engine.terminal.main import main

pytestmark = pytest.mark.timeout(180)


def lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_mcp_add_list_rm(capsys, wren_home):
    assert main(["mcp", "list"]) == 0
    assert "no MCP servers" in capsys.readouterr().out
    assert main(["mcp", "add", "fs", "--env", "ROOT=/tmp", "--timeout", "30", "--", "npx", "-y", "server-fs", "--ro"]) == 0
    assert "added MCP server 'fs' (npx -y server-fs --ro)" in capsys.readouterr().out
    assert main(["mcp", "add", "web", "--url", "http://127.0.0.1:9/mcp", "--header", "Authorization: Bearer t"]) == 0
    capsys.readouterr()
    assert main(["mcp", "list", "--json"]) == 0
    listed = lines(capsys.readouterr().out)
    assert [(s["name"], s["transport"]) for s in listed] == [("fs", "stdio"), ("web", "http")]
    assert listed[0]["args"] == ["-y", "server-fs", "--ro"] and listed[0]["env"] == ["ROOT"]  # names, not values
    assert listed[0]["timeout"] == 30 and listed[1]["headers"] == ["Authorization"]
    saved = json.loads((wren_home / "mcp.json").read_text())["mcpServers"]
    assert saved["fs"]["env"] == {"ROOT": "/tmp"} and saved["web"]["headers"] == {"Authorization": "Bearer t"}
    assert main(["mcp", "list"]) == 0
    text = capsys.readouterr().out
    assert "fs" in text and "npx -y server-fs --ro" in text and "http://127.0.0.1:9/mcp" in text
    assert main(["mcp", "rm", "fs"]) == 0
    assert "removed MCP server 'fs'" in capsys.readouterr().out
    assert main(["mcp", "rm", "fs"]) == 2
    assert "no MCP server named 'fs'" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["mcp", "add", "x"], "say how to reach the server"),
    (["mcp", "add", "x", "--url", "http://h/mcp", "--", "cmd"], "not both"),
    (["mcp", "add", "x", "--url", "ftp://h"], "'url' must be an http:// or https:// address"),
    (["mcp", "add", "x", "--env", "NOEQUALS", "--", "cmd"], "--env 'NOEQUALS' must look like NAME=VALUE"),
    (["mcp", "add", "x", "--header", "A: b", "--", "cmd"], "--header is for a URL server"),
    (["mcp", "add", "x", "--bogus", "--", "cmd"], "unrecognized arguments: --bogus"),
    (["mcp", "import", "/nonexistent/claude.json"], "no file '/nonexistent/claude.json'"),
    (["mcp", "test", "missing"], "no MCP server named 'missing'"),
    (["tools", "call", "calculator", "--args", "{bad"], "--args is not JSON"),
    (["tools", "call", "calculator", "--args", "[1]"], "--args must be a JSON object"),
])
def test_bad_commands_say_what_was_wrong(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_mcp_import_good_and_bad_files(capsys, tmp_path):
    good = tmp_path / "claude_desktop_config.json"
    good.write_text(json.dumps({"mcpServers": {"a": {"command": "x"}, "b": {"url": "http://127.0.0.1:1/mcp"}}}))
    assert main(["mcp", "import", str(good)]) == 0
    assert "imported 2 MCP servers: a, b" in capsys.readouterr().out
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"mcpServers": {"c": {"command": "y"}, "d": {"type": "sse", "url": "http://h/sse"}}}))
    assert main(["mcp", "import", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "nothing was imported" in err and "MCP server 'd' uses the old SSE transport" in err
    assert main(["mcp", "list", "--json"]) == 0
    assert [s["name"] for s in lines(capsys.readouterr().out)] == ["a", "b"]


@pytest.mark.slow
def test_mcp_test_tools_list_and_tools_call(capsys, wren_home):
    assert main(["mcp", "add", "calc", "--", sys.executable, str(SERVER)]) == 0
    capsys.readouterr()
    assert main(["mcp", "test", "calc"]) == 0
    out = capsys.readouterr().out
    assert "MCP server 'calc' works: 8 tools" in out and "calc__add" in out and "Add two numbers." in out
    assert _server_children() == []
    assert main(["mcp", "log", "calc"]) == 0  # what it said while `mcp test` ran it, from its log file
    log = capsys.readouterr().out
    assert "stderr: wren-test server starting" in log and "wren: running (" in log and "wren: stopping" in log

    assert main(["tools", "list", "--json"]) == 0
    tools = {t["name"]: t for t in lines(capsys.readouterr().out)}
    assert tools["calc__add"]["source"] == "mcp:calc" and tools["calc__add"]["needs_approval"] is True
    assert tools["calculator"]["source"] == "builtin"

    assert main(["tools", "call", "calc__add", "--args", '{"a": 2, "b": 3}']) == 0
    assert capsys.readouterr().out.strip() == "5.0"
    assert main(["tools", "call", "calculator", "--args", '{"expression": "6*7"}', "--json"]) == 0  # a built-in
    result = json.loads(capsys.readouterr().out)
    assert (result["type"], result["content"], result["is_error"]) == ("tool_result", "42", False)
    assert main(["tools", "call", "nope__tool"]) == 2
    assert "there is no tool named 'nope__tool'" in capsys.readouterr().err
    assert main(["mcp", "rm", "calc"]) == 0
    assert not list((wren_home / "logs" / "mcp").glob("calc.log*"))  # its log goes with it
    assert _server_children() == []  # each command stopped the servers it started


@pytest.mark.slow
def test_mcp_test_of_a_server_that_fails_shows_why(capsys):
    assert main(["mcp", "add", "quits", "--", sys.executable, "-c", "import sys; sys.exit('no config given')"]) == 0
    capsys.readouterr()
    assert main(["mcp", "test", "quits"]) == 2
    err = capsys.readouterr().err
    assert "MCP server 'quits' could not start" in err and "no config given" in err
    assert main(["mcp", "log", "quits", "-n", "3"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3
    assert main(["mcp", "add", "fresh", "--", "x"]) == 0
    capsys.readouterr()
    assert main(["mcp", "log", "fresh"]) == 0
    assert "has no log yet" in capsys.readouterr().err


def _server_children() -> list[int]:
    """This process's children that run the test server and are not yet reaped."""
    import os
    from pathlib import Path

    mine = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (proc / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid() and SERVER.name.encode() in cmdline:
            mine.append(int(proc.name))
    return mine


def test_server_pids_reads_the_test_servers_stderr_line():
    assert server_pids("12:00:00 stderr: wren-test server starting, pid 42\nother") == [42]


def test_ask_can_name_an_mcp_servers_tool_before_it_has_started(capsys, wren_home, tiny_model_dir, monkeypatch):
    """`wren ask --tools SERVER__TOOL` in a fresh process: the server is started to check
    the name (it used to be refused as "not a tool" until something else had started it)."""
    from tests.engine.tools.conftest import by_round, call
    from wren.engine.inference import select
    from wren.engine.inference.backends.scripted import ScriptedBackend
    from wren.engine.modelhub.registry import ModelRegistry

    ModelRegistry(wren_home / "models").register_folder(tiny_model_dir, name="tiny")
    backend = ScriptedBackend(by_round(call("calc__add", a=2, b=3), "It is 5."))
    monkeypatch.setattr(select, "resolve_backend", lambda name: backend)
    assert main(["mcp", "add", "calc", "--", sys.executable, str(SERVER)]) == 0
    capsys.readouterr()
    code = main(["ask", "--model", "tiny", "--tools", "calc__add", "--approve", "--json", "add 2 and 3"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    events = lines(captured.out)
    result = next(e for e in events if e["type"] == "tool_result")
    assert (result["content"], result["is_error"]) == ("5.0", False)
    assert main(["ask", "--model", "tiny", "--tools", "calc__nope", "x"]) == 2
    assert "calc__nope, which is not a tool" in capsys.readouterr().err
    assert main(["ask", "--model", "tiny", "--tool-choice", "calc__nope", "x"]) == 2
    assert "--tool-choice calc__nope is not auto, none or a tool" in capsys.readouterr().err
    assert _server_children() == []
