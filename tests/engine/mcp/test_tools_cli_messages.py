"""What `wren tools …` says when a tool is missing: a configured server that failed is named
with its error, and a bare tool name points at the server's prefixed one."""

from __future__ import annotations

import json
import sys

import pytest

from tests.engine.mcp.conftest import SERVER
from wren.engine.terminal.main import main
from wren.engine.tools.registry import no_tool_named

pytestmark = pytest.mark.timeout(180)


@pytest.mark.slow
def test_tools_list_names_a_server_that_did_not_start(capsys):
    assert main(["mcp", "add", "quits", "--", sys.executable, "-c", "import sys; sys.exit('no config given')"]) == 0
    capsys.readouterr()
    assert main(["tools", "list", "--json"]) == 0
    captured = capsys.readouterr()
    listed = [json.loads(line) for line in captured.out.splitlines() if line.strip()]
    assert listed and all(t["source"] == "builtin" for t in listed)  # stdout stays one tool per line
    assert "MCP server 'quits' did not start" in captured.err and "no config given" in captured.err
    assert "wren mcp log quits" in captured.err


@pytest.mark.slow
def test_tools_call_of_a_bare_name_suggests_the_servers_tool(capsys):
    assert main(["mcp", "add", "calc", "--", sys.executable, str(SERVER)]) == 0
    capsys.readouterr()
    assert main(["tools", "call", "add", "--args", '{"a": 1, "b": 2}']) == 2
    err = capsys.readouterr().err
    assert "there is no tool named 'add'; did you mean 'calc__add'?" in err
    assert "calc__add" in err.split("The tools are:")[1]  # the list has the server's tools, not only the built-ins


def test_no_tool_named_suggests_suffixes_then_close_spellings():
    names = ["calculator", "read_file", "calc__add", "math__add", "calc__subtract"]
    assert no_tool_named("add", names).startswith("there is no tool named 'add'; did you mean 'calc__add' or 'math__add'?")
    assert "did you mean 'calculator'?" in no_tool_named("calculater", names)
    assert no_tool_named("zzz", names) == f"there is no tool named 'zzz'; the tools are: {', '.join(names)}"
    assert no_tool_named("x", [], " in this chat") == "there is no tool named 'x' in this chat; the tools are: none"
