"""Events from the inference thread to an asyncio loop, with one wake-up per burst.

A request's `sink` runs on the inference thread. Handing each event over with its own
`loop.call_soon_threadsafe` wakes the loop once per event: a write to its self-pipe, an
epoll return, a read, each some tens of microseconds on a small machine, for every token of
every answer. When a batched decoding step finishes, it produces one event per sequence
within microseconds, and the loop would wake for each. Here the events wait in one inbox
per loop, and only the first of a burst schedules a wake-up; the loop then puts everything
that arrived meanwhile into its queues, in arrival order (so each queue's order is kept).

A request's first event is also handed over: the thread that puts it waits (at most
HANDOVER_WAIT) until the loop has taken it. A producer that runs Python between events
(a scripted or remote backend, the detokenizer and sampler of any) holds the GIL, and a
loop woken to deliver then waits for the interpreter's switch interval (5 ms) before it
may run; the first token is the one a user waits for, so it goes first. Later events are
not waited on: the stream goes on at the model's pace.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

HANDOVER_WAIT = 0.005  # seconds a request's first event waits for the loop to take it (the switch interval)


class _Inbox:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._items: deque[tuple[asyncio.Queue, Any]] = deque()
        self._lock = threading.Lock()
        self._scheduled = False
        self._taken: threading.Event | None = None  # set once the scheduled wake-up delivered

    def put(self, queue: asyncio.Queue, event: Any, wait: float = 0.0) -> None:
        """From any thread: `event` reaches `queue` on the loop, after everything put before it.
        `wait` > 0: if the loop has to be woken for it, wait up to that long until it is
        delivered (never from the loop's own thread: it would wait for itself)."""
        with self._lock:
            if self._scheduled and self._loop.is_closed():  # the wake-up on its way never ran
                self._items.clear()
                self._scheduled = False
                self._taken = None
            self._items.append((queue, event))
            if self._scheduled:
                return  # a wake-up is on its way and will take this one too
            self._scheduled = True
            taken = self._taken = threading.Event() if wait > 0 else None
        try:
            self._loop.call_soon_threadsafe(self._deliver)
        except RuntimeError:  # the loop is closed: nothing will ever read these queues
            with self._lock:
                self._items.clear()
                self._scheduled = False
                self._taken = None
            raise
        if taken is not None:
            taken.wait(wait)  # releases the GIL: the loop takes it and delivers

    def _deliver(self) -> None:
        with self._lock:
            items, self._items = self._items, deque()
            self._scheduled = False
            taken, self._taken = self._taken, None
        for queue, event in items:
            queue.put_nowait(event)
        if taken is not None:
            taken.set()


class _Sink:
    """A request's sink: its first event is handed over (HANDOVER_WAIT), the rest just put."""

    __slots__ = ("_inbox", "_loop_thread", "_queue")

    def __init__(self, inbox: _Inbox, queue: asyncio.Queue, loop_thread: int | None) -> None:
        self._inbox = inbox
        self._queue = queue
        self._loop_thread = loop_thread  # until the first event: the loop's thread, if known

    def __call__(self, event: Any) -> None:
        loop_thread, self._loop_thread = self._loop_thread, None
        wait = HANDOVER_WAIT if loop_thread is not None and loop_thread != threading.get_ident() else 0.0
        self._inbox.put(self._queue, event, wait)


_inboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Inbox] = weakref.WeakKeyDictionary()
_inboxes_lock = threading.Lock()


def loop_sink(queue: asyncio.Queue, loop: asyncio.AbstractEventLoop | None = None) -> Callable[[Any], None]:
    """A sink for a GenerationRequest: callable from any thread, it delivers each event
    into `queue` on `loop` (the running loop by default); the first is handed over."""
    running = asyncio._get_running_loop()
    loop = loop or asyncio.get_running_loop()
    with _inboxes_lock:
        inbox = _inboxes.get(loop)
        if inbox is None:
            inbox = _inboxes[loop] = _Inbox(loop)
    # made on the loop's own thread (as the engine makes them): a put from another waits
    return _Sink(inbox, queue, threading.get_ident() if running is loop else None)
