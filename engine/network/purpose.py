"""Why a connection is made: the part of Wren and the user's action, set by the code that
starts the action and read by the network guard (engine/network/guard.py) when a socket
connects.

A context variable carries it, so an asyncio task, and the tasks it starts, keep the purpose
of the code that started them. A plain thread or an executor's worker does not inherit it:
a connection made there without its own `acting(...)` is recorded as not attributed, never
guessed. The action is built from names only (a model's repo, a provider's name, a server's
name), never from a prompt or an answer.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
from collections.abc import Iterator
from dataclasses import dataclass


class Part(enum.Enum):
    """Which part of Wren opened a connection."""

    MODEL_DOWNLOAD = "model download"
    REMOTE_PROVIDER = "remote provider"
    MCP_SERVER = "MCP server"
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


@contextlib.contextmanager
def unless_named(part: Part, action: str) -> Iterator[Purpose]:
    """`acting(part, action)` where the caller named no purpose; else the caller's stands."""
    named = _current.get()
    if named is not None:
        yield named
        return
    with acting(part, action) as purpose:
        yield purpose
