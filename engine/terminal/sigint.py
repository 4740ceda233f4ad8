"""Ctrl+C in `wren chat`, routed to whoever should hear it.

A terminal's Ctrl+C is a signal to the whole process, and Linux may hand it to any thread
that does not block it. Python runs its handlers on the main thread only, so when the
kernel picks one of the engine's threads (the database thread, a worker, a tokenizer's pool)
while the main thread waits in readline for a line, the main thread never wakes: Ctrl+C at
the prompt did nothing (about one press in 200 with eight threads, measured on Linux 6.18).

`SigintRouter` makes the delivery deterministic. From `start()` on, SIGINT is blocked in the
main thread, so every thread made afterwards (by any thread) inherits the block, and one
thread of its own takes the signal with `sigwait`:
  - at the prompt (`prompt()`), the main thread unblocks it, so the signal lands there,
    directly or forwarded by the router with `pthread_kill`, and input() raises
    KeyboardInterrupt as before;
  - during an answer (`on_interrupt(callback)`), the callback runs on the event loop (the
    answer stops);
  - at any other time, the main thread is interrupted as Python would have done it
    (KeyboardInterrupt at its next instruction; a running loop is woken to notice).
Threads made before the block keep taking the signal: numpy's BLAS pool is made when numpy
is imported. So the `wren` command blocks SIGINT (`hold()`) before it imports anything else
(engine/terminal/launch.py), and gives it back (`release()`) once it knows the command is not
`wren chat`: then the main thread is the only one that takes it.
Where threads cannot block signals (Windows), or off the main thread, it does nothing and
Python's usual handling stays.
"""

from __future__ import annotations

import _thread
import asyncio
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_SIGINT = {signal.SIGINT}


def supported() -> bool:
    return (hasattr(signal, "pthread_sigmask") and hasattr(signal, "sigwait")
            and threading.current_thread() is threading.main_thread())


def hold() -> None:
    """Block SIGINT in the main thread: every thread made from now on inherits the block."""
    if supported():
        signal.pthread_sigmask(signal.SIG_BLOCK, _SIGINT)


def release() -> None:
    """Unblock SIGINT in the main thread (a press made meanwhile is raised now)."""
    if supported():
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGINT)


class SigintRouter:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._at_prompt = False
        self._callback: tuple[asyncio.AbstractEventLoop, Callable[[], object]] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._main = threading.main_thread().ident or 0
        self._active = False

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> SigintRouter:
        """Block SIGINT in this (the main) thread and start the thread that takes it.
        Call it before the engine makes its threads."""
        if not supported():
            return self
        self._loop = loop
        hold()
        self._active = True
        threading.Thread(target=self._wait, name="wren-sigint", daemon=True).start()
        return self

    def stop(self) -> None:
        """Unblock SIGINT in the main thread again (the router thread stays, idle: a signal
        now lands on the main thread, which no longer blocks it)."""
        if self._active:
            self._active = False
            release()

    @contextmanager
    def prompt(self) -> Iterator[None]:
        """Around a blocking read on the main thread: Ctrl+C raises KeyboardInterrupt in it."""
        if not self._active:
            yield
            return
        with self._lock:
            self._at_prompt = True
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGINT)
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_BLOCK, _SIGINT)
            with self._lock:
                self._at_prompt = False
                # A press forwarded just as the line ended must not wait, pending, to
                # interrupt the next prompt.
                if signal.SIGINT in signal.sigpending():
                    signal.sigtimedwait(_SIGINT, 0)

    @contextmanager
    def on_interrupt(self, callback: Callable[[], object]) -> Iterator[bool]:
        """While inside, Ctrl+C calls `callback` on the running loop. Yields whether the
        router handles it (else the caller keeps Python's own handling)."""
        if not self._active:
            yield False
            return
        loop = asyncio.get_running_loop()
        with self._lock:
            self._callback = (loop, callback)
        try:
            yield True
        finally:
            with self._lock:
                self._callback = None

    def _wait(self) -> None:
        while True:
            signal.sigwait(_SIGINT)
            self._route()

    def _route(self) -> None:
        with self._lock:
            if self._at_prompt:
                signal.pthread_kill(self._main, signal.SIGINT)  # unblocked there: input() raises
                return
            target = self._callback
        if target is not None:
            loop, callback = target
            try:
                loop.call_soon_threadsafe(callback)
            except RuntimeError:  # the loop closed meanwhile
                pass
            return
        _thread.interrupt_main()  # as an unrouted Ctrl+C would: KeyboardInterrupt in the main thread
        waiting = self._loop
        if waiting is not None and not waiting.is_closed():
            try:
                waiting.call_soon_threadsafe(lambda: None)  # wake a waiting loop to notice it
            except RuntimeError:
                pass
