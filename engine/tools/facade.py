"""The tools service, `engine.tools` (docs/tools.md): the tools Wren offers, which are
enabled, the user's approvals, cancelling a running call, and the user's MCP servers, each
server's tools a source in the tool registry (engine/tools/registry.py).

A server's tools reach the registry when its source is registered and it has listed them:
`prepare_sources()` does both for every enabled server (starting the ones not running), so
call it before offering tools to a model or listing them; a source's `specs()` never does
I/O. MCP tools always need approval (the user may "always allow" one). Every server stops
in `Engine.close`."""

from __future__ import annotations

import asyncio
import builtins
import json
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import paths
from ..errors import InvalidRequest
from ..events import ToolResult
from . import mcp_config
from .builtin import BuiltinTools
from .capability import ToolSupport, tool_support
from .mcp import McpFailure, McpManager, McpServerState, McpTool
from .mcp_config import DEFAULT_CALL_TIMEOUT, check_url, server_from_entry
from .mcp_facade import SOURCE_PREFIX, McpServerInfo, McpToolSource
from .registry import ToolInfo, ToolRegistry, no_tool_named, validate_arguments

if TYPE_CHECKING:
    from ..core import Core
    from ..settings import Settings

log = logging.getLogger(__name__)

DISABLED_KEY = "tools.disabled"  # names the user switched off (every tool is on until then)
ALWAYS_KEY = "tools.always_allowed"  # names whose calls no longer wait for approval
CONVERSATION_KEY = "tools"  # conversation setting: the tools that chat may use
DEFAULT_KEY = "tools.default"  # the tools a chat without its own choice may use (default: none)
MAX_ROUNDS_KEY = "tools.max_rounds"
TIMEOUT_KEY = "tools.timeout_seconds"
RESULT_TOKENS_KEY = "tools.result_tokens"
CONSTRAIN_KEY = "tools.constrain"  # False: calls are not constrained while written (default: they are)
DEFAULT_MAX_ROUNDS = 8
DEFAULT_TIMEOUT = 60.0
DEFAULT_RESULT_TOKENS = 2000
DECISIONS = ("once", "always", "deny")


@dataclass
class ToolState:
    """What the engine keeps about tools between calls (one per Engine)."""

    registry: ToolRegistry
    approvals: dict[str, asyncio.Future] = field(default_factory=dict)  # call id -> the user's decision
    running: dict[str, asyncio.Task] = field(default_factory=dict)  # call id -> its task
    cancelled: set[str] = field(default_factory=set)  # calls the user cancelled (cancel_tool)


class Tools:
    """`engine.tools`: the tools Wren offers (its own and the user's MCP servers'), which
    are enabled, the user's approvals, and cancelling a running call."""

    def __init__(self, core: Core, settings: Settings):
        self.e = core
        self.settings = settings
        registry = ToolRegistry()
        registry.add_source(BuiltinTools(core))
        self.state = ToolState(registry)
        self._mcp: McpManager | None = None

    @property
    def mcp(self) -> McpManager:
        """The user's MCP servers (made on first use: nothing starts until a tool is offered)."""
        if self._mcp is None:
            self._mcp = McpManager(mcp_config.config_path(), log_dir=paths.logs_dir() / "mcp")
        return self._mcp

    @property
    def registry(self) -> ToolRegistry:
        """Where tool sources (MCP servers) register: `add_source(src)`, `remove_source(name)`."""
        return self.state.registry

    async def attachment_problem(self, path: str | Path) -> str | None:
        """Why a file just attached will not be read (binary, not UTF-8, too large, gone), said
        as it is attached; None when it looks readable (engine.tools.files)."""
        from .files import attachment_problem

        return await asyncio.get_running_loop().run_in_executor(None, attachment_problem, Path(path))

    async def list(self) -> builtins.list[ToolInfo]:
        disabled = set(await self._name_list(DISABLED_KEY))
        return [
            ToolInfo(s.name, s.description, s.parameters, s.needs_approval, src.name, s.name not in disabled)
            for s, src in self.registry.entries()
        ]

    async def set_enabled(self, name: str, enabled: bool) -> None:
        self._known_tool(name)
        disabled = [n for n in await self._name_list(DISABLED_KEY) if n != name]
        if not enabled:
            disabled.append(name)
        await self.settings.set(DISABLED_KEY, sorted(disabled) or None)

    def approve(self, call_id: str, decision: str) -> None:
        """The user's answer to ToolApprovalNeeded: "once", "always" or "deny"."""
        if decision not in DECISIONS:
            raise InvalidRequest(f"{decision!r} is not a tool approval; use once, always or deny")
        waiting = self.state.approvals.get(call_id)
        if waiting is None:
            raise InvalidRequest(f"no tool call {call_id!r} is waiting for approval")
        if not waiting.done():
            waiting.set_result(decision)

    def cancel(self, call_id: str) -> None:
        """Stop a running call (or one waiting for approval); its result is the error
        "cancelled by the user" and the answer goes on. Unknown or finished calls: no-op."""
        state = self.state
        waiting = state.approvals.get(call_id)
        if waiting is not None and not waiting.done():
            state.cancelled.add(call_id)
            waiting.set_result("cancel")
            return
        task = state.running.get(call_id)
        if task is not None and not task.done():
            state.cancelled.add(call_id)
            task.cancel()

    async def always_allowed(self) -> builtins.list[str]:
        return await self._name_list(ALWAYS_KEY)

    async def allow_always(self, name: str) -> None:
        names = await self._name_list(ALWAYS_KEY)
        if name not in names:
            await self.settings.set(ALWAYS_KEY, sorted([*names, name]))

    async def revoke_approval(self, name: str) -> None:
        names = [n for n in await self._name_list(ALWAYS_KEY) if n != name]
        await self.settings.set(ALWAYS_KEY, names or None)

    async def for_conversation(self, conversation_id: int) -> builtins.list[str] | None:
        """The tools this chat may use (its setting `tools`); None: it has no choice of its
        own, so `tools.default` applies."""
        conv = await self.e.db(self.e.store_for(conversation_id).get_conversation, conversation_id)
        value = conv.settings.get(CONVERSATION_KEY)
        return [n for n in value if isinstance(n, str)] if isinstance(value, list) else None

    async def set_for_conversation(self, conversation_id: int, names: builtins.list[str] | tuple[str, ...] | None) -> None:
        """Keep this chat's choice of tools (None: back to `tools.default`); later answers,
        regenerations and edits use it when Send gives no tools of its own."""
        if names is not None and (isinstance(names, str) or not all(isinstance(n, str) for n in names)):
            raise InvalidRequest(f"a chat's tools must be a list of tool names, not {names!r}")
        conv = await self.e.db(self.e.store_for(conversation_id).get_conversation, conversation_id)
        settings = dict(conv.settings)
        if names is None:
            settings.pop(CONVERSATION_KEY, None)
        else:
            settings[CONVERSATION_KEY] = list(dict.fromkeys(names))
        store = self.e.store_for(conversation_id)  # type: ignore[attr-defined]
        await self.e.db(store.update_conversation, conversation_id, settings=settings)  # type: ignore[attr-defined]

    async def call(self, name: str, arguments: dict, *, timeout: float | None = None) -> ToolResult:
        """Run a tool directly (`wren tools call`): the user asked, so no approval; the
        arguments are validated; a failure is an error result, not an exception."""
        await self.prepare_sources([name])  # an MCP tool's server starts on first use
        found = self._known_tool(name)
        spec, source = found
        started = time.perf_counter()
        problem = validate_arguments(spec.parameters, arguments, name)
        if problem:
            return ToolResult(f"direct_{name}", problem, True, 0.0)
        cancel = asyncio.Event()
        if timeout is None:
            timeout = await self.timeout()
        try:
            content, is_error = await asyncio.wait_for(source.call(name, arguments, cancel), timeout)
        except TimeoutError:
            cancel.set()
            content, is_error = f"the tool {name} did not answer within {timeout:g} seconds", True
        except Exception as exc:  # a tool's own failure is its result
            content, is_error = f"the tool {name} failed: {type(exc).__name__}: {exc}", True
        if not isinstance(content, str):
            content = json.dumps(content, ensure_ascii=False, default=str)
        return ToolResult(f"direct_{name}", content, bool(is_error), time.perf_counter() - started)

    async def support(self) -> ToolSupport | None:
        """Whether the loaded model calls tools (engine/tools/capability.py); None: no model is loaded."""
        status, worker = self.e.model_status, self.e.loaded_worker  # type: ignore[attr-defined]
        if status is None or worker is None:
            return None
        tokenizer = getattr(worker, "tokenizer", None)
        return await asyncio.get_running_loop().run_in_executor(
            None, lambda: tool_support(status.name, tokenizer, remote=status.backend == "remote"))

    async def timeout(self) -> float:
        value = await self.settings.get(TIMEOUT_KEY)
        return float(value) if isinstance(value, (int, float)) and value > 0 else DEFAULT_TIMEOUT

    # -- helpers -----------------------------------------------------------------------

    def _known_tool(self, name: str) -> Any:
        found = self.registry.find(name)
        if found is None:
            raise InvalidRequest(no_tool_named(name, self.registry.names()))
        return found

    async def _name_list(self, key: str) -> builtins.list[str]:
        value = await self.settings.get(key)
        return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []

    # -- MCP servers ---------------------------------------------------------------

    async def mcp_servers(self) -> builtins.list[McpServerInfo]:
        """Every configured server with its state; starts none."""
        states = await self._mcp_thread(self.mcp.states)
        disabled = await self._mcp_disabled_tools()
        return [self._server_info(state, disabled) for state in states]

    async def add_mcp_server(self, name: str, *, command: str | None = None, args: tuple[str, ...] | builtins.list[str] = (),
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

    async def import_mcp_servers(self, json_text: str) -> builtins.list[str]:
        """The `mcpServers` JSON of Claude desktop and other apps: every server in it is
        added (one of the same name is replaced); a bad entry is named and nothing is added."""
        names = await self.mcp.import_json(json_text)
        self._sync_mcp_sources()
        return names

    async def test_mcp_server(self, name: str) -> builtins.list[ToolInfo]:
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

    async def prepare_sources(self, names: Iterable[str] | None = None) -> None:
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

    async def close(self) -> None:
        """Every MCP server stops with Wren (Engine.close)."""
        if self._mcp is not None:
            await self._mcp.aclose()

    # -- helpers -------------------------------------------------------------------------

    def _sync_mcp_sources(self) -> None:
        """The registry holds exactly one source per enabled server."""
        registry = self.registry
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
        value = await self.settings.get(DISABLED_KEY)  # type: ignore[attr-defined]
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

