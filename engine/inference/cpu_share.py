"""Turns on the CPU for every model a user runs on it, across Wren's processes.

Each CPU model computes with a pool of threads as wide as the machine. Two of them at once
(the window and a resident engine, `wren serve` beside the window, two models in one
engine) put twice as many busy threads as cores: every parallel region then waits at its
barrier for a thread the other pool has pushed off its core, and both fell from ~95 to
under 1 token/s on a 2-core machine. Models here take turns instead: one computes with
all cores while the others sleep in the kernel, and a model that has had the CPU for a
time slice hands it to one that waits. Alone, a model pays a few lock calls per step.

The turns are two `flock` locks on files in the user's private runtime folder, so they
need no server, work across processes and threads, and vanish with a process that dies:
- `turn`: held exclusively by the model computing now;
- `waiting`: held shared by each model that waits for the turn, so the one computing can
  see, without blocking, that somebody waits.

A waiter sleeps in the kernel until the turn is free, with a deadline: a holder that never
gives the turn back (a stuck process) slows the others, it never stops them.
`WREN_CPU_SHARE=0` turns the turns off.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .. import switches

log = logging.getLogger(__name__)

SLICE_SECONDS = 0.2  # how long a model keeps the CPU while another waits
WAIT_LIMIT_SECONDS = 10.0  # past this a waiter computes anyway (and says so in the log)
HANDOVER_SECONDS = 0.05  # how long a model that gave the turn waits to see it taken
IDLE_SECONDS = 0.02  # a model that has not stepped for this long gives its turn back
CANCEL_POLL_SECONDS = 0.05  # how often a waiter looks whether its work was cancelled

try:
    import fcntl
except ImportError:  # Windows: no flock; models there compute as before
    fcntl = None  # type: ignore[assignment]


def runtime_folder() -> Path | None:
    """The user's private folder for the turns' lock files, one for every data folder
    (two engines on different WREN_HOMEs share the same cores), or None where there is none
    that is safe (a folder other users could write to would let them stall Wren)."""
    from ..paths import DataFolderError, private_runtime_dir

    base = os.environ.get("XDG_RUNTIME_DIR")
    if base and Path(base).is_dir():
        folder = Path(base) / "wren"
    else:
        folder = Path(tempfile.gettempdir()) / f"wren-{os.getuid()}"
    try:
        return private_runtime_dir(folder)
    except (DataFolderError, OSError) as exc:
        log.warning("models here will not share the CPU: %s", exc)
        return None


class CpuShare:
    """One model's side of the turns, stepped from that model's inference thread.

    Between steps the model keeps the turn while nobody waits (no lock calls at all) and
    for a time slice when somebody does; a model that stops stepping without `rest()` (a
    caller outside a worker) gives the turn back after IDLE_SECONDS, from a small timer
    thread, so an idle model never keeps another waiting."""

    def __init__(self, folder: Path, *, slice_seconds: float = SLICE_SECONDS,
                 wait_limit: float = WAIT_LIMIT_SECONDS) -> None:
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        self._turn = os.open(folder / "cpu-turn", flags, 0o600)
        self._waiting = os.open(folder / "cpu-waiting", flags, 0o600)
        self.slice_seconds = slice_seconds
        self.wait_limit = wait_limit
        self._guard = threading.Lock()  # the held state, shared with the idle timer
        self._idle = threading.Condition(self._guard)
        self._held_since: float | None = None  # when this model took the turn it holds
        self._stepping = False
        self._last_step = 0.0
        self._hand_over = False  # another model waited when this one gave the turn up
        self._ignore_until = 0.0  # after a holder kept the turn past wait_limit
        self._abandoned: threading.Thread | None = None  # a wait given up on, still blocked
        # Whether the work that steps now was cancelled (set by the model's worker): a wait
        # for the turn ends then, so Stop and Ctrl+C are not held up by another model's slice.
        self.cancelled: Callable[[], bool] | None = None
        self._timer: threading.Thread | None = None
        self._closed = False
        self.waited_seconds = 0.0  # totals, for benchmarks and tests
        self.turns_taken = 0

    @classmethod
    def for_this_user(cls) -> CpuShare | None:
        """The turns in the user's runtime folder; None where they are off or impossible."""
        if fcntl is None or switches.off("WREN_CPU_SHARE"):
            return None
        folder = runtime_folder()
        if folder is None:
            return None
        try:
            return cls(folder)
        except OSError as exc:
            log.warning("cannot open the CPU turns in %s: %s", folder, exc)
            return None

    @property
    def holding(self) -> bool:
        return self._held_since is not None

    @contextmanager
    def step(self) -> Iterator[None]:
        """Compute one step (a prompt chunk, a decode step) on the turn."""
        with self._guard:
            self._stepping = True
            held = self._held_since is not None
        if not held:
            self._take()
        try:
            yield
        finally:
            with self._guard:
                self._stepping = False
                self._last_step = time.monotonic()
                if (self._held_since is not None and self._last_step - self._held_since >= self.slice_seconds
                        and self._others_wait()):
                    self._give()
                elif self._held_since is not None:
                    self._watch_idle()

    def rest(self) -> None:
        """Nothing more to compute for now: give the turn back."""
        with self._guard:
            if self._held_since is not None and not self._stepping:
                self._give()

    def close(self) -> None:
        with self._guard:
            self._closed = True
            if self._held_since is not None:
                self._give()
            self._idle.notify_all()
        for fd in (self._turn, self._waiting):
            try:
                os.close(fd)
            except OSError:
                pass

    # -- the locks -----------------------------------------------------------------------

    def _take(self) -> None:
        started = time.monotonic()
        if self._abandoned is not None and self._abandoned.is_alive():
            return self._took(started)  # a wait given up on still blocks on the lock: compute without
        if self._hand_over:
            self._hand_over = False
            self._let_the_waiter_in()
        if not self._try(self._turn, fcntl.LOCK_EX) and started >= self._ignore_until:
            fcntl.flock(self._waiting, fcntl.LOCK_SH)  # seen by the holder's _others_wait
            try:
                waited = self._wait_for_turn()
                if waited is None:
                    log.warning("another Wren model kept the CPU for over %.0f s; computing anyway",
                                self.wait_limit)
                    self._ignore_until = time.monotonic() + 3 * self.wait_limit
            finally:
                fcntl.flock(self._waiting, fcntl.LOCK_UN)
            self.waited_seconds += time.monotonic() - started
        self._took(started)

    def _took(self, started: float) -> None:
        with self._guard:
            self._held_since = time.monotonic()
        self.turns_taken += 1

    def _wait_for_turn(self) -> bool | None:
        """Block for the turn, at most wait_limit seconds. The waiting is a blocking flock
        on a thread of its own, asleep in the kernel until the turn is free: a waiter that
        polled took CPU from the model computing, and a thread pulled out of a parallel
        region stalls all of that model's threads. True: the turn is ours; False: the work
        waiting for it was cancelled meanwhile (its one step runs at once, so the stop is
        quick); None: the wait outlasted wait_limit."""
        got = threading.Event()
        gave_up = threading.Event()
        decided = threading.Lock()

        def block() -> None:
            try:
                fcntl.flock(self._turn, fcntl.LOCK_EX)
                with decided:
                    if gave_up.is_set():
                        fcntl.flock(self._turn, fcntl.LOCK_UN)  # nobody wants it any more
                    else:
                        got.set()
            except OSError:  # the share was closed meanwhile
                return

        waiter = threading.Thread(target=block, name="wren-cpu-wait", daemon=True)
        waiter.start()
        deadline = time.monotonic() + self.wait_limit
        cancelled = self.cancelled
        while not got.wait(min(CANCEL_POLL_SECONDS, max(0.0, deadline - time.monotonic()))):
            stop = cancelled is not None and cancelled()
            if stop or time.monotonic() >= deadline:
                with decided:
                    if got.is_set():
                        return True
                    gave_up.set()
                self._abandoned = waiter
                return False if stop else None
        return True

    def _give(self) -> None:
        """Unlock the turn; called with the guard held."""
        self._hand_over = self._others_wait()
        fcntl.flock(self._turn, fcntl.LOCK_UN)
        self._held_since = None

    def _watch_idle(self) -> None:
        """Start the idle timer if it is not running; called with the guard held."""
        if self._timer is None or not self._timer.is_alive():
            self._timer = threading.Thread(target=self._release_when_idle, name="wren-cpu-turn", daemon=True)
            self._timer.start()

    def _release_when_idle(self) -> None:
        with self._guard:
            while self._held_since is not None and not self._closed:
                if not self._stepping and time.monotonic() - self._last_step >= IDLE_SECONDS:
                    self._give()
                    return
                self._idle.wait(IDLE_SECONDS)

    def _others_wait(self) -> bool:
        if self._try(self._waiting, fcntl.LOCK_EX):
            fcntl.flock(self._waiting, fcntl.LOCK_UN)
            return False
        return True

    def _let_the_waiter_in(self) -> None:
        """After giving the turn to a waiter, wait (briefly) until it has taken it, so this
        model does not take it straight back before the waiter has woken up."""
        deadline = time.monotonic() + HANDOVER_SECONDS
        while time.monotonic() < deadline:
            if not self._try(self._turn, fcntl.LOCK_SH):
                return  # somebody holds it now
            fcntl.flock(self._turn, fcntl.LOCK_UN)
            if not self._others_wait():
                return  # the waiter gave up or is gone
            time.sleep(0.0002)

    @staticmethod
    def _try(fd: int, kind: int) -> bool:
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True
