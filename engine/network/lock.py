"""The offline lock: while it is on, Wren's process refuses every connection, name lookup
and listening socket that is not this machine's loopback (engine/network/guard.py enforces
it; this module says whether it is on and why).

It is on when the environment says so (WREN_OFFLINE=1, for managed machines: nothing in
Wren turns that off) or when the user turned it on (Settings → Privacy, `wren privacy
offline on`), which leaves the file network/offline in the data folder: every Wren process
of that folder reads it at each connection, so the window, `wren` commands and a resident
engine agree without restarting.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from pathlib import Path

from .. import paths, switches
from ..errors import InvalidRequest, WrenError
from .ledger import folder
from .purpose import Purpose

ENV = "WREN_OFFLINE"
MARK = "offline"
HOW_TO_UNLOCK = "turn it off in Settings → Privacy or with `wren privacy offline off`"


@dataclass(frozen=True)
class LockState:
    on: bool
    source: str | None  # "environment" (WREN_OFFLINE), "setting", or None when off

    def describe(self) -> str:
        if not self.on:
            return "off"
        if self.source == "environment":
            return f"on (set by {ENV}=1 in the environment)"
        return "on (turned on in Settings → Privacy or by `wren privacy offline on`)"


def from_environment() -> bool:
    return switches.on(ENV)


def state(home: Path | None = None) -> LockState:
    if from_environment():
        return LockState(True, "environment")
    if (folder(home) / MARK).exists():
        return LockState(True, "setting")
    return LockState(False, None)


def set_offline(on: bool, home: Path | None = None) -> LockState:
    """Turn the user's lock on or off; refused (nothing changed) while WREN_OFFLINE keeps it on."""
    if not on and from_environment():
        raise InvalidRequest(f"the offline lock is set by {ENV}=1 in this environment (a managed machine); "
                             f"it stays on until {ENV} is unset")
    where = folder(home)
    mark = where / MARK
    try:
        if on:
            paths.private_dir(where)
            paths.private_file(mark)
        else:
            mark.unlink(missing_ok=True)
    except OSError as exc:
        raise WrenError(f"cannot {'turn on' if on else 'turn off'} the offline lock: {mark}: {exc.strerror}") from None
    return state(home)


class NetworkLocked(OSError):
    """A connection the offline lock refused. An OSError, so any client code sees a failed
    connection; Wren's own callers find it in the chain and say it was the lock."""

    def __init__(self, message: str, purpose: Purpose, target: str):
        # errno and strerror set: code that rebuilds an OSError from them (socket.create_server) keeps the words
        super().__init__(errno.EACCES, message)
        self.purpose, self.target, self.message = purpose, target, message

    def __str__(self) -> str:
        return self.message

    def __reduce__(self):  # pickled across processes (an executor) as what it is
        return (type(self), (self.message, self.purpose, self.target))


class OfflineLocked(WrenError):
    """An action of Wren's refused at its start because the lock is on (its message is the
    lock's refusal, naming what and why)."""


def refusal(target: str, purpose: Purpose, lock: LockState, *, verb: str = "connect to") -> NetworkLocked:
    said = (f"Wren's offline lock is {lock.describe()}: it refused to {verb} {target} "
            f"({purpose.part.value}: {purpose.action}); ")
    said += f"unset {ENV} to connect" if lock.source == "environment" else f"{HOW_TO_UNLOCK} to connect"
    return NetworkLocked(said, purpose, target)


def locked_in(exc: BaseException | None) -> NetworkLocked | None:
    """The lock's refusal behind `exc` (its causes and contexts, groups included), if any."""
    seen: set[int] = set()
    stack: list[BaseException | None] = [exc]
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, NetworkLocked):
            return e
        stack.extend([e.__cause__, e.__context__, *getattr(e, "exceptions", ())])
    return None
