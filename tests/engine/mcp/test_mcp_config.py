"""MCP server configuration: the `mcpServers` JSON other apps write, Wren's mcp.json, and
the clear errors for bad entries. No server starts here."""

from __future__ import annotations

import asyncio
import json
import stat

import pytest

from wren.engine.errors import InvalidRequest, NotFound
from wren.engine.tools import mcp_config
from wren.engine.tools.mcp import McpManager, qualified_name, result_text, server_slug
from wren.engine.tools.mcp_config import McpServerConfig, parse_servers

CLAUDE_DESKTOP = """{
  "mcpServers": {
    "filesystem": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/home/me"]},
    "github": {"command": "docker", "args": ["run", "-i", "ghcr.io/github/github-mcp-server"],
               "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_secret_value", "PORT": 8080}},
    "remote": {"type": "http", "url": "https://example.invalid/mcp", "headers": {"Authorization": "Bearer t"}},
    "sleepy": {"command": "uvx", "args": ["sleepy"], "disabled": true, "timeout": 120}
  }
}"""


def run(coro):
    return asyncio.run(coro)


def test_claude_desktop_json_is_read_entry_by_entry():
    servers = {s.name: s for s in parse_servers(CLAUDE_DESKTOP)}
    assert list(servers) == ["filesystem", "github", "remote", "sleepy"]
    fs = servers["filesystem"]
    assert (fs.command, fs.args, fs.transport, fs.enabled) == (
        "npx", ("-y", "@modelcontextprotocol/server-filesystem", "/home/me"), "stdio", True)
    assert servers["github"].env == {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_secret_value", "PORT": "8080"}
    remote = servers["remote"]
    assert (remote.url, remote.headers, remote.transport, remote.command) == (
        "https://example.invalid/mcp", {"Authorization": "Bearer t"}, "http", None)
    assert servers["sleepy"].enabled is False and servers["sleepy"].timeout == 120


def test_a_vs_code_servers_object_and_a_bare_mapping_are_read_too():
    assert [s.name for s in parse_servers('{"servers": {"a": {"command": "x"}}}')] == ["a"]
    assert [s.name for s in parse_servers('{"b": {"url": "http://127.0.0.1:9/mcp"}}')] == ["b"]


@pytest.mark.parametrize("text, message", [
    ("{not json", "does not parse: Expecting property name enclosed in double quotes at line 1, column 2"),
    ("[1, 2]", "must be an object"),
    ('{"other": 1}', 'has no "mcpServers" object'),
    ('{"mcpServers": []}', '"mcpServers" must be an object of named servers'),
    ('{"mcpServers": {}}', "lists no servers"),
    ('{"mcpServers": {"a": "npx thing"}}', "MCP server 'a' must be an object with 'command' or 'url'"),
    ('{"mcpServers": {"a": {}}}', "MCP server 'a' needs 'command'"),
    ('{"mcpServers": {"a": {"command": "x", "url": "http://h/mcp"}}}', "has both 'command' and 'url'"),
    ('{"mcpServers": {"a": {"command": "x", "args": "--flag"}}}', "MCP server 'a': 'args' must be a list of strings"),
    ('{"mcpServers": {"a": {"command": "x", "args": [1]}}}', "'args' must be a list of strings, not [1]"),
    ('{"mcpServers": {"a": {"command": "x", "env": {"K": null}}}}', "'env'['K'] must be a string, not null"),
    ('{"mcpServers": {"a": {"command": ""}}}', "'command' must be a non-empty string"),
    ('{"mcpServers": {"a": {"url": "ftp://h/x"}}}', "'url' must be an http:// or https:// address"),
    ('{"mcpServers": {"a": {"type": "sse", "url": "http://h/sse"}}}', "old SSE transport"),
    ('{"mcpServers": {"a": {"type": "websocket", "url": "http://h"}}}', "has type 'websocket'"),
    ('{"mcpServers": {"a": {"command": "x", "timeout": -1}}}', "'timeout' must be a number of seconds"),
    ('{"mcpServers": {"a": {"command": "x", "disabled": "yes"}}}', "'disabled' must be true or false"),
    ('{"mcpServers": {"a": {"command": "x", "headers": {}}}}', "'headers' belong to a 'url' server"),
    ('{"mcpServers": {"a": {"command": "x", "colour": "red"}}}', "keys Wren does not know: colour"),
    ('{"mcpServers": {" a": {"command": "x"}}}', "starts or ends with spaces"),
])
def test_bad_entries_are_named_with_what_is_wrong(text, message):
    with pytest.raises(InvalidRequest) as caught:
        parse_servers(text)
    assert message in str(caught.value)


def test_every_bad_entry_is_named_and_none_is_taken():
    text = json.dumps({"mcpServers": {"good": {"command": "x"}, "bad1": {"args": []}, "bad2": {"url": 3}}})
    with pytest.raises(InvalidRequest) as caught:
        parse_servers(text)
    message = str(caught.value)
    assert message.startswith("nothing was imported")
    assert "'bad1'" in message and "'bad2'" in message and "'good'" not in message


def test_the_file_round_trips_and_is_private(tmp_path):
    path = tmp_path / "mcp.json"
    servers = {s.name: s for s in parse_servers(CLAUDE_DESKTOP)}
    mcp_config.save(servers, path)
    assert mcp_config.load(path) == servers
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # env may hold keys
    assert json.loads(path.read_text())["mcpServers"]["sleepy"] == {
        "command": "uvx", "args": ["sleepy"], "disabled": True, "timeout": 120.0}
    assert mcp_config.load(tmp_path / "missing.json") == {}


def test_a_file_broken_by_hand_names_the_file(tmp_path):
    path = tmp_path / "mcp.json"
    path.write_text('{"mcpServers": {"a": {"command": 5}}}')
    with pytest.raises(InvalidRequest, match=r"in .*mcp\.json: MCP server 'a': 'command' must be a non-empty string"):
        mcp_config.load(path)
    path.write_text("{")
    with pytest.raises(InvalidRequest, match="does not parse"):
        mcp_config.load(path)


def test_the_manager_adds_removes_and_imports_without_starting_anything(tmp_path):
    manager = McpManager(tmp_path / "mcp.json")
    run(manager.add(McpServerConfig("one", command="x")))
    with pytest.raises(InvalidRequest, match="already exists"):
        run(manager.add(McpServerConfig("one", command="y")))
    run(manager.add(McpServerConfig("one", command="y"), replace=True))
    assert manager.config("one").command == "y"
    run(manager.add(McpServerConfig("my_server", command="x")))
    with pytest.raises(InvalidRequest, match="same prefix 'my_server'"):
        run(manager.add(McpServerConfig("my server", command="x")))
    assert run(manager.import_json(CLAUDE_DESKTOP)) == ["filesystem", "github", "remote", "sleepy"]
    assert set(manager.configs()) == {"one", "my_server", "filesystem", "github", "remote", "sleepy"}
    with pytest.raises(InvalidRequest):
        run(manager.import_json('{"mcpServers": {"one": {"command": "z"}, "bad": {}}}'))
    assert manager.config("one").command == "y"  # a failed import changed nothing
    run(manager.remove("one"))
    with pytest.raises(NotFound, match="no MCP server named 'one'"):
        run(manager.remove("one"))
    assert [s.state for s in manager.states()] == ["stopped"] * 5
    assert manager._loop is None  # no thread, no process: nothing was used


def test_tool_names_are_prefixed_with_a_usable_server_name(tmp_path):
    assert qualified_name("files", "read") == "files__read"
    assert server_slug("my files.v2") == "my_files_v2"
    assert server_slug("1password") == "_1password"  # a tool name may not start with a digit
    manager = McpManager(tmp_path / "mcp.json")
    run(manager.add(McpServerConfig("a", command="x")))
    run(manager.add(McpServerConfig("a__b", command="x")))
    assert manager.resolve("a__b__tool") == ("a__b", "tool")  # the longest prefix wins
    assert manager.resolve("a__tool") == ("a", "tool")
    assert manager.resolve("zzz__tool") is None
    assert run(manager.call("zzz__tool", {})) == ("there is no MCP tool named 'zzz__tool'", True)


def test_result_text_names_media_and_cuts_a_huge_result():
    import mcp_types as types

    from wren.engine.tools.mcp import MAX_RESULT_CHARS

    result = types.CallToolResult(content=[
        types.TextContent(type="text", text="hello"),
        types.ImageContent(type="image", data="AAAA", mime_type="image/png"),
        types.ResourceLink(type="resource_link", uri="file:///x.txt", name="x"),
    ])
    assert result_text(result) == "hello\n[image, image/png, 3 bytes]\n[resource file:///x.txt]"
    structured = types.CallToolResult(content=[], structured_content={"n": 3})
    assert result_text(structured) == '{"n": 3}'
    big = result_text(types.CallToolResult(content=[types.TextContent(type="text", text="y" * (MAX_RESULT_CHARS + 10))]))
    assert big.startswith("y" * 100) and big.endswith(f"the first {MAX_RESULT_CHARS:,} are kept]")
