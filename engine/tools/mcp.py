"""Wren's MCP client: the user's MCP servers, started on first use, stopped with Wren.

`McpManager` keeps one connection per configured server (`engine.tools.mcp_config`):
stdio servers (a command Wren starts) and streamable-HTTP servers (a URL), through the
official `mcp` SDK. A server starts when its tools are first listed or called; its tools
are exposed under `<server>__<tool>` and need the user's approval by default.

Faults stay inside one server: a server that cannot start, crashes, never answers within
its timeout or answers with a malformed result gives the caller an error *result* (text
naming the server, the tool and what happened; `is_error` true) and the other servers go
on. A server that died is started again on its next use.

Each server keeps a ring of log lines the user can read (`log(name)`): its stderr, the
log messages it sends, and what Wren did (started, stopped, crashed, timed out); with a
`log_dir` they are also written to `<log_dir>/<server>.log`.

Why its own thread and event loop: the SDK is built on anyio, whose task groups and
cancel scopes must be entered and left by one task, so every connection lives in one
long-lived task that owns it, whichever loop runs it. In the desktop app the engine's loop
is qasync's, on the Qt GUI thread. The SDK does run there (checked), but the pieces it
does in one go stall the window: a 10 MB result's final decode and validation stalled a
qasync loop for 0.13-0.30 s with the SDK on it, 0.09 s with the SDK on this thread
(2 cores, under other load). A server flooding its stderr
or a slow teardown stays off the GUI thread too, and `close()` works from code that has
no loop. So the manager runs a plain asyncio loop on a daemon thread and the engine awaits
it through `asyncio.wrap_future` (tests run it under qasync too). Cancelling the awaiting
task cancels the call on the server's side as well.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import json
import logging
import math
import os
import re
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import paths
from ..errors import InvalidRequest, NotFound, WrenError
from ..network import sandbox
from ..network.guard import check_url
from ..network.lock import NetworkLocked, OfflineLocked
from ..network.purpose import Part, acting
from ..threadloop import LoopThread
from . import mcp_config
from .mcp_config import McpServerConfig
from .mcp_stdio import RESULT_TOO_LARGE

log = logging.getLogger(__name__)

START_TIMEOUT = 30.0  # seconds for a server to start and list its tools (npx may fetch first)
RETRY_AFTER = 30.0  # a server that failed to start is not retried by listings for this long
STOP_TIMEOUT = 10.0
MAX_RESULT_CHARS = 200_000  # beyond this a result is cut, with a note (the loop budgets tokens later)
LOG_LINES = 1000
LOG_LINE_CHARS = 2000
LOG_FILE_BYTES = 1 << 20
SEPARATOR = "__"  # <server>__<tool>: what the model sees

STATES = ("stopped", "running", "failed")


class McpFailure(WrenError):
    """A server could not start or do what was asked; the message is meant for the user."""


@dataclass(frozen=True)
class McpTool:
    server: str
    name: str  # the server's own name for it
    qualified: str  # the name Wren and the model use: <server>__<tool>
    description: str
    input_schema: dict[str, Any]
    title: str | None = None


@dataclass(frozen=True)
class McpServerState:
    config: McpServerConfig
    state: str  # "stopped" | "running" | "failed"
    error: str | None
    tools: tuple[McpTool, ...]
    starting: bool = False


def server_slug(name: str) -> str:
    """A server's name as it prefixes its tools: letters, digits, '-' and '_' only, not
    starting with a digit or '-' (tool names must not)."""
    slug = re.sub(r"[^A-Za-z0-9_-]", "_", name) or "server"
    return slug if slug[0].isalpha() or slug[0] == "_" else "_" + slug


def qualified_name(server: str, tool: str) -> str:
    return f"{server_slug(server)}{SEPARATOR}{tool}"


class LogRing:
    """The last LOG_LINES lines of one server's log, safe to read from any thread; values
    of the server's environment (API keys) are masked. With a `path`, every line is also
    appended there (kept under LOG_FILE_BYTES, the older half moved to `path.1`), so
    `wren mcp log` can show what a server said while Wren ran it."""

    def __init__(self, secrets: Iterable[str] = (), path: Path | None = None):
        self._lines: collections.deque[str] = collections.deque(maxlen=LOG_LINES)
        self._lock = threading.Lock()
        self.path = path
        self.mask(secrets)

    def mask(self, secrets: Iterable[str]) -> None:
        self._secrets = sorted((s for s in secrets if len(s) >= 6), key=len, reverse=True)

    def add(self, source: str, text: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        lines = []
        for line in str(text).splitlines() or [""]:
            for secret in self._secrets:
                line = line.replace(secret, "[redacted]")
            if len(line) > LOG_LINE_CHARS:
                line = line[:LOG_LINE_CHARS] + f"… ({len(line)} characters)"
            lines.append(f"{stamp} {source}: {line}")
        with self._lock:
            self._lines.extend(lines)
            if self.path is not None:
                self._write(lines)

    def _write(self, lines: list[str]) -> None:
        path = self.path
        assert path is not None
        try:
            paths.make_dirs(path.parent)
            if path.exists() and path.stat().st_size > LOG_FILE_BYTES:
                os.replace(path, path.with_name(path.name + ".1"))
            with open(path, "a", encoding="utf-8") as out:
                out.write(time.strftime("%Y-%m-%d ") + ("\n" + time.strftime("%Y-%m-%d ")).join(lines) + "\n")
        except OSError as exc:  # a full or read-only disk: the ring still has it
            log.warning("cannot write the MCP log %s: %s", path, exc)
            self.path = None

    def text(self) -> str:
        with self._lock:
            return "\n".join(self._lines)

    def tail(self, n: int, source: str | None = None) -> list[str]:
        with self._lock:
            lines = [ln for ln in self._lines if source is None or f" {source}: " in ln]
        return lines[-n:]


class _Run:
    """One start of a server: the task that owns its connection, until it ends."""

    def __init__(self) -> None:
        self.task: asyncio.Task | None = None
        self.scope: Any = None  # the anyio scope the connection lives in
        self.stopping = False


class _Connection:
    """One server's connection; every method runs on the manager's loop."""

    def __init__(self, config: McpServerConfig, manager: McpManager):
        self.config = config
        self.manager = manager
        self.log = manager._log_ring(config)
        self.state = "stopped"
        self.error: str | None = None
        self.tools: tuple[McpTool, ...] = ()
        self.client: Any = None
        self.failed_at = 0.0
        self._lock = asyncio.Lock()
        self._run: _Run | None = None
        self._background: set[asyncio.Task] = set()

    @property
    def starting(self) -> bool:
        return self._run is not None and self.state == "stopped"

    # -- life ------------------------------------------------------------------------------

    async def ensure(self, start_timeout: float) -> Any:
        """The connected client, starting the server first if it is not running."""
        async with self._lock:
            if self.state == "running" and self.client is not None:
                return self.client
            await self._finish(self._run)  # a connection that died: reap it before starting again
            self.state, self.error = "stopped", None
            loop = asyncio.get_running_loop()
            ready: asyncio.Future = loop.create_future()
            run = self._run = _Run()
            with self._purpose():  # the connection's task keeps it
                run.task = loop.create_task(self._hold(run, ready, start_timeout), name=f"mcp:{self.config.name}")
            try:
                # The connection enforces start_timeout itself; this is a backstop.
                await asyncio.wait_for(asyncio.shield(ready), start_timeout + STOP_TIMEOUT)
            except BaseException as exc:
                if isinstance(exc, TimeoutError):
                    exc = McpFailure(f"did not start within {start_timeout:g} s")
                self._fail(_describe_start_error(exc, self.config, start_timeout))
                await self._finish(run)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                raise McpFailure(self.error) from None
            return self.client

    async def _hold(self, run: _Run, ready: asyncio.Future, start_timeout: float) -> None:
        """The task that owns the connection from start to stop (anyio's scopes need one)."""
        from contextlib import AsyncExitStack

        import anyio

        stderr_read = stderr_write = None
        try:
            with anyio.CancelScope() as scope:
                run.scope = scope
                scope.deadline = anyio.current_time() + start_timeout
                async with AsyncExitStack() as stack:
                    if self.config.command is not None:
                        stderr_read, stderr_write = os.pipe()
                        os.set_blocking(stderr_read, False)
                        asyncio.get_running_loop().add_reader(stderr_read, self._read_stderr, run, stderr_read)
                    client = self._client(stack, stderr_write)
                    self.log.add("wren", f"starting {self._describe()}")
                    started = time.monotonic()
                    await stack.enter_async_context(client)
                    if stderr_write is not None:  # the child has its copy; EOF now means it exited
                        os.close(stderr_write)
                        stderr_write = None
                    tools = await self._list_tools(client)
                    scope.deadline = math.inf  # started: it may now run as long as Wren does
                    self.client, self.tools, self.state, self.error = client, tools, "running", None
                    self.log.add("wren", f"running ({client.protocol_version}), {len(tools)} tools, "
                                         f"started in {time.monotonic() - started:.1f} s")
                    ready.set_result(None)
                    self.manager._changed(self.config.name)
                    async with anyio.create_task_group() as group:
                        if self._can_listen(client):
                            group.start_soon(self._listen, run, client)
                        await anyio.sleep_forever()
            if not ready.done():
                ready.set_exception(McpFailure(f"did not start within {start_timeout:g} s"))
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else McpFailure(repr(exc)))
            elif not run.stopping:
                self.log.add("wren", f"connection ended: {_describe(exc)}")
            if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt, SystemExit)):
                raise
        finally:
            run.scope = None
            if self._run is run:
                self.client = None
                if self.state == "running":
                    self.state = "stopped"
            if stderr_write is not None:
                os.close(stderr_write)
            if stderr_read is not None:
                self._close_stderr(stderr_read)
            if not ready.done():
                ready.set_exception(McpFailure("the connection ended while starting"))
            ready.exception() if ready.done() and not ready.cancelled() else None  # retrieved: no warning

    def _client(self, stack: Any, stderr_write: int | None) -> Any:
        from mcp import Client
        from mcp_types import Implementation

        from .. import __version__

        if self.config.command is not None:
            from mcp.client.stdio import StdioServerParameters

            from .mcp_stdio import stdio_client  # the SDK's, with a linear reader and a size limit

            assert stderr_write is not None
            start = sandbox.launch(self.config.name, self.config.command, list(self.config.args))
            if start.note is not None:  # under the offline lock: without network, or said plainly that it is not
                self.log.add("wren", start.note)
            params = StdioServerParameters(command=start.command, args=start.args, env=dict(self.config.env) or None)
            errlog = os.fdopen(os.dup(stderr_write), "w")
            stack.callback(errlog.close)
            target: Any = stdio_client(params, errlog=errlog)
        else:
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            assert self.config.url is not None
            check_url(self.config.url)  # the offline lock refuses a server that is not loopback, by name
            http = create_mcp_http_client(headers=dict(self.config.headers) or None)
            stack.push_async_callback(http.aclose)
            # Room for a big result in one event; MAX_RESULT_CHARS cuts it afterwards.
            target = streamable_http_client(self.config.url, http_client=http, max_sse_event_size=64 << 20)
        return Client(target, client_info=Implementation(name="wren", version=__version__), cache=None,
                      log_level="info", logging_callback=self._on_log, message_handler=self._on_message)

    def _describe(self) -> str:
        if self.config.command is not None:
            return " ".join([self.config.command, *self.config.args])
        return str(self.config.url)

    async def _list_tools(self, client: Any) -> tuple[McpTool, ...]:
        tools: list[McpTool] = []
        cursor = None
        for _ in range(100):  # a server whose pages never end cannot hang Wren
            page = await client.list_tools(cursor=cursor)
            for tool in page.tools:
                tools.append(McpTool(
                    server=self.config.name, name=tool.name, qualified=qualified_name(self.config.name, tool.name),
                    description=(tool.description or tool.title or "").strip(),
                    input_schema=dict(tool.input_schema or {"type": "object"}), title=tool.title,
                ))
            cursor = page.next_cursor
            if not cursor:
                break
        return tuple(tools)

    def _can_listen(self, client: Any) -> bool:
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        caps = client.server_capabilities
        return (client.protocol_version in MODERN_PROTOCOL_VERSIONS and caps.tools is not None
                and bool(caps.tools.list_changed))

    async def _listen(self, run: _Run, client: Any) -> None:
        """A 2026 server announces tool changes on a subscription stream."""
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    self.log.add("wren", "the server says its tools changed")
                    await self.refresh()
        except Exception as exc:
            if not run.stopping:
                self.log.add("wren", f"no longer hearing about tool changes: {_describe(exc)}")

    async def refresh(self) -> None:
        client = self.client
        if client is None:
            return
        try:
            with self._purpose():
                self.tools = await asyncio.wait_for(self._list_tools(client), self.manager.start_timeout)
        except Exception as exc:
            self.log.add("wren", f"listing tools again failed: {_describe(exc)}")
            return
        self.log.add("wren", f"{len(self.tools)} tools now")
        self.manager._changed(self.config.name)

    async def _on_log(self, params: Any) -> None:
        data = params.data if isinstance(params.data, str) else json.dumps(params.data, ensure_ascii=False)
        source = f"log {params.level}" + (f" {params.logger}" if params.logger else "")
        self.log.add(source, data)

    async def _on_message(self, message: Any) -> None:
        import mcp_types as types

        if isinstance(message, Exception):
            self.log.add("wren", f"the server sent something unreadable: {_describe(message)}")
        elif isinstance(message, types.ToolListChangedNotification):
            self.log.add("wren", "the server says its tools changed")
            self._background_task(self.refresh())

    def _read_stderr(self, run: _Run, fd: int) -> None:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self.log.add("stderr", data.decode("utf-8", "replace").rstrip("\n"))
            return
        self._close_stderr(fd)
        if self._run is run and not run.stopping and self.state == "running":  # it exited on its own
            self._fail("the server process exited; Wren starts it again on the next use")
            self._background_task(self._finish(run, keep_state=True))

    def _close_stderr(self, fd: int) -> None:
        try:
            asyncio.get_running_loop().remove_reader(fd)
        except (RuntimeError, ValueError):
            pass
        try:
            os.close(fd)
        except OSError:
            pass

    def _background_task(self, coro: Coroutine[Any, Any, Any]) -> None:
        task: asyncio.Task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _fail(self, error: str) -> None:
        self.state, self.error, self.client, self.failed_at = "failed", error, None, time.monotonic()
        self.log.add("wren", error)

    async def _finish(self, run: _Run | None, keep_state: bool = False) -> None:
        """End one run's task (the SDK stops the process: stdin closed, then TERM, KILL)."""
        if run is None or run.task is None:
            return
        run.stopping = True
        if run.scope is not None:
            run.scope.cancel()
        task = run.task
        if not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), STOP_TIMEOUT)
            except TimeoutError:
                task.cancel()
                self.log.add("wren", f"the connection did not close within {STOP_TIMEOUT:g} s; abandoned")
            except BaseException:
                pass
        if self._run is run:
            self._run = None
            if not keep_state and self.state != "failed":
                self.state = "stopped"

    async def stop(self) -> None:
        async with self._lock:
            if self._run is not None:
                self.log.add("wren", "stopping")
            await self._finish(self._run)
            if self.state != "failed":
                self.state, self.error = "stopped", None

    # -- calls -----------------------------------------------------------------------------

    def _purpose(self) -> Any:
        """The network ledger's name for what this server's connections are for (engine/network)."""
        return acting(Part.MCP_SERVER, f"MCP server '{self.config.name}'")

    async def call(self, tool: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        with self._purpose():  # a call's requests go out from this task (HTTP servers)
            return await self._call(tool, arguments)

    async def _call(self, tool: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        name = self.config.name
        try:
            client = await self.ensure(self.manager.start_timeout)
        except McpFailure as exc:
            return f"MCP server {name!r} could not start: {exc}", True
        if tool not in {t.name for t in self.tools}:
            await self.refresh()
            if tool not in {t.name for t in self.tools}:
                known = ", ".join(t.name for t in self.tools) or "none"
                return f"MCP server {name!r} has no tool named {tool!r} (its tools: {known})", True
        timeout = self.config.timeout
        started = time.monotonic()
        try:
            result = await asyncio.wait_for(
                client.call_tool(tool, arguments, read_timeout_seconds=timeout), timeout + STOP_TIMEOUT)
        except asyncio.CancelledError:
            self.log.add("wren", f"call to {tool!r} cancelled")
            raise
        except BaseException as exc:
            return self._call_error(tool, exc, timeout, time.monotonic() - started), True
        try:
            return result_text(result), bool(result.is_error)
        except Exception as exc:
            return self._call_error(tool, exc, timeout, time.monotonic() - started), True

    def _call_error(self, tool: str, exc: BaseException, timeout: float, took: float) -> str:
        import mcp_types as types
        from mcp.shared.exceptions import MCPError
        from pydantic import ValidationError

        who = f"MCP server {self.config.name!r}"
        if isinstance(exc, TimeoutError) or (isinstance(exc, MCPError) and exc.code == types.REQUEST_TIMEOUT):
            self.log.add("wren", f"call to {tool!r} timed out after {timeout:g} s")
            return (f"{who} did not answer {tool!r} within {timeout:g} s; Wren stopped waiting "
                    "(the timeout is the server's 'timeout' setting)")
        if (isinstance(exc, MCPError) and exc.code == types.CONNECTION_CLOSED) or _is_transport_error(exc):
            if self.state == "running":
                self._fail(f"the connection closed during a call to {tool!r}")
            if self._run is not None:
                self._background_task(self._finish(self._run, keep_state=True))
            lines = [ln.split(": ", 1)[-1] for ln in self.log.tail(3, "stderr")]
            said = f" Its last words: {' | '.join(lines)}" if lines else ""
            return (f"{who} closed the connection during {tool!r} after {took:.1f} s (it may have crashed); "
                    f"Wren starts it again on the next call.{said}")
        if isinstance(exc, (ValidationError, RuntimeError)) and not isinstance(exc, MCPError):
            detail = _validation_summary(exc)
            self.log.add("wren", f"malformed result from {tool!r}: {detail}")
            return f"{who} sent a malformed result for {tool!r}: {detail}"
        if isinstance(exc, MCPError) and exc.code == RESULT_TOO_LARGE:
            self.log.add("wren", f"{tool!r} answered, but {exc}; the answer was dropped")
            return f"{who} answered {tool!r}, but {exc}; Wren dropped the answer"
        if isinstance(exc, MCPError):
            self.log.add("wren", f"{tool!r} failed: {exc} (code {exc.code})")
            return f"{who} refused {tool!r}: {exc}"
        self.log.add("wren", f"{tool!r} failed: {_describe(exc)}")
        return f"{who} failed on {tool!r}: {_describe(exc)}"


def _is_transport_error(exc: BaseException) -> bool:
    import anyio

    names = {type(e).__name__ for e in _chain(exc)}
    return bool(names & {"ConnectError", "RemoteProtocolError", "ReadError", "WriteError"}) or isinstance(
        exc, (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, ConnectionError, EOFError))


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    seen: set[int] = set()
    stack: list[BaseException | None] = [exc]
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        out.append(e)
        stack.extend([e.__cause__, e.__context__, *getattr(e, "exceptions", ())])
    return out


def _describe(exc: BaseException) -> str:
    leaves = [e for e in _chain(exc) if not getattr(e, "exceptions", None)] or [exc]
    e = leaves[0]
    text = str(e).strip() or type(e).__name__
    return text if len(text) <= 300 else text[:300] + "…"


def _describe_start_error(exc: BaseException, config: McpServerConfig, timeout: float) -> str:
    for e in _chain(exc):
        if isinstance(e, (OfflineLocked, NetworkLocked)):
            return str(e)
        if isinstance(e, FileNotFoundError) and config.command is not None:
            return f"the command {config.command!r} was not found (is it installed and on PATH?)"
        if isinstance(e, PermissionError) and config.command is not None:
            return f"the command {config.command!r} cannot be run: permission denied"
        if type(e).__name__ == "ConnectError":
            return f"cannot connect to {config.url}: {e}"
    if isinstance(exc, (asyncio.CancelledError,)):
        return "starting was cancelled"
    text = _describe(exc)
    if text in ("Connection closed", "CancelledError") or "Connection closed" in text:
        return "the server exited before it finished starting (see its log)"
    if config.url is not None and len(text) < 40 and not text.startswith("cannot"):
        # an HTTP status ("Not Found", "Method Not Allowed"): likely not an MCP endpoint
        return f"{config.url} answered {text!r}; is it the server's streamable HTTP address (often ending in /mcp)?"
    return text


def _validation_summary(exc: BaseException) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            first = errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ()) if not str(p).startswith("union"))
            return f"{where or 'result'}: {first.get('msg', '')}".strip()
        except Exception:
            pass
    return _describe(exc)


def result_text(result: Any) -> str:
    """A CallToolResult as the text the model reads; other media are named, not inlined."""
    import mcp_types as types

    parts: list[str] = []
    for block in result.content or []:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        elif isinstance(block, types.ImageContent):
            parts.append(f"[image, {block.mime_type}, {len(block.data) * 3 // 4:,} bytes]")
        elif isinstance(block, types.AudioContent):
            parts.append(f"[audio, {block.mime_type}, {len(block.data) * 3 // 4:,} bytes]")
        elif isinstance(block, types.ResourceLink):
            parts.append(f"[resource {block.uri}" + (f": {block.description}]" if block.description else "]"))
        elif isinstance(block, types.EmbeddedResource):
            res = block.resource
            if isinstance(res, types.TextResourceContents):
                parts.append(res.text)
            else:
                parts.append(f"[binary resource {res.uri}, {res.mime_type or 'unknown type'}]")
        else:
            parts.append(f"[{getattr(block, 'type', type(block).__name__)} content]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(parts)
    if len(text) > MAX_RESULT_CHARS:
        text = (text[:MAX_RESULT_CHARS] + f"\n[Wren cut this result: the tool returned {len(text):,} characters; "
                f"the first {MAX_RESULT_CHARS:,} are kept]")
    return text


def _import_sdk() -> None:
    """The SDK's modules, before the MCP thread uses them: imported there while the
    caller's thread ran Qt's event loop, the import was seen to hang in a test run."""
    import mcp.client.stdio
    import mcp.client.streamable_http  # noqa: F401
    import mcp_types  # noqa: F401
    from mcp import Client  # noqa: F401


_sdk_import: concurrent.futures.Future | None = None


async def _sdk_imported() -> None:
    """Import the SDK on a short-lived thread of its own and wait for it without blocking
    the caller's loop: the first import takes 0.5-2 s, which froze the window's loop."""
    global _sdk_import
    if _sdk_import is None:
        future: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            try:
                _import_sdk()
            except BaseException as exc:
                future.set_exception(exc)
            else:
                future.set_result(None)

        _sdk_import = future
        threading.Thread(target=run, name="wren-mcp-import", daemon=True).start()
    await asyncio.wrap_future(_sdk_import)


class McpManager:
    """Every configured server, used from any asyncio loop (see the module's note)."""

    def __init__(self, path: Path | None = None, *, start_timeout: float = START_TIMEOUT,
                 log_dir: Path | None = None):
        self.path = path
        self.log_dir = log_dir  # where each server's log is also written (None: memory only)
        self.start_timeout = start_timeout
        self._connections: dict[str, _Connection] = {}
        self._logs: dict[str, LogRing] = {}  # by server name; kept across restarts and edits
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: LoopThread | None = None
        self._guard = threading.Lock()
        self._closed = False
        self._listeners: list[Callable[[str], None]] = []
        self.version = 0  # goes up whenever some server's tools change

    # -- configuration (plain file work; no server starts) ---------------------------------

    def configs(self) -> dict[str, McpServerConfig]:
        return mcp_config.load(self.path)

    def config(self, name: str) -> McpServerConfig:
        found = self.configs().get(name)
        if found is None:
            raise NotFound(f"no MCP server named {name!r} (see `wren mcp list`)")
        return found

    async def add(self, server: McpServerConfig, *, replace: bool = False) -> McpServerConfig:
        servers = self.configs()
        if server.name in servers and not replace:
            raise InvalidRequest(f"an MCP server named {server.name!r} already exists; remove it first "
                                 "or choose another name")
        slug = server_slug(server.name)
        clash = next((n for n in servers if n != server.name and server_slug(n) == slug), None)
        if clash is not None:
            raise InvalidRequest(f"MCP server names {clash!r} and {server.name!r} give their tools the same "
                                 f"prefix {slug!r}; choose another name")
        servers[server.name] = server
        mcp_config.save(servers, self.path)
        await self._forget(server.name)
        return server

    async def remove(self, name: str) -> None:
        servers = self.configs()
        if name not in servers:
            raise NotFound(f"no MCP server named {name!r} (see `wren mcp list`)")
        del servers[name]
        mcp_config.save(servers, self.path)
        await self._forget(name)
        self._logs.pop(name, None)
        file = self.log_file(name)
        if file is not None:  # what it said goes with it
            for old in (file, file.with_name(file.name + ".1")):
                old.unlink(missing_ok=True)

    async def import_json(self, text: str) -> list[str]:
        """Add (or replace, by name) every server in an `mcpServers` JSON; all or nothing."""
        incoming = mcp_config.parse_servers(text)
        servers = self.configs()
        for server in incoming:
            servers[server.name] = server
        slugs: dict[str, str] = {}
        for name in servers:
            other = slugs.setdefault(server_slug(name), name)
            if other != name:
                raise InvalidRequest(f"MCP server names {other!r} and {name!r} give their tools the same "
                                     f"prefix {server_slug(name)!r}; rename one")
        mcp_config.save(servers, self.path)
        for server in incoming:
            await self._forget(server.name)
        return [server.name for server in incoming]

    async def set_enabled(self, name: str, enabled: bool) -> McpServerConfig:
        from dataclasses import replace as with_

        server = with_(self.config(name), enabled=enabled)
        return await self.add(server, replace=True)

    async def _forget(self, name: str) -> None:
        """Stop a server whose configuration changed; it starts again with the new one."""
        if self._loop is None:
            self._connections.pop(name, None)
            return
        await self._on_thread(self._forget_here(name))

    async def _forget_here(self, name: str) -> None:
        connection = self._connections.pop(name, None)
        if connection is not None:
            await connection.stop()
            self._changed(name)

    # -- state -------------------------------------------------------------------------------

    def states(self) -> list[McpServerState]:
        out = []
        for name, config in self.configs().items():
            connection = self._connections.get(name)
            if connection is None or connection.config != config:
                out.append(McpServerState(config, "stopped", None, ()))
                continue
            state = connection.state if connection.state in STATES else "stopped"
            out.append(McpServerState(config, state, connection.error, connection.tools,
                                      starting=connection.starting))
        return out

    def cached_tools(self, name: str) -> tuple[McpTool, ...]:
        """The tools a server listed when it last ran (none before its first start); no I/O."""
        connection = self._connections.get(name)
        return connection.tools if connection is not None else ()

    def log(self, name: str) -> str:
        self.config(name)  # NotFound for a name that is not configured
        ring = self._logs.get(name)
        return ring.text() if ring is not None else ""

    def log_file(self, name: str) -> Path | None:
        """Where a server's log is written, if it is (it may not exist yet)."""
        return self.log_dir / f"{server_slug(name)}.log" if self.log_dir is not None else None

    def note(self, name: str, text: str) -> None:
        """Add a line from Wren to a server's log (once: a repeated note is not added again)."""
        ring = self._logs.setdefault(name, LogRing(path=self.log_file(name)))
        if not any(line.endswith(f"wren: {text}") for line in ring.tail(50)):
            ring.add("wren", text)

    def _log_ring(self, config: McpServerConfig) -> LogRing:
        ring = self._logs.setdefault(config.name, LogRing(path=self.log_file(config.name)))
        ring.mask(config.env.values())
        return ring

    def add_listener(self, listener: Callable[[str], None]) -> None:
        """`listener(server_name)` runs (on the manager's thread) when a server's tools change."""
        self._listeners.append(listener)

    def _changed(self, name: str) -> None:
        self.version += 1
        for listener in list(self._listeners):
            try:
                listener(name)
            except Exception:
                log.exception("an MCP tools listener failed")

    # -- servers at work -----------------------------------------------------------------

    async def list_tools(self, names: Iterable[str] | None = None) -> list[McpTool]:
        """The tools of every enabled server (or of `names`), starting servers as needed.
        A server that fails is left out (its state and log say why); one that failed to
        start is not tried again by a listing for RETRY_AFTER seconds."""
        configs = self.configs()
        wanted = [c for c in configs.values() if c.enabled and (names is None or c.name in set(names))]
        if not wanted:
            return []
        return await self._on_thread(self._list_here(wanted))

    async def _list_here(self, wanted: list[McpServerConfig]) -> list[McpTool]:
        async def one(config: McpServerConfig) -> tuple[McpTool, ...]:
            connection = self._connection(config)
            if connection.state == "failed" and time.monotonic() - connection.failed_at < RETRY_AFTER:
                return ()
            try:
                await connection.ensure(self.start_timeout)
            except McpFailure:
                return ()
            return connection.tools

        results = await asyncio.gather(*(one(c) for c in wanted))
        return [tool for tools in results for tool in tools]

    async def test(self, name: str) -> list[McpTool]:
        """Start the server afresh and list its tools; McpFailure says why it cannot."""
        config = self.config(name)
        return await self._on_thread(self._test_here(config))

    async def _test_here(self, config: McpServerConfig) -> list[McpTool]:
        connection = self._connection(config)
        await connection.stop()
        await connection.ensure(self.start_timeout)
        return list(connection.tools)

    def resolve(self, qualified: str) -> tuple[str, str] | None:
        """(server, tool) for a `<server>__<tool>` name of a configured server, else None."""
        best = None
        for name in self.configs():
            prefix = server_slug(name) + SEPARATOR
            if qualified.startswith(prefix) and len(qualified) > len(prefix):
                if best is None or len(prefix) > len(server_slug(best)) + len(SEPARATOR):
                    best = name
        return (best, qualified[len(server_slug(best)) + len(SEPARATOR):]) if best else None

    async def call(self, qualified: str, arguments: dict[str, Any] | None) -> tuple[str, bool]:
        """Run `<server>__<tool>`; every fault is an error result (text, True), never a raise
        (a cancelled caller still raises CancelledError)."""
        found = self.resolve(qualified)
        if found is None:
            return f"there is no MCP tool named {qualified!r}", True
        server, tool = found
        config = self.configs()[server]
        if not config.enabled:
            return f"MCP server {server!r} is turned off in settings", True
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            return f"the arguments for {qualified!r} must be a JSON object, not {type(arguments).__name__}", True
        return await self._on_thread(self._connection(config).call(tool, arguments))

    def _connection(self, config: McpServerConfig) -> _Connection:
        connection = self._connections.get(config.name)
        if connection is None or connection.config != config:
            if connection is not None:  # edited by hand since: the old one goes
                old = connection
                old._background_task(old.stop())
            connection = self._connections[config.name] = _Connection(config, self)
        return connection

    # -- the thread ----------------------------------------------------------------------

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._guard:
            if self._closed:
                raise McpFailure("MCP servers are stopped: Wren is closing")
            if self._loop is None:
                _import_sdk()  # already done by _on_thread's callers; here for the others
                try:
                    self._thread = LoopThread("wren-mcp")  # a plain loop even under qasync's policy
                except RuntimeError as exc:
                    raise McpFailure(str(exc)) from exc
                self._loop = self._thread.loop
            return self._loop

    async def _on_thread(self, coro: Awaitable[Any]) -> Any:
        try:
            if self._loop is None:
                await _sdk_imported()
            loop = self._ensure_loop()
        except McpFailure:
            coro.close()  # type: ignore[attr-defined]
            raise
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))  # type: ignore[arg-type]

    async def _stop_all_here(self) -> None:
        await asyncio.gather(*(c.stop() for c in list(self._connections.values())), return_exceptions=True)

    async def aclose(self) -> None:
        """Stop every server and the manager's thread (Engine.close calls this)."""
        loop = self._loop
        with self._guard:
            self._closed = True
        if loop is None:
            return
        future = asyncio.run_coroutine_threadsafe(self._stop_all_here(), loop)
        try:
            await asyncio.wait_for(asyncio.wrap_future(future), STOP_TIMEOUT + 5)
        except (TimeoutError, Exception):
            log.warning("MCP servers did not all stop in time")
        await asyncio.get_running_loop().run_in_executor(None, self._stop_thread)

    def close(self) -> None:
        """The same as aclose, from code with no running loop."""
        loop = self._loop
        with self._guard:
            self._closed = True
        if loop is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._stop_all_here(), loop).result(STOP_TIMEOUT + 5)
        except (concurrent.futures.TimeoutError, Exception):
            log.warning("MCP servers did not all stop in time")
        self._stop_thread()

    def _stop_thread(self) -> None:
        thread = self._thread
        if thread is None:
            return
        thread.stop(5)
        self._loop = self._thread = None

