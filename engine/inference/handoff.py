"""Events from the inference thread to an asyncio loop, with one wake-up per burst.

A request's `sink` runs on the inference thread. Handing each event over with its own
`loop.call_soon_threadsafe` wakes the loop once per event: a write to its self-pipe, an
epoll return, a read, each some tens of microseconds on a small machine, for every token of
every answer. When a batched decoding step finishes, it produces one event per sequence
within microseconds, and the loop would wake for each. Here the events wait in one inbox
per loop, and only the first of a burst schedules a wake-up; the loop then puts everything
that arrived meanwhile into its queues, in arrival order (so each queue's order is kept).
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any


class _Inbox:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._items: deque[tuple[asyncio.Queue, Any]] = deque()
        self._lock = threading.Lock()
        self._scheduled = False

    def put(self, queue: asyncio.Queue, event: Any) -> None:
        """From any thread: `event` reaches `queue` on the loop, after everything put before it."""
        with self._lock:
            if self._scheduled and self._loop.is_closed():  # the wake-up on its way never ran
                self._items.clear()
                self._scheduled = False
            self._items.append((queue, event))
            if self._scheduled:
                return  # a wake-up is on its way and will take this one too
            self._scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._deliver)
        except RuntimeError:  # the loop is closed: nothing will ever read these queues
            with self._lock:
                self._items.clear()
                self._scheduled = False
            raise

    def _deliver(self) -> None:
        with self._lock:
            items, self._items = self._items, deque()
            self._scheduled = False
        for queue, event in items:
            queue.put_nowait(event)


_inboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Inbox] = weakref.WeakKeyDictionary()
_inboxes_lock = threading.Lock()


def loop_sink(queue: asyncio.Queue, loop: asyncio.AbstractEventLoop | None = None) -> Callable[[Any], None]:
    """A sink for a GenerationRequest: callable from any thread, it delivers each event
    into `queue` on `loop` (the running loop by default)."""
    loop = loop or asyncio.get_running_loop()
    with _inboxes_lock:
        inbox = _inboxes.get(loop)
        if inbox is None:
            inbox = _inboxes[loop] = _Inbox(loop)
    return partial(inbox.put, queue)
