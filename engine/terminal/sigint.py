"""Ctrl+C in `wren chat`, routed to whoever should hear it.

A terminal's Ctrl+C is a signal to the whole process, and Linux may hand it to any thread
that does not block it. Python runs its handlers on the main thread only, so when the
kernel picks one of the engine's threads (the database thread, a worker, a tokenizer's pool)
while the main thread waits in readline for a line, the main thread never wakes: Ctrl+C at
the prompt did nothing (about one press in 200 with eight threads, measured on Linux 6.18).

`SigintRouter` makes the delivery deterministic. From `start()` on, SIGINT is blocked in the
main thread, so every thread made afterwards (by any thread) inherits the block, and one
thread of its own takes the signal with `sigwait`:
  - at the prompt (`prompt()`), before readline has taken Enter, the router nudges the main thread with a signal of its own
    (NUDGE, sent with `pthread_kill`) until input() has raised KeyboardInterrupt. One signal
    is not enough: CPython's readline looks for signals only when its select() is
    interrupted, so a signal that came while it was taking a key (echoing it, or preempted
    just after, under load) was noticed only at the next key: Ctrl+C did nothing. Repeated,
    one lands in select(). And the terminal keeps the keys typed before a Ctrl+C (NOFLSH):
    discarded between readline's select() and its read(), they left read() waiting, and
    readline restarts a read() that a signal interrupts;
  - at the prompt, once readline has taken Enter (its line is given back and the terminal
    is out of its raw mode) but before input() has returned it to the chat, the press is
    carried to the answer that line asks for, as a press after the prompt is (`busy()`).
    Raised there, it dropped a line whose new line was already on the screen (one press in
    about 50 right after Enter, on two busy cores). Readline says a line has begun through
    its pre-input hook (`line_begun`); between the lines of one message a carried press
    drops the message (`before_read`);
  - during an answer (`on_interrupt(callback)`), the callback runs on the event loop (the
    answer stops);
  - between a prompt and the answer it asked for (`busy()`), the press is kept and given to
    the answer's callback as soon as it is set: a press right after Enter stops the answer
    it meant to stop, instead of interrupting the main thread wherever it was (that left the
    engine's threads mid-step, and the process aborted as it exited);
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
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

_SIGINT = {signal.SIGINT}
# The nudge: a real-time signal where there are some (nothing else in Wren uses them), else SIGUSR2.
NUDGE: int | None = signal.SIGRTMIN + 7 if hasattr(signal, "SIGRTMIN") else getattr(signal, "SIGUSR2", None)
NUDGE_EVERY = 0.02  # seconds between nudges
NUDGE_FOR = 5.0  # a main thread that has not raised by then is not at a read that can be interrupted


def caused_by_ctrl_c(exc: BaseException) -> bool:
    """Whether a Ctrl+C is behind `exc`. A KeyboardInterrupt raised inside a compiled module's
    import comes back as the ImportError ("initialization failed") it caused: a press just as
    `wren chat --voice` began to listen (onnxruntime loading) ended in a crash report."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return True
        seen.add(id(current))
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    return False


@contextmanager
def ctrl_c_kept() -> Iterator[None]:
    """Inside, an error a Ctrl+C caused raises as the KeyboardInterrupt it was."""
    try:
        yield
    except Exception as exc:
        if caused_by_ctrl_c(exc):
            raise KeyboardInterrupt from exc
        raise


def supported() -> bool:
    return (hasattr(signal, "pthread_sigmask") and hasattr(signal, "sigwait") and NUDGE is not None
            and threading.current_thread() is threading.main_thread())


def hold() -> None:
    """Block SIGINT in the main thread: every thread made from now on inherits the block."""
    if supported():
        signal.pthread_sigmask(signal.SIG_BLOCK, _SIGINT)


def release() -> None:
    """Unblock SIGINT in the main thread (a press made meanwhile is raised now)."""
    if supported():
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGINT)


@contextmanager
def _typeahead_kept() -> Iterator[None]:
    """While inside, Ctrl+C on the terminal does not discard the keys typed before it (NOFLSH).
    Readline waits for a key with select() and then reads it: a Ctrl+C between the two that
    discarded the key left read() waiting for the next one, where signals are not looked at.
    Kept, the keys are read, and the line they are in is dropped with the Ctrl+C."""
    try:
        import termios
    except ImportError:  # Windows
        yield
        return
    try:
        fd = sys.stdin.fileno()
        before = termios.tcgetattr(fd)
    except (AttributeError, ValueError, OSError, termios.error):  # not a terminal: nothing is discarded
        yield
        return
    if before[3] & termios.NOFLSH:
        yield
        return
    kept = list(before)
    kept[3] = before[3] | termios.NOFLSH
    termios.tcsetattr(fd, termios.TCSANOW, kept)
    try:
        yield
    finally:
        try:
            now = termios.tcgetattr(fd)
            now[3] &= ~termios.NOFLSH
            termios.tcsetattr(fd, termios.TCSANOW, now)
        except (OSError, termios.error):  # the terminal went away
            pass


def _terminal_cooked() -> bool:
    """Whether the terminal on stdin is in canonical (line) mode: readline reads in raw mode
    and gives the terminal back in canonical mode as it takes Enter. False where it cannot tell."""
    try:
        import termios
    except ImportError:  # Windows
        return False
    try:
        return bool(termios.tcgetattr(sys.stdin.fileno())[3] & termios.ICANON)
    except (AttributeError, ValueError, OSError, termios.error):  # not a terminal
        return False


class SigintRouter:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._at_prompt = False
        self._callback: tuple[asyncio.AbstractEventLoop, Callable[[], object]] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._main = threading.main_thread().ident or 0
        self._active = False
        self._prompts = 0  # counts prompts, so a press is acted on at the prompt it was made at only
        self._wanted: int | None = None  # the prompt a press is waiting to interrupt
        self._busy = False  # inside busy(): a press with no callback to take it is kept
        self._pending = False  # a press kept for the next callback
        self._begun = False  # readline has begun the line being read (its pre-input hook ran)
        self._carried = False  # a press made after readline took Enter, for what the line asks

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> SigintRouter:
        """Block SIGINT in this (the main) thread and start the thread that takes it.
        Call it before the engine makes its threads."""
        if not supported() or NUDGE is None:
            return self
        self._loop = loop
        hold()
        signal.signal(NUDGE, self._nudged)
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
        try:  # a press from here on raises inside the try, so the finally always runs
            with self._lock:
                self._prompts += 1
                self._wanted = None
                self._begun = self._carried = False
                self._at_prompt = True
            with _typeahead_kept():
                yield
        finally:
            self._at_prompt = False  # first: a nudge still on its way is ignored from here on
            with self._lock:
                self._wanted = None
                if self._carried and self._busy:  # for the answer about to start (on_interrupt)
                    self._pending = True
                self._carried = False

    def line_begun(self) -> None:
        """Readline's pre-input hook: the line being read has begun (the terminal is in
        readline's raw mode from here until it takes Enter)."""
        self._begun = True

    def before_read(self) -> None:
        """Before each line read inside `prompt()`: a press carried from the line before
        (a message of several lines) drops the message, as a press at the prompt does."""
        self._begun = False
        if self._carried:
            self._carried = False
            raise KeyboardInterrupt

    def _nudged(self, signum: int, frame: FrameType | None) -> None:
        """NUDGE's handler, on the main thread: KeyboardInterrupt once per press at the prompt;
        nudges after it, or away from the prompt, do nothing."""
        if self._at_prompt and self._wanted == self._prompts:
            self._wanted = None
            if self._begun and _terminal_cooked():  # readline has taken Enter: not a press at the prompt
                self._carried = True
                return
            raise KeyboardInterrupt

    @contextmanager
    def busy(self) -> Iterator[None]:
        """Around what the main thread does between two prompts (a message sent and answered,
        a command): a Ctrl+C that no `on_interrupt` callback takes yet is kept for the next one
        set inside, which gets it at once; one still kept when this ends is dropped."""
        if not self._active:
            yield
            return
        with self._lock:
            was_busy = self._busy
            self._busy, self._pending = True, False
        try:
            yield
        finally:
            with self._lock:
                self._busy, self._pending = was_busy, False

    @contextmanager
    def on_interrupt(self, callback: Callable[[], object]) -> Iterator[bool]:
        """While inside, Ctrl+C calls `callback` on the running loop (and a press kept by
        `busy()` calls it at once). Yields whether the router handles it (else the caller
        keeps Python's own handling)."""
        if not self._active:
            yield False
            return
        loop = asyncio.get_running_loop()
        with self._lock:
            self._callback = (loop, callback)
            kept, self._pending = self._pending, False
        if kept:
            loop.call_soon(callback)
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
                self._wanted = self._prompts
                press = self._prompts
            else:
                press = None
            target = self._callback
            if press is None and target is None and self._busy:
                self._pending = True  # for the answer about to start (on_interrupt)
                return
        if press is not None:
            self._nudge(press)
            return
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

    def _nudge(self, press: int) -> None:
        """Nudge the main thread until the press made at prompt `press` has raised there (or
        that prompt ended, or NUDGE_FOR passed)."""
        deadline = time.monotonic() + NUDGE_FOR
        while self._at_prompt and self._wanted == press == self._prompts and time.monotonic() < deadline:
            signal.pthread_kill(self._main, NUDGE or signal.SIGINT)  # NUDGE is set where the router runs
            time.sleep(NUDGE_EVERY)
