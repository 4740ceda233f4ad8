"""A small MCP server for Wren's tests, written with the SDK's MCPServer (mcp 2.x's name
for FastMCP). Run it over stdio: `python mcp_test_server.py`, or over streamable HTTP:
`python mcp_test_server.py --http PORT` (127.0.0.1 only).

Its tools cover the faults Wren must survive: a call that never answers, a process that
exits mid-call, a 10 MB result and a reply whose shape breaks the protocol.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, TextContent

server = MCPServer("wren-test", instructions="Arithmetic and faults, for Wren's tests.")

HUGE_CHARS = 10 * 1024 * 1024


@server.tool()
def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


@server.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool()
async def sleep_forever() -> str:
    """Never answers."""
    await anyio.sleep_forever()
    return "unreachable"


@server.tool()
def crash() -> str:
    """The server process exits in the middle of the call."""
    sys.stderr.write("crash: exiting mid-call\n")
    sys.stderr.flush()
    os._exit(3)


@server.tool()
def huge() -> CallToolResult:
    """A result of 10 MB (as one text block, without a structured copy)."""
    return CallToolResult(content=[TextContent(type="text", text="x" * HUGE_CHARS)])


@server.tool()
async def malformed(ctx: Context) -> str:
    """Answers its own request with a result whose content is not a list of blocks (raw on
    stdout, stdio only); the real answer that follows has an id nobody waits for."""
    from mcp.server import stdio as transport

    wire = transport._claims[1].private_fd  # the SDK moves the protocol off fd 1
    reply = {"jsonrpc": "2.0", "id": ctx.request_id, "result": {"content": "not a list", "isError": 7}}
    os.write(wire, (json.dumps(reply) + "\n").encode())
    await anyio.sleep(0.2)
    return "late"


@server.tool()
async def chatty(ctx: Context) -> str:
    """Sends a log message to the client, then answers."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        await ctx.log("warning", "chatty says hello")
    return "said hello"


@server.tool()
async def grow(ctx: Context) -> str:
    """Adds a tool named `late` and tells the client the tool list changed."""

    def late() -> str:
        """A tool that appeared after `grow`."""
        return "late tool ran"

    server.add_tool(late, name="late")
    await ctx.notify_tools_changed()
    session = ctx.request_context.session
    send = getattr(session, "send_tool_list_changed", None)
    if send is not None:  # a handshake-era client hears it as a plain notification
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                await send()
            except Exception:
                pass
    return "grew"


def main() -> None:
    token = os.environ.get("WREN_TEST_TOKEN")
    sys.stderr.write(f"wren-test server starting, pid {os.getpid()}" + (f", token {token}" if token else "") + "\n")
    sys.stderr.flush()
    if len(sys.argv) >= 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")


if __name__ == "__main__":
    time.sleep(float(os.environ.get("WREN_TEST_MCP_DELAY", "0")))
    main()
