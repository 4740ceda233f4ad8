"""The stdio transport to an MCP server, with a limit on one message's size.

The SDK's stdio client joins each chunk it reads onto the line read so far and splits the
whole again, so a 50 MB result costs quadratic time (over a minute) and its caller reports
a timeout instead of the truth. This transport is the SDK's (the same process start, pipe
tasks and shutdown, from its own helpers) with a linear line reader that stops keeping a
line past MAX_MESSAGE_BYTES: the rest is read and dropped, and the request it answered gets
an error saying how large it was and what the limit is. Where the SDK lacks those helpers,
its own client is used unchanged.
"""

from __future__ import annotations

import re
import sys
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from typing import Any, TextIO

# Larger than any result Wren keeps whole (mcp.MAX_RESULT_CHARS cuts to 200,000 characters),
# with room for a tool that sends a few MB; a limit a misbehaving server cannot push to GBs.
MAX_MESSAGE_BYTES = 32 << 20
RESULT_TOO_LARGE = -32099  # a JSON-RPC server error code of Wren's own: "the result was too large"
_HEAD, _TAIL = 4096, 256
_ID_AT_START = re.compile(rb'^\s*\{\s*"jsonrpc"\s*:\s*"2\.0"\s*,\s*"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")')
_ID_AT_END = re.compile(rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")\s*\}\s*$')


def too_large_text(size: int, limit: int = MAX_MESSAGE_BYTES) -> str:
    return f"the result was too large ({_mb(size)}; the limit is {_mb(limit)})"


def _mb(n: int) -> str:
    if n < 1 << 20:
        return f"{n:,} bytes"
    return f"{n / (1 << 20):.0f} MB" if n >= 10 << 20 else f"{n / (1 << 20):.1f} MB"


class _Oversized:
    """A line past the limit: its first and last bytes (where the request id is) and its size."""

    def __init__(self, head: bytes) -> None:
        self.head, self.tail, self.size = head[:_HEAD], head[-_TAIL:], len(head)

    def add(self, piece: bytes) -> None:
        self.size += len(piece)
        self.tail = (self.tail + piece)[-_TAIL:]

    def message(self, limit: int) -> Any:
        import json

        import mcp_types as types
        from mcp.shared.message import SessionMessage

        found = _ID_AT_START.match(self.head) or _ID_AT_END.search(self.tail)
        if found is None:  # no request to answer: the session logs it, the call times out
            return ValueError(f"an MCP message of {self.size} bytes was dropped: {too_large_text(self.size, limit)}")
        error = types.ErrorData(code=RESULT_TOO_LARGE, message=too_large_text(self.size, limit))
        return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=json.loads(found.group(1)), error=error))


async def read_messages(chunks: Any, deliver: Any, parse: Any, *, encoding: str = "utf-8",
                        errors: str = "strict", limit: int = MAX_MESSAGE_BYTES) -> None:
    """Split the byte `chunks` into lines (linear time) and `deliver` each parsed one; a line
    past `limit` bytes is not kept, and delivers an error for the request it answers."""
    pending = bytearray()
    oversized: _Oversized | None = None
    async for chunk in chunks:
        start = 0
        while True:
            newline = chunk.find(b"\n", start)
            end = len(chunk) if newline < 0 else newline
            if oversized is not None:
                oversized.add(chunk[start:end])
            else:
                pending += memoryview(chunk)[start:end]
                if len(pending) > limit:
                    oversized = _Oversized(bytes(pending[:_HEAD]) + bytes(pending[-_TAIL:]))
                    oversized.size = len(pending)
                    pending = bytearray()
            if newline < 0:
                break
            if oversized is not None:
                message, oversized = oversized.message(limit), None
            else:
                message = parse(pending.decode(encoding, errors))
                pending = bytearray()
            await deliver(message)
            start = newline + 1


@asynccontextmanager
async def stdio_client(server: Any, errlog: TextIO = sys.stderr,
                       limit: int = MAX_MESSAGE_BYTES) -> AsyncGenerator[Any, None]:
    """The SDK's stdio_client, reading the server's messages through read_messages."""
    from mcp.client import stdio as sdk

    needed = ("_create_platform_compatible_process", "_get_executable_command", "_drain_stdout",
              "_stop_server_process", "_aclose_all", "_parse_line", "_WRITER_FLUSH_TIMEOUT")
    if not all(hasattr(sdk, name) for name in needed):
        async with sdk.stdio_client(server, errlog=errlog) as streams:
            yield streams
        return
    async with _transport(sdk, server, errlog, limit) as streams:
        yield streams


@asynccontextmanager
async def _transport(sdk: Any, server: Any, errlog: TextIO, limit: int) -> AsyncGenerator[Any, None]:
    import anyio
    import anyio.lowlevel

    command = await sdk._get_executable_command(server.command)
    process = await sdk._create_platform_compatible_process(
        command=command, args=server.args, env=sdk.get_default_environment() | (server.env or {}),
        errlog=errlog, cwd=server.cwd)
    read_writer: Any
    read_stream: Any
    write_stream: Any
    write_reader: Any
    read_writer, read_stream = anyio.create_memory_object_stream(0)
    write_stream, write_reader = anyio.create_memory_object_stream(0)
    state = {"shutting_down": False}
    writer_done = anyio.Event()

    async def stdout_reader() -> None:
        try:
            async with read_writer:
                try:
                    await read_messages(process.stdout, read_writer.send, sdk._parse_line,
                                        encoding=server.encoding, errors=server.encoding_error_handler, limit=limit)
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    return  # the session is gone; only the drain below remains
                finally:
                    await sdk._drain_stdout(process)
        except anyio.ClosedResourceError:
            pass
        except (anyio.BrokenResourceError, ConnectionError):
            if not state["shutting_down"]:
                sdk.logger.exception("Reading from the MCP server's stdout failed mid-session")

    async def stdin_writer() -> None:
        try:
            async with write_reader:
                async for session_message in write_reader:
                    text = session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send((text + "\n").encode(server.encoding, server.encoding_error_handler))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_writer.aclose()
        finally:
            writer_done.set()

    async def shutdown() -> None:
        read_stream.close()
        write_stream.close()
        with anyio.move_on_after(sdk._WRITER_FLUSH_TIMEOUT) as flush_scope:
            await writer_done.wait()
        if flush_scope.cancelled_caught:
            await anyio.lowlevel.cancel_shielded_checkpoint()
        await sdk._stop_server_process(process)
        await sdk._aclose_all(read_stream, write_stream, read_writer, write_reader)
        await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        tg.start_soon(stdout_reader)
        tg.start_soon(stdin_writer)
        try:
            yield read_stream, write_stream
        finally:
            state["shutting_down"] = True
            with anyio.CancelScope(shield=True):  # the server must stop even when the caller is cancelled
                await shutdown()
            tg.cancel_scope.cancel()
    await anyio.lowlevel.cancel_shielded_checkpoint()
