"""Giving an unloaded model's memory back to the system (after its worker has closed).

A model's objects form reference cycles (torch modules point at their parents), and the
next worker freezes whatever exists once its own model has loaded (`gc.freeze`, worker.py
says why): a cycle not yet collected then lives as long as the next model. So the old one
is collected at once (on the event loop's thread), then the caches that keep its memory are emptied (torch's device
caches, compiled graphs) and glibc's freed heap is handed back (`malloc_trim`).
"""

from __future__ import annotations

import ctypes
import gc
import logging
import sys

log = logging.getLogger(__name__)


def trim_heap() -> None:
    """Hand glibc's freed heap back to the system; nothing elsewhere."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):  # not glibc
            pass


def _empty_torch_caches() -> None:
    torch = sys.modules.get("torch")  # never imported here: a process without it has nothing to free
    if torch is None:
        return
    try:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        mps = getattr(torch, "mps", None)
        if mps is not None and torch.backends.mps.is_available():
            mps.empty_cache()
        dynamo = sys.modules.get("torch._dynamo")
        if dynamo is not None:  # the unloaded model's compiled graphs and guards
            dynamo.reset()
    except Exception as exc:  # a cache that cannot be emptied keeps its memory, no more
        log.warning("could not empty torch's caches: %s", exc)


def collect_garbage() -> None:
    """Collect the unloaded model's cycles, on the event loop's thread (~0.1 s with torch
    and the window loaded). Never in a worker thread: a cycle can hold objects that must die
    in the thread that owns them (a window's Qt objects). A collection in an executor thread
    destroyed widgets there, and their destructors waited for the main thread's lock while
    the main thread waited for theirs: the window froze for good."""
    gc.collect()


def release_memory() -> None:
    """Empty the caches that keep an unloaded model's memory and trim the heap (blocking:
    ~0.2 s with torch loaded; run it off the event loop, after `collect_garbage`)."""
    _empty_torch_caches()
    trim_heap()
