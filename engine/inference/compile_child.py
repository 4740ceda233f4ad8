"""Entry point of the process that compiles decode graphs (engine.inference.models.precompile).

    python -m engine.inference.compile_child PARENT_PID SPEC

It must never outlive the Wren process that started it, however that one ends (a
SIGKILL included). So before anything heavy is imported (torch alone takes seconds, and
a parent may die meanwhile) it ties its life to PARENT_PID, passed on the command line
rather than read later: on Linux the kernel kills it when its parent goes
(PR_SET_PDEATHSIG), and a parent already gone by then is caught by comparing the pid;
elsewhere a thread watches the pid. This module imports nothing but the standard library
until that is done.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

_PR_SET_PDEATHSIG = 1
_ORPHANED = 3  # the exit status when the parent was gone


def exit_with_parent(parent: int) -> None:
    """End this process as soon as process `parent` (the one that started it) is gone."""
    if sys.platform.startswith("linux") and _kill_on_parent_death():
        # The parent may have died before the request took effect: then this process
        # was already handed to another (init or a subreaper) and the pid differs.
        if os.getppid() != parent:
            os._exit(_ORPHANED)
        return
    if sys.platform == "win32":
        watch = _windows_watcher(parent)
    else:
        if os.getppid() != parent:
            os._exit(_ORPHANED)

        def watch() -> None:  # an orphan is handed to another process: its parent pid changes
            while os.getppid() == parent:
                time.sleep(0.25)
            os._exit(_ORPHANED)

    threading.Thread(target=watch, name="wren-parent-watch", daemon=True).start()


def _kill_on_parent_death() -> bool:
    """prctl(PR_SET_PDEATHSIG, SIGKILL): the kernel kills this process when the thread
    that started it ends (Wren starts it from a thread that waits for it)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _windows_watcher(parent: int):
    import ctypes

    synchronize, infinite = 0x00100000, 0xFFFFFFFF
    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]
    handle = kernel32.OpenProcess(synchronize, False, parent)
    if not handle:  # already gone
        os._exit(_ORPHANED)

    def watch() -> None:
        kernel32.WaitForSingleObject(handle, infinite)
        os._exit(_ORPHANED)

    return watch


def main(argv: list[str]) -> None:
    if len(argv) != 2 or not argv[0].isdigit():
        sys.exit("usage: python -m wren.engine.inference.compile_child PARENT_PID SPEC")
    exit_with_parent(int(argv[0]))
    from .models import precompile  # torch, only now

    precompile.run_child(argv[1])


if __name__ == "__main__":
    main(sys.argv[1:])
