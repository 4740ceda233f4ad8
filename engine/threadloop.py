"""Plain asyncio loops for engine threads, whatever loop policy the front end installed.

The window runs on qasync, and `qasync.run` installs a policy under which
`asyncio.new_event_loop()` (and so `asyncio.run`) makes a Qt event loop. A Qt loop only runs
on the GUI thread: made for an engine thread it never starts (the MCP manager waited for it
forever and froze the window) or runs Qt timers and socket notifiers from the wrong thread
(remote answers hung, then the window crashed). Engine code that owns a loop on a thread
of its own makes it here, from asyncio's own classes.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

START_TIMEOUT = 10.0  # seconds for a new loop thread to come up


def plain_event_loop() -> asyncio.AbstractEventLoop:
    """A new asyncio loop of the platform's own kind, never the installed policy's."""
    if sys.platform == "win32":
        return asyncio.ProactorEventLoop()  # subprocesses (stdio MCP servers) need it there
    return asyncio.SelectorEventLoop()


def run_plain(coro: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run` on a plain loop: for a worker thread that runs one coroutine and ends."""
    with asyncio.Runner(loop_factory=plain_event_loop) as runner:
        return runner.run(coro)


class LoopThread(threading.Thread):
    """A daemon thread running a plain asyncio loop until `stop()`.

    `loop` is ready when the constructor returns; the thread keeps it as `wren_loop` so a
    test (or a debugger) can see which loop each engine thread runs."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.loop = self.wren_loop = plain_event_loop()
        self._started = threading.Event()
        self.start()
        if not self._started.wait(START_TIMEOUT):
            self.loop.call_soon_threadsafe(self.loop.stop)
            raise RuntimeError(f"the {name} thread's event loop did not start")

    def run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._started.set)
        try:
            self.loop.run_forever()
        finally:
            asyncio.set_event_loop(None)

    def submit(self, coro: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
        """Run `coro` on this thread's loop; await the result from another loop."""
        return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop the loop and wait for the thread; the loop is closed if the thread ended.
        True when it ended within `timeout`."""
        if self.loop.is_closed():
            return True
        self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self:
            self.join(timeout)
        if self.is_alive():
            return False
        self.loop.close()
        return True


async def wait_event(event: threading.Event, timeout: float | None = None, *, poll: float = 0.02) -> bool:
    """Wait for a thread's `event` from a loop without holding an executor thread: the
    loop's default executor is small (qasync's has 10 threads), and a blocking wait whose
    awaiting task was cancelled kept its thread until the event came, so enough of them
    starved every later `run_in_executor` (a provider test in the window hung that way).
    True once set, False after `timeout` seconds."""
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    while not event.is_set():
        if deadline is not None and loop.time() >= deadline:
            return False
        await asyncio.sleep(poll)
    return True
