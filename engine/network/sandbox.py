"""Child processes under the offline lock: an MCP server Wren starts by command is outside
its process, so the audit hook does not see it. On Linux it is started in a network
namespace of its own with no interface but a down loopback (`unshare -n`, or with a user
namespace where the user may not make one otherwise): whatever it tries to connect to, the
system refuses. Where that is not possible (macOS, Windows, a kernel without user
namespaces) the lock covers Wren's own process only, and the server's log and the ledger say so.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
from dataclasses import dataclass

from . import ledger, lock
from .purpose import Part

# Tried in order: as root (or with CAP_SYS_ADMIN), then keeping the user's id in a user
# namespace (util-linux 2.38), then as root of a user namespace.
_WAYS = (["-n"], ["--map-current-user", "-n"], ["-r", "-n"])


@dataclass(frozen=True)
class Launch:
    command: str
    args: list[str]
    note: str | None  # what the server's log says about the lock (None: the lock is off)


@functools.lru_cache(maxsize=1)
def namespace_prefix() -> tuple[str, ...] | None:
    """The `unshare` command line that runs a program without network here, or None."""
    if not sys.platform.startswith("linux"):
        return None
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    for way in _WAYS:
        try:
            probe = subprocess.run([unshare, *way, "true"], capture_output=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        if probe.returncode == 0:
            return (unshare, *way)
    return None


def launch(name: str, command: str, args: list[str]) -> Launch:
    """How to start the MCP server `name` (`command args`) with the lock as it is now; the
    choice is recorded in the ledger while the lock is on."""
    state = lock.state()
    if not state.on:
        return Launch(command, list(args), None)
    prefix = namespace_prefix()
    action = f"MCP server '{name}' started by command"
    if prefix is not None:
        note = (f"the offline lock is {state.describe()}: started without network "
                f"({' '.join(prefix[1:])} namespace); any connection it tries is refused by the system")
        _record(action, "isolated", note)
        return Launch(prefix[0], [*prefix[1:], "--", command, *args], note)
    note = (f"the offline lock is {state.describe()}, but it covers Wren's own process only: this system "
            f"cannot start a program without network (no network namespace here), so '{name}' can connect "
            "where it likes")
    _record(action, "not isolated", note)
    return Launch(command, list(args), note)


def _record(action: str, outcome: str, note: str) -> None:
    try:
        ledger.record(ledger.Entry(Part.MCP_SERVER.value, action, "child process", "", None, False, outcome, note,
                                   process=_process()))
    except OSError:
        pass  # the server's log still says it


def _process() -> str:
    from .guard import process_name

    return process_name()
