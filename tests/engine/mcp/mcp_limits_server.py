"""An MCP server for Wren's limit tests (the SDK's MCPServer over stdio): `big(megabytes)`
answers with that many MB of text, and WREN_TEST_MCP_TOOLS=N adds N more small tools
(`t00000`...), each with a description and a schema of a few fields, as a large server has."""

from __future__ import annotations

import os

from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, TextContent

server = MCPServer("wren-limits")


@server.tool()
def big(megabytes: float) -> CallToolResult:
    """Answer with `megabytes` MB of text, as one block."""
    return CallToolResult(content=[TextContent(type="text", text="x" * int(megabytes * 1024 * 1024))])


def _add_many(count: int) -> None:
    for i in range(count):
        def tool(city: str, days: int = 1) -> str:
            return city * days

        server.add_tool(tool, name=f"t{i:05d}",
                        description=f"Tool number {i}: looks up the weather of a city for some days.")


if __name__ == "__main__":
    _add_many(int(os.environ.get("WREN_TEST_MCP_TOOLS", "0")))
    server.run("stdio")
