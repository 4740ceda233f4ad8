"""An MCP server as the front ends see it (`McpServerInfo`), and its tools as a source in
the tool registry (`McpToolSource`); the tools service (engine/tools/facade.py) keeps one
source per enabled server."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidRequest
from .mcp import McpManager, McpTool
from .mcp_config import DEFAULT_CALL_TIMEOUT
from .registry import ToolInfo, ToolSpec, check_spec

log = logging.getLogger(__name__)

SOURCE_PREFIX = "mcp:"


@dataclass(frozen=True)
class McpServerInfo:
    name: str
    command: str | None
    args: tuple[str, ...]
    env: dict[str, str]
    url: str | None
    enabled: bool
    state: str  # "stopped" | "running" | "failed"
    error: str | None
    tools: tuple[ToolInfo, ...]  # what it listed when it last ran
    headers: dict[str, str]
    timeout: float  # seconds one call may take
    starting: bool = False

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "http"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "transport": self.transport, "command": self.command, "args": list(self.args),
            "env": dict(self.env), "url": self.url, "headers": dict(self.headers), "enabled": self.enabled,
            "timeout": self.timeout, "state": self.state, "error": self.error,
            "tools": [tool.name for tool in self.tools],
        }


class McpToolSource:
    """One MCP server as a tool source (the registry's protocol: name, specs(), call())."""

    def __init__(self, manager: McpManager, server: str):
        self.manager = manager
        self.server = server
        self.name = SOURCE_PREFIX + server
        # the listing last checked, its usable tools and their specs (made once per listing:
        # a server may have thousands, and the registry asks for them per name looked up)
        self._checked: tuple[tuple[McpTool, ...], list[McpTool], list[ToolSpec]] | None = None
        self.revision = 0  # goes up with each new listing (the registry's index follows it)

    @property
    def timeout(self) -> float:
        """Seconds a call may take: the server's own setting (the manager enforces it and
        answers with a clear error; a caller's own limit should not be shorter)."""
        try:
            return self.manager.config(self.server).timeout + 5
        except Exception:
            return DEFAULT_CALL_TIMEOUT + 5

    def tools(self) -> list[McpTool]:
        """Its listed tools that make usable specs (a name too long for a model, or a
        schema that is not JSON schema, is left out and noted in the server's log)."""
        return list(self._check()[1])

    def _check(self) -> tuple[tuple[McpTool, ...], list[McpTool], list[ToolSpec]]:
        listed = self.manager.cached_tools(self.server)
        if self._checked is not None and self._checked[0] is listed:  # checked this listing already
            return self._checked
        out, specs = [], []
        for tool in listed:
            spec = self._spec(tool)
            try:
                check_spec(spec)
            except InvalidRequest as exc:
                self.manager.note(self.server, f"tool {tool.name!r} left out: {exc}")
                continue
            out.append(tool)
            specs.append(spec)
        self._checked = (listed, out, specs)
        self.revision += 1
        return self._checked

    @staticmethod
    def _spec(tool: McpTool) -> ToolSpec:
        parameters = dict(tool.input_schema)
        parameters.setdefault("type", "object")
        return ToolSpec(tool.qualified, tool.description, parameters, needs_approval=True)

    def specs(self) -> list[ToolSpec]:
        return list(self._check()[2])

    def current_revision(self) -> int:
        """The registry's key for this source's specs: it changes when they may have."""
        self._check()
        return self.revision

    async def call(self, name: str, arguments: dict, cancel: asyncio.Event) -> tuple[str, bool]:
        call = asyncio.ensure_future(self.manager.call(name, arguments))
        stop = asyncio.ensure_future(cancel.wait())
        try:
            await asyncio.wait({call, stop}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            call.cancel()
            raise
        finally:
            stop.cancel()
        if call.done():
            return call.result()
        call.cancel()
        return "cancelled by the user", True
