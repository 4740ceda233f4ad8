"""Local crash reports: written on this computer, redacted, never sent anywhere.

`install_crash_hooks(program)` sets `sys.excepthook`, `threading.excepthook` and
`faulthandler` (a per-process file in `<data>/crashes/`, 0700). An exception that reaches
a hook becomes `crash-<time>-<pid>.txt` (0600): the versions (Wren, Python, the packages,
Qt when the desktop says), the OS, and the traceback as file, line and function names.

What a report never holds: local variables (they are not captured at all), and the
exception's message as it was. Every message in the chain passes through `scrub` (crashtext.py): paths
under the home folder become `~`, quoted strings that read like text (a space in them, or
longer than 80 characters) are elided, secrets and personal data are masked by
`engine.safety.redact`, and what is left is cut at 400 characters.

A fatal signal (a segfault in native code, an abort) leaves faulthandler's dump in the
process's `fault-<pid>.log`; the next Wren to start turns a dead process's dump into a
report (`collect_fault_logs`). `pending_crash_reports()` lists the reports no start has
announced yet; `mark_crash_reports_seen` records them as announced.

Nothing here imports Qt or torch; the safety scanner is imported only when a report is
written, so installing the hooks costs a `wren` command nothing noticeable.
"""

from __future__ import annotations

import atexit
import faulthandler
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any

from . import paths
from .crashtext import MAX_CHAIN as MAX_CHAIN
from .crashtext import MAX_MESSAGE_CHARS as MAX_MESSAGE_CHARS
from .crashtext import format_report as format_report
from .crashtext import scrub as scrub
from .crashtext import scrub_paths as scrub_paths

if TYPE_CHECKING:
    import asyncio

CRASH_DIR = "crashes"
REPORT_PREFIX = "crash-"
FAULT_PREFIX = "fault-"
SEEN_FILE = "seen.json"
KEEP_REPORTS = 20  # the newest; older ones are deleted as new ones come
MAX_PER_PROCESS = 5  # a handler failing in a loop writes this many, not thousands
FAULT_HEADER = "wren-fault-log 1"

CRASH = "crash"  # the process ended
ERROR = "error"  # an unhandled exception the process survived (a thread, a Qt slot, a task)



@dataclass(frozen=True)
class CrashReport:
    path: Path
    kind: str  # CRASH or ERROR
    program: str  # "wren", "wren-desktop"
    when: float  # seconds since the epoch
    summary: str  # the exception's type, or the fatal error's first line

    @property
    def crashed(self) -> bool:
        return self.kind == CRASH


# -- where --------------------------------------------------------------------------------

def crash_reports_dir() -> Path:
    """`<data>/crashes`, readable by the user alone."""
    return paths.private_dir(paths.data_dir() / CRASH_DIR)


# -- writing ------------------------------------------------------------------------------

def _write(text: str, when: float | None = None, pid: int | None = None) -> Path:
    """A new report file named after the time and the process that failed (another
    process's, for a fault log collected later: dated then too)."""
    folder = crash_reports_dir()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() if when is None else when))
    for n in range(100):
        path = folder / f"{REPORT_PREFIX}{stamp}-{pid or os.getpid()}{f'-{n}' if n else ''}.txt"
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, paths.PRIVATE_FILE)
        except FileExistsError:
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        paths.private_file(path)  # a umask cannot widen it; an odd filesystem gets a chmod
        if when is not None:
            os.utime(path, (when, when))
        _prune(folder)
        return path
    raise FileExistsError(f"no free crash report name in {folder}")


def _prune(folder: Path) -> None:
    reports = sorted(folder.glob(f"{REPORT_PREFIX}*.txt"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in reports[KEEP_REPORTS:]:
        old.unlink(missing_ok=True)


def write_crash_report(exc: BaseException, *, kind: str = CRASH, program: str | None = None,
                       where: str = "") -> Path | None:
    """Write a report for `exc`; returns its path, or None when the folder cannot be
    written. Never raises."""
    try:
        text = format_report(exc, kind=kind, program=program or _state.program, where=where,
                             versions=_state.versions())
        return _write(text)
    except Exception as problem:  # the crash path must not raise a second error
        print(f"wren: could not write a crash report: {problem}", file=sys.stderr)
        return None


# -- faulthandler's dumps -----------------------------------------------------------------

def _alive(pid: int) -> bool:
    if pid == os.getpid():  # before our own log is open, a log with our pid is a dead namesake's
        return _state.fault_path is not None  # (a sandbox gives each start the same pid)
    if os.name == "nt":
        return False  # the caller finds out by trying to move the file (an open file will not move)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def collect_fault_logs() -> list[Path]:
    """Turn the fault logs of processes that are gone into reports (an empty one, from a
    process that ended without a fatal error, is just deleted). Returns the new reports."""
    made: list[Path] = []
    try:
        folder = crash_reports_dir()
        logs = sorted(folder.glob(f"{FAULT_PREFIX}*.log"))
    except OSError:
        return made
    for log_path in logs:
        try:
            pid = int(log_path.stem.rsplit("-", 1)[-1])
        except ValueError:
            continue
        if _alive(pid):
            continue
        taken = log_path.with_suffix(".collecting")
        try:
            os.replace(log_path, taken)  # fails on Windows while the process holds it open
        except OSError:
            continue
        try:
            raw = taken.read_text(encoding="utf-8", errors="replace")
            header, _, dump = raw.partition("\n")
            if dump.strip():
                fields = _fault_fields(header)
                when = taken.stat().st_mtime
                text = format_report(None, kind=CRASH, program=fields.get("program", "wren"),
                                     where="a fatal error (faulthandler)", body=dump, when=when,
                                     versions=fields.get("versions"))
                made.append(_write(text, when, pid))
        except OSError:
            continue
        finally:
            taken.unlink(missing_ok=True)
    return made


def _fault_fields(header: str) -> dict[str, Any]:
    if not header.startswith(FAULT_HEADER):
        return {}
    try:
        return json.loads(header[len(FAULT_HEADER):].strip() or "{}")
    except ValueError:
        return {}


# -- announcing -----------------------------------------------------------------------------

def _read_header(path: Path) -> dict[str, str]:
    fields = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f):
            if not line.strip() or n > 40:
                break
            key, sep, value = line.partition(": ")
            if sep:
                fields[key.strip()] = value.strip()
    return fields


def list_crash_reports() -> list[CrashReport]:
    """Every report in the crashes folder, newest first."""
    try:
        found = list(crash_reports_dir().glob(f"{REPORT_PREFIX}*.txt"))
    except OSError:
        return []
    reports = []
    for path in found:
        try:
            fields = _read_header(path)
            when = path.stat().st_mtime
        except OSError:
            continue
        reports.append(CrashReport(path, fields.get("Kind", CRASH), fields.get("Program", "wren"), when,
                                   fields.get("Summary", "")))
    return sorted(reports, key=lambda r: (r.when, r.path.name), reverse=True)


def _seen_path() -> Path:
    return crash_reports_dir() / SEEN_FILE


def _seen() -> set[str]:
    try:
        names = json.loads(_seen_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    return {str(n) for n in names} if isinstance(names, list) else set()


def _written_here(report: CrashReport) -> bool:
    """Written by this process since its hooks went in: not "last time"."""
    parts = report.path.stem.split("-")
    return (len(parts) > 3 and parts[3] == str(os.getpid()) and _state.started is not None
            and report.when >= _state.started - 1)


def pending_crash_reports() -> list[CrashReport]:
    """Reports from earlier runs that no start has announced yet, newest first (faulthandler
    dumps of processes that are gone are turned into reports first)."""
    collect_fault_logs()
    seen = _seen()
    return [r for r in list_crash_reports() if r.path.name not in seen and not _written_here(r)]


def mark_crash_reports_seen(reports: list[CrashReport] | None = None) -> None:
    """Record `reports` (all the current ones when None) as announced."""
    names = {r.path.name for r in (list_crash_reports() if reports is None else reports)}
    present = {p.name for p in crash_reports_dir().glob(f"{REPORT_PREFIX}*.txt")}
    keep = (_seen() | names) & present
    path = _seen_path()
    tmp = path.with_name(f".{path.name}.partial")
    fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, paths.PRIVATE_FILE)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(sorted(keep), out)
    os.replace(tmp, path)


# -- the hooks ------------------------------------------------------------------------------

class _State:
    def __init__(self) -> None:
        self.program = "wren"
        self.installed = False
        self.started: float | None = None
        self.fatal_excepthook = True
        self.versions_fn: Callable[[], dict[str, str]] | None = None
        self.previous_excepthook: Callable[..., Any] | None = None
        self.previous_threading_hook: Callable[..., Any] | None = None
        self.fault_file: IO[str] | None = None
        self.fault_path: Path | None = None
        self.faulthandler_was_enabled = False
        self.lock = threading.Lock()
        self.from_hooks = 0  # reports the hooks wrote; they stop at MAX_PER_PROCESS

    def versions(self) -> dict[str, str] | None:
        if self.versions_fn is None:
            return None
        try:
            return dict(self.versions_fn())
        except Exception:
            return None


_state = _State()


def _report(exc: BaseException, kind: str, where: str) -> None:
    """A hook's report, and a line on stderr saying where it is; a handler that fails in a
    loop writes MAX_PER_PROCESS of them, not thousands."""
    with _state.lock:
        if _state.from_hooks >= MAX_PER_PROCESS:
            return
        _state.from_hooks += 1
    path = write_crash_report(exc, kind=kind, where=where)
    if path is not None:
        try:
            print(f"{_state.program}: a crash report was saved at {path} (it stays on this computer)",
                  file=sys.stderr, flush=True)
        except Exception:
            pass


def _excepthook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    previous = _state.previous_excepthook or sys.__excepthook__
    previous(kind, value, tb)
    if isinstance(value, (KeyboardInterrupt, SystemExit)) or value is None:
        return
    if value.__traceback__ is None:
        value = value.with_traceback(tb)
    _report(value, CRASH if _state.fatal_excepthook else ERROR,
            "the main thread" if _state.fatal_excepthook else "an event handler")


def _threading_hook(args: threading.ExceptHookArgs) -> None:
    previous = _state.previous_threading_hook or threading.__excepthook__
    previous(args)
    value = args.exc_value
    if value is None or isinstance(value, SystemExit):
        return
    if value.__traceback__ is None and args.exc_traceback is not None:
        value = value.with_traceback(args.exc_traceback)
    name = args.thread.name if args.thread is not None else "a thread"
    _report(value, ERROR, f"thread {scrub(name, 80)}")


def asyncio_exception_handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """For `loop.set_exception_handler`: asyncio's own message as usual, and a report for
    an exception nothing handled (a callback's, a task's never retrieved)."""
    loop.default_exception_handler(context)
    exc = context.get("exception")
    if isinstance(exc, Exception):
        _report(exc, ERROR, "an asyncio task or callback")


def _open_fault_log(program: str) -> None:
    folder = crash_reports_dir()
    path = folder / f"{FAULT_PREFIX}{os.getpid()}.log"
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, paths.PRIVATE_FILE)
    fault = os.fdopen(fd, "w", encoding="utf-8")
    fields = {"program": program, "started": time.time(), "versions": _state.versions()}
    fault.write(f"{FAULT_HEADER} {json.dumps(fields)}\n")
    fault.flush()
    _state.faulthandler_was_enabled = faulthandler.is_enabled()
    faulthandler.enable(file=fault, all_threads=True)
    _state.fault_file, _state.fault_path = fault, path


def _close_fault_log() -> None:
    fault, path = _state.fault_file, _state.fault_path
    if fault is None or path is None:
        return
    _state.fault_file = _state.fault_path = None
    faulthandler.disable()
    if _state.faulthandler_was_enabled and sys.__stderr__ is not None:
        try:
            faulthandler.enable(file=sys.__stderr__, all_threads=True)
        except (AttributeError, ValueError, OSError):  # no real stderr (a GUI start)
            pass
    fault.close()
    path.unlink(missing_ok=True)  # a normal exit: nothing to report


def install_crash_hooks(program: str, *, fatal_excepthook: bool = True,
                        versions: Callable[[], dict[str, str]] | None = None) -> Path | None:
    """Write a report for every unhandled exception and fatal error of this process.

    `fatal_excepthook=False` where `sys.excepthook` also sees exceptions the process
    survives (Qt calls it for an exception in a slot): those reports say "error", not
    "crash". `versions()` adds lines to the header (the desktop's Qt version). Calling it
    again replaces the settings. Returns the crashes folder, or None when it cannot be
    made (then only the usual tracebacks are printed)."""
    _state.program = program
    _state.fatal_excepthook = fatal_excepthook
    _state.versions_fn = versions
    if _state.started is None:
        _state.started = time.time()
    try:
        folder = crash_reports_dir()
    except OSError as problem:
        print(f"{program}: crash reports are off: {problem}", file=sys.stderr)
        return None
    if not _state.installed:
        _state.previous_excepthook = sys.excepthook
        _state.previous_threading_hook = threading.excepthook
        sys.excepthook = _excepthook
        threading.excepthook = _threading_hook
        collect_fault_logs()  # first: opening ours may reuse a dead process's name
        try:
            _open_fault_log(program)
        except OSError as problem:
            print(f"{program}: fatal errors will not be recorded: {problem}", file=sys.stderr)
        atexit.register(_close_fault_log)
        _state.installed = True
    collect_fault_logs()
    return folder


def uninstall_crash_hooks() -> None:
    """Put back the hooks that were there before (tests; a normal exit needs nothing)."""
    if not _state.installed:
        return
    if sys.excepthook is _excepthook:
        sys.excepthook = _state.previous_excepthook or sys.__excepthook__
    if threading.excepthook is _threading_hook:
        threading.excepthook = _state.previous_threading_hook or threading.__excepthook__
    _close_fault_log()
    atexit.unregister(_close_fault_log)
    _state.installed = False
