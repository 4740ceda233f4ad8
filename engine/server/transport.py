"""How `wren serve` meets the network: a write timeout for clients that stop reading, a
streamed response that always closes its source, and a uvicorn server whose Ctrl+C stops
the answers first and ends without re-raising the signal (the caller reports it).

- A client that reads nothing lets its socket buffers fill; each write then waits. After
  `write_timeout` seconds of one write waiting, the connection is aborted and the
  response's source is closed, so the answer's queue slot and sequence are freed.
- On Ctrl+C (or SIGTERM) the running answers are stopped first (stored as stopped, with
  the text they had), so open streams end promptly with their final chunk instead of
  being cut by uvicorn's graceful-shutdown timeout with a traceback per connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import signal
import threading
from collections.abc import Callable, Iterator

import uvicorn
from starlette.responses import StreamingResponse

from ..logs import log_event

_dropped: contextvars.ContextVar[bool] = contextvars.ContextVar("wren_server_dropped", default=False)


class WriteTimeout:
    """Pure ASGI wrapper, outermost: each write may wait at most `seconds` on the client,
    then the connection is aborted. A timer per write, not a task: it costs next to
    nothing on a stream's every chunk."""

    def __init__(self, app, seconds: float):
        self.app = app
        self.seconds = seconds
        self.shutting_down = False  # set by Server.shutdown: cancellations then are expected

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            transport = _transport(send)
            if transport is not None:
                transport.abort()  # uvicorn then sees the connection lost: the waiting write returns
            elif task is not None:
                task.cancel()

        async def timed_send(message) -> None:
            # after an abort, uvicorn's send returns at once (the client is gone) and the
            # response sees the disconnect: the stream ends, its source is closed
            timer = loop.call_later(self.seconds, expire)
            try:
                await send(message)
            finally:
                timer.cancel()

        try:
            await self.app(scope, receive, timed_send)
        except asyncio.CancelledError:
            if not (expired or self.shutting_down):
                raise
            if expired and task is not None:
                task.uncancel()
            _dropped.set(True)  # uvicorn's complaint about the unfinished response is expected now
        if expired:
            log_event("server.slow_reader", path=scope.get("path"), seconds=self.seconds, level=30)


def _transport(send):
    """The connection's transport, to abort it: close() would wait for the unread buffer to
    drain, which a client that reads nothing never lets happen. uvicorn's send is a method
    of its request cycle, which holds the transport."""
    return getattr(getattr(send, "__self__", None), "transport", None)


class ClosingStream(StreamingResponse):
    """A StreamingResponse that closes its source however the sending ends (a client gone,
    a write timeout), so the source's cleanup (releasing its slot, stopping its sequence)
    runs now, not whenever the abandoned generator is collected."""

    async def stream_response(self, send) -> None:
        try:
            await super().stream_response(send)
        finally:
            close = getattr(self.body_iterator, "aclose", None)
            if close is not None:
                await close()


# -- the server --------------------------------------------------------------------------


class _QuietDrops(logging.Filter):
    """uvicorn's complaints about connections Wren dropped on purpose stay out of the terminal."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _dropped.get()


class Server(uvicorn.Server):
    """uvicorn.Server that calls `on_shutdown` (stop the answers) before closing connections,
    and records a Ctrl+C or SIGTERM in `signals` instead of raising it again afterwards."""

    def __init__(self, config: uvicorn.Config, on_shutdown: Callable[[], None]):
        super().__init__(config)
        self.on_shutdown = on_shutdown
        self.signals: list[int] = []
        errors = logging.getLogger("uvicorn.error")
        if not any(isinstance(f, _QuietDrops) for f in errors.filters):
            errors.addFilter(_QuietDrops())

    def handle_exit(self, sig: int, frame) -> None:
        self.signals.append(sig)
        super().handle_exit(sig, frame)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        original = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)

    async def shutdown(self, sockets=None) -> None:
        self.on_shutdown()
        await super().shutdown(sockets=sockets)
