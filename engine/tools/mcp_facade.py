"""The Engine's MCP half (docs/tools.md): the user's MCP servers, and each server's tools
as a source in the tool registry (`Engine.tool_registry`, engine/tools/registry.py).

Mixed into `Engine`. A server's tools reach the registry when its source is registered
and it has listed them: `prepare_tool_sources()` does both for every enabled server
(starting the ones not running), so call it before offering tools to a model or listing
them; a source's `specs()` never does I/O. MCP tools always need approval (the user may
"always allow" one). Every server stops in `Engine.close` (`_close_mcp`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .. import paths
from ..errors import InvalidRequest
from . import mcp_config
from .mcp import McpFailure, McpManager, McpServerState, McpTool
from .mcp_config import DEFAULT_CALL_TIMEOUT, check_url, server_from_entry
from .registry import ToolInfo, ToolSpec, check_spec

log = logging.getLogger(__name__)

SOURCE_PREFIX = "mcp:"
DISABLED_KEY = "tools.disabled"  # the tools facade's list of switched-off tool names


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


class McpFacade:
    """Mixed into `Engine`; relies on its `get_setting` and (from the tools facade)
    `tool_registry`."""

    @property
    def mcp(self) -> McpManager:
        manager = self.__dict__.get("_mcp")
        if manager is None:
            manager = self.__dict__["_mcp"] = McpManager(mcp_config.config_path(), log_dir=paths.logs_dir() / "mcp")
        return manager

    async def mcp_servers(self) -> list[McpServerInfo]:
        """Every configured server with its state; starts none."""
        states = await self._mcp_thread(self.mcp.states)
        disabled = await self._mcp_disabled_tools()
        return [self._server_info(state, disabled) for state in states]

    async def add_mcp_server(self, name: str, *, command: str | None = None, args: tuple[str, ...] | list[str] = (),
                             env: dict[str, str] | None = None, url: str | None = None,
                             headers: dict[str, str] | None = None, timeout: float | None = None,
                             enabled: bool = True, replace: bool = False) -> McpServerInfo:
        """A stdio server (`command`, `args`, `env`) or a streamable-HTTP one (`url`,
        `headers`); `replace=True` edits the server of that name. Nothing starts yet."""
        entry: dict[str, Any] = {}
        if command is not None:
            entry.update(command=command, args=list(args), env=dict(env or {}))
            if headers:
                raise InvalidRequest(f"MCP server {name!r}: headers belong to a url server, not a command one")
        elif url is not None:
            check_url(url, f"MCP server {name!r}")
            entry.update(url=url, headers=dict(headers or {}))
            if args or env:
                raise InvalidRequest(f"MCP server {name!r}: args and env belong to a command server, not a url one")
        else:
            raise InvalidRequest(f"MCP server {name!r} needs a command (a program Wren starts) or a url")
        if command is not None and url is not None:
            raise InvalidRequest(f"MCP server {name!r} has both a command and a url; give one")
        entry["timeout"] = DEFAULT_CALL_TIMEOUT if timeout is None else timeout
        entry["disabled"] = not enabled
        server = server_from_entry(name, entry)
        await self.mcp.add(server, replace=replace)
        self._sync_mcp_sources()
        return (await self._mcp_info(name))

    async def remove_mcp_server(self, name: str) -> None:
        await self.mcp.remove(name)
        self._sync_mcp_sources()

    async def set_mcp_server_enabled(self, name: str, enabled: bool) -> McpServerInfo:
        await self.mcp.set_enabled(name, enabled)
        self._sync_mcp_sources()
        return await self._mcp_info(name)

    async def import_mcp_servers(self, json_text: str) -> list[str]:
        """The `mcpServers` JSON of Claude desktop and other apps: every server in it is
        added (one of the same name is replaced); a bad entry is named and nothing is added."""
        names = await self.mcp.import_json(json_text)
        self._sync_mcp_sources()
        return names

    async def test_mcp_server(self, name: str) -> list[ToolInfo]:
        """Start the server afresh and list its tools; a failure is an McpFailure saying why."""
        try:
            await self.mcp.test(name)
        except McpFailure as exc:
            raise McpFailure(f"MCP server {name!r} could not start: {exc}") from None
        self._sync_mcp_sources()
        disabled = await self._mcp_disabled_tools()
        return [self._tool_info(tool, disabled) for tool in McpToolSource(self.mcp, name).tools()]

    async def mcp_server_log(self, name: str) -> str:
        """Its stderr, the log messages it sent and what Wren did, newest last."""
        return await self._mcp_thread(self.mcp.log, name)

    async def prepare_tool_sources(self, names: Iterable[str] | None = None) -> None:
        """Register every enabled server's source and start the servers not running, so
        their tools are in the registry; with `names` (tool names), only the servers that
        own one of them. A server that fails is left out (its state and log say why)."""
        self._sync_mcp_sources()
        configs = await self._mcp_thread(self.mcp.configs)
        if names is None:
            servers = [name for name, c in configs.items() if c.enabled]
        else:
            owners = {self.mcp.resolve(n) for n in names if isinstance(n, str)}
            servers = sorted({found[0] for found in owners if found is not None and configs[found[0]].enabled})
        if servers:
            await self.mcp.list_tools(servers)

    async def _close_mcp(self) -> None:
        manager = self.__dict__.get("_mcp")
        if manager is not None:
            await manager.aclose()

    # -- helpers -------------------------------------------------------------------------

    def _sync_mcp_sources(self) -> None:
        """The registry holds exactly one source per enabled server."""
        registry = getattr(self, "tool_registry", None)
        if registry is None:
            return
        try:
            configs = self.mcp.configs()
        except InvalidRequest as exc:  # the file was broken by hand: keep what is registered
            log.warning("MCP servers file unreadable: %s", exc)
            return
        wanted = {SOURCE_PREFIX + name: name for name, c in configs.items() if c.enabled}
        for source in registry.sources():
            if source.name.startswith(SOURCE_PREFIX) and source.name not in wanted:
                registry.remove_source(source.name)
        present = {source.name for source in registry.sources()}
        for source_name, server in wanted.items():
            if source_name in present:
                continue
            try:
                registry.add_source(McpToolSource(self.mcp, server))
            except InvalidRequest as exc:
                self.mcp.note(server, f"its tools were not added: {exc}")

    async def _mcp_info(self, name: str) -> McpServerInfo:
        return next(s for s in await self.mcp_servers() if s.name == name)

    async def _mcp_disabled_tools(self) -> set[str]:
        value = await self.get_setting(DISABLED_KEY)  # type: ignore[attr-defined]
        return {v for v in value if isinstance(v, str)} if isinstance(value, list) else set()

    def _server_info(self, state: McpServerState, disabled: set[str]) -> McpServerInfo:
        c = state.config
        source = McpToolSource(self.mcp, c.name)
        tools = tuple(self._tool_info(tool, disabled) for tool in source.tools()) if state.tools else ()
        return McpServerInfo(c.name, c.command, c.args, dict(c.env), c.url, c.enabled, state.state, state.error,
                             tools, dict(c.headers), c.timeout, state.starting)

    @staticmethod
    def _tool_info(tool: McpTool, disabled: set[str]) -> ToolInfo:
        spec = McpToolSource._spec(tool)
        return ToolInfo(spec.name, spec.description, spec.parameters, True, SOURCE_PREFIX + tool.server,
                        spec.name not in disabled)

    @staticmethod
    async def _mcp_thread(fn: Any, *args: Any) -> Any:
        """File reads off the caller's loop."""
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

