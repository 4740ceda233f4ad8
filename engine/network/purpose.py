"""Why a connection is made: the part of Wren and the user's action, set by the code that
starts the action and read by the network guard (engine/network/guard.py) when a socket
connects.

A context variable carries it, so an asyncio task, and the tasks it starts, keep the purpose
of the code that started them. Threads do not inherit context variables (before Python
3.14), so `carry_into_threads()` (the guard installs it) hands the purpose on: a thread
takes the one current where it was started (a folder model's download fetches its files on
the hub client's worker threads), and a call submitted to a thread pool (an asyncio
executor's included) runs with its submitter's, whichever action made the pool's worker.
A connection whose code named nothing is recorded as not attributed, never guessed. The
action is built from names only (a model's repo, a provider's name, a server's name), never
from a prompt or an answer.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import functools
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any


class Part(enum.Enum):
    """Which part of Wren opened a connection."""

    MODEL_DOWNLOAD = "model download"
    REMOTE_PROVIDER = "remote provider"
    MCP_SERVER = "MCP server"
    TOOL = "tool"  # a tool the model called, run inside Wren's process (an MCP server's call names its server)
    ENGINE = "Wren's own engine"  # the resident engine's and the window's sockets
    SERVER = "wren serve"
    UNATTRIBUTED = "not attributed"


@dataclass(frozen=True)
class Purpose:
    part: Part
    action: str  # the user's action, in a few words: "wren models pull OWNER/NAME"


UNKNOWN = Purpose(Part.UNATTRIBUTED, "no action was named by the code that connected")

_current: contextvars.ContextVar[Purpose | None] = contextvars.ContextVar("wren_network_purpose", default=None)


_process_default: list[Purpose] = []  # what a whole process is for (`wren serve`), where code named nothing


def current() -> Purpose:
    return _current.get() or (_process_default[0] if _process_default else UNKNOWN)


def set_process_default(purpose: Purpose | None) -> None:
    _process_default[:] = [purpose] if purpose is not None else []


@contextlib.contextmanager
def acting(part: Part, action: str) -> Iterator[Purpose]:
    """Connections made inside the block (and by tasks started in it) are `part`'s, for `action`."""
    purpose = Purpose(part, action)
    token = _current.set(purpose)
    try:
        yield purpose
    finally:
        try:
            _current.reset(token)
        except ValueError:  # left in another context (a generator closed elsewhere): that one keeps its own
            pass


def assume(part: Part, action: str) -> None:
    """Name the purpose for the rest of the current context: one made for a single task
    (`contextvars.copy_context().run(assume, ...)`), which nothing resets."""
    _current.set(Purpose(part, action))


@contextlib.contextmanager
def unless_named(part: Part, action: str) -> Iterator[Purpose]:
    """`acting(part, action)` where the caller named no purpose; else the caller's stands."""
    named = _current.get()
    if named is not None:
        yield named
        return
    with acting(part, action) as purpose:
        yield purpose


# -- into threads ----------------------------------------------------------------------------

def _running_as(purpose: Purpose | None, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    token = _current.set(purpose)
    try:
        return call(*args, **kwargs)
    finally:
        _current.reset(token)


def carry_into_threads() -> None:
    """From now on a thread starts with the purpose current where `start()` was called, and a
    thread pool's task runs with its submitter's (set even when that is none, so a worker made
    during one action never lends it to a later task). Only this variable travels, not the
    rest of the caller's context. Done once per process."""
    if getattr(threading.Thread, "_wren_carries_purpose", False):
        return
    start, bootstrap, submit = threading.Thread.start, threading.Thread._bootstrap_inner, ThreadPoolExecutor.submit  # type: ignore[attr-defined]

    def _start(self: threading.Thread) -> None:
        self._wren_purpose = _current.get()  # type: ignore[attr-defined]
        start(self)

    def _bootstrap_inner(self: threading.Thread) -> None:
        _current.set(getattr(self, "_wren_purpose", None))  # this thread's own context: nothing to reset
        bootstrap(self)

    def _submit(self: ThreadPoolExecutor, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        return submit(self, functools.partial(_running_as, _current.get(), fn), *args, **kwargs)

    threading.Thread.start = _start  # type: ignore[method-assign]
    threading.Thread._bootstrap_inner = _bootstrap_inner  # type: ignore[attr-defined]
    ThreadPoolExecutor.submit = _submit  # type: ignore[method-assign, assignment]
    threading.Thread._wren_carries_purpose = True  # type: ignore[attr-defined]
