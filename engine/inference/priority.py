"""The scheduling priority of Wren's compute threads.

Decoding keeps every core busy, one torch thread per core. Anything else that wakes up on
the same machine — the window's own thread, a program reading `wren serve`'s stream, the
user's other apps — then waits for a core until the scheduler takes one from Wren: measured
on a 2-core machine, a local HTTP client saw each streamed chunk 3.5 ms (median) after the
server wrote it. With the compute threads a few nice levels below the rest, a thread that
wakes runs at once (under 1 ms there), and Wren loses nothing when the machine is otherwise
idle; when other programs are busy too, Wren takes a smaller share of the CPU than they do.

The inference thread and the background compile thread lower themselves before they do any
work, so the thread pools torch creates from them (OpenMP teams belong to the thread that
starts them) inherit the priority; the event loop, the window and the caller's threads keep
theirs. Linux only (a thread's nice value is its own there); `WREN_COMPUTE_NICE=0` turns it
off, another value sets how many levels (1-19).
"""

from __future__ import annotations

import logging
import os
import sys
import threading

log = logging.getLogger(__name__)

ENV = "WREN_COMPUTE_NICE"
DEFAULT_LEVELS = 5


def levels() -> int:
    """How many nice levels compute threads go below the thread that starts them."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return DEFAULT_LEVELS
    try:
        value = int(raw)
    except ValueError:
        log.warning("%s=%r is not a whole number from 0 to 19; using %d", ENV, raw, DEFAULT_LEVELS)
        return DEFAULT_LEVELS
    return min(max(value, 0), 19)


def set_this_thread_nice(value: int) -> int | None:
    """Set the calling thread's own nice value (Linux); the value afterwards, or None where
    nothing changed (another system, or not permitted: a sandbox, or raising without root)."""
    if not sys.platform.startswith("linux"):
        return None
    tid = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, tid, value)
        return os.getpriority(os.PRIO_PROCESS, tid)
    except OSError as exc:
        log.info("could not change the compute thread's priority: %s", exc)
        return None


def lower_this_thread() -> int | None:
    """Lower the calling thread's priority by `levels()` (never raise it); its nice value
    afterwards, or None where nothing changed (another system, off, or not permitted)."""
    n = levels()
    if n == 0 or not sys.platform.startswith("linux"):
        return None
    return set_this_thread_nice(min(19, os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) + n))
