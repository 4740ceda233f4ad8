"""A resident engine for `wren ask`: the model stays loaded between runs.

A `wren ask` in a fresh process spends seconds before its first word: importing torch,
opening the data, loading the model, and its first tokens run eagerly while the saved
compiled graphs load. So, as a local model server does, the first `wren ask` starts one
engine process in the background, and every `wren ask` (that one included) sends its
question there over a Unix socket and prints the events that come back; the engine exits
after `keep_alive` seconds with nothing to answer (300 by default; `--keep-alive`,
`WREN_KEEP_ALIVE` or the setting `cli.keep_alive` change it, and 0 answers in the asking
process and leaves nothing running). `wren resident` shows it and stops it.

The socket is the user's alone (engine/engine_sockets.py says where it is and how it is
named), so an engine answers only the askers that would have started the same one. `wren
data erase` and `wren models rm` tell the engines first (stop_for_erase, release_model); an
answer the engine cuts short ends in an error line that says why. Nothing else listens: no
port, no key. On Windows `wren ask` answers in its own process. The engine's side is
engine/terminal/resident_host.py.

The line protocol (JSON, one object a line; engine/engine_sockets.py's PROTOCOL): the client
sends {"resident": PROTOCOL, "cmd": "ask", "question": {...}} (the question is ask_request.py's
AskRequest, checked field by field on arrival), or "status" | "quit". During an answer it may
send {"cmd": "approve", "id", "decision"} and {"cmd": "stop"}. The engine sends the answer's
events (engine.events.event_to_dict), {"type": "notice"} lines, then {"type": "end"}, or
{"type": "error", "message", "status"} (status 2 for a line it cannot read, saying what was
wrong). Other commands: "erase" and "drop" (with "model"), each with a "reason" to give the
askers. A client that goes away stops its answer, as Ctrl+C does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from .. import paths
from ..engine_sockets import (
    PROTOCOL,
    private_folder,
    request,
    socket_path,
    supported,
    window_socket_path,
)
from ..engine_sockets import (
    connect as _connect,
)
from ..engine_sockets import (
    send as _send,
)
from ..errors import WrenError
from ..keep_alive import DEFAULT_KEEP_ALIVE, KEEP_ALIVE_ENV, KEEP_ALIVE_SETTING, MAX_KEEP_ALIVE, seconds
from .ask_request import AskRequest

START_TIMEOUT = 120.0  # seconds for a new engine to listen (it imports torch and opens the data)


def keep_alive(args: argparse.Namespace | None = None) -> float | None:
    """--keep-alive, else WREN_KEEP_ALIVE, else None (the setting, else 300); a value that
    is not 0 to MAX_KEEP_ALIVE seconds is refused with what was wrong."""
    value = getattr(args, "keep_alive", None)
    where = "--keep-alive"
    if value is None:
        raw = os.environ.get(KEEP_ALIVE_ENV, "").strip()
        if not raw:
            return None
        where = KEEP_ALIVE_ENV
        try:
            value = float(raw)
        except ValueError:
            raise WrenError(f"{KEEP_ALIVE_ENV}={raw!r} is not a number of seconds") from None
    if not 0 <= value <= MAX_KEEP_ALIVE:  # NaN fails both comparisons
        raise WrenError(f"{where} must be 0 or more seconds, at most {MAX_KEEP_ALIVE:.0f} (a week), not {value}")
    return float(value)


def chosen_keep_alive(args: argparse.Namespace | None = None) -> float:
    """The keep-alive this ask means: --keep-alive, else WREN_KEEP_ALIVE, else the setting
    (read from the database file without opening the store), else 300 s."""
    value = keep_alive(args)
    if value is not None:
        return value
    from ..store.store import read_setting

    return seconds(read_setting(paths.database_path(), KEEP_ALIVE_SETTING, DEFAULT_KEEP_ALIVE))


def wanted(args: argparse.Namespace) -> bool:
    """Whether this `wren ask` goes to a resident engine: not with a keep-alive of 0, not
    when it names tools (they run where the question is asked: its folder, its MCP
    servers), and only where Unix sockets are."""
    tools = (getattr(args, "tools", None) or "none").strip()
    choice = (getattr(args, "tool_choice", None) or "auto").strip()
    if tools not in ("none", "") or choice not in ("auto", "none"):
        return False
    return supported() and chosen_keep_alive(args) != 0


# -- the client: `wren ask` ----------------------------------------------------------------

class _Line:
    """The engine's side of a tool approval, for AskView.show: the decision goes down the socket."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer

    def approve_tool(self, call_id: str, decision: str) -> None:
        _send(self.writer, {"cmd": "approve", "id": call_id, "decision": decision})


async def connect(start: bool = True) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    """A line to this install's resident engine, starting one if `start` and none runs;
    None when none runs (or one could not start: said on standard error)."""
    path = socket_path()
    line = await _connect(path)
    if line is not None or not start:
        return line
    private_folder(path.parent)
    import fcntl

    # One client starts the engine; the others wait on the lock, then find it listening.
    with open(paths.private_file(path.with_suffix(".lock")), "a") as lock:
        while True:  # polled, not a blocking flock on an executor thread that a cancel could not free
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await asyncio.sleep(0.05)
        try:
            line = await _connect(path)
            if line is not None:
                return line
            return await _start(path)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


async def _start(path: Path) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    log = paths.private_file(paths.logs_dir() / "resident.err")
    if sys.stderr.isatty():
        print("wren: starting the resident engine (it keeps the model loaded between questions; "
              "`wren resident stop` ends it, --keep-alive 0 answers without it)", file=sys.stderr)
    # The engine works from the home folder, so a relative WREN_HOME is made absolute for it.
    env = {**os.environ, "WREN_HOME": str(paths.data_dir().resolve())}
    with open(log, "w") as err:
        process = subprocess.Popen(
            [*_wren_command(), "resident", "serve", "--socket", str(path)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
            close_fds=True, env=env)
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        line = await _connect(path)
        if line is not None:
            return line
        status = process.poll()
        if status is not None:
            print(f"wren: the resident engine stopped as it started (status {status}; see {log}); "
                  "answering here", file=sys.stderr)
            return None
        if time.monotonic() > deadline:
            process.kill()
            print(f"wren: the resident engine did not start within {START_TIMEOUT:.0f} s (see {log}); "
                  "answering here", file=sys.stderr)
            return None
        await asyncio.sleep(0.02)


def _wren_command() -> list[str]:
    """How to run `wren` again: the frozen bundle's program itself, else this Python."""
    if getattr(sys, "frozen", False):
        return [sys.executable]
    return [sys.executable, "-m", __package__]


async def ask(args: argparse.Namespace, question: AskRequest) -> int | None:
    """Ask Wren's window, when it is open with the model the question means, else the
    resident engine (started if none runs), and show the answer as `wren ask` does (`args`:
    --json, --approve, --keep-alive); the exit status, or None when neither answers (the
    caller answers itself)."""
    question = replace(question, keep_alive=keep_alive(args))
    request = {"resident": PROTOCOL, "cmd": "ask", "question": question.to_wire()}
    line = await _connect(window_socket_path())
    if line is not None:
        code = await _ask_on(line, args, request, "Wren's window")
        if code is not None:
            return code
    try:
        line = await connect()
    except (WrenError, OSError) as exc:  # the socket's folder is not private, cannot be made
        print(f"wren: no resident engine ({exc}); answering here", file=sys.stderr)
        return None
    if line is None:
        return None
    code = await _ask_on(line, args, request, "the resident engine")
    if code is None:
        print("wren: the resident engine did not take the question; answering here", file=sys.stderr)
    return code


async def _ask_on(line: tuple[asyncio.StreamReader, asyncio.StreamWriter], args: argparse.Namespace,
                  request: dict, who: str) -> int | None:
    """One question down one line; None when it was refused or the line closed before any
    event (nothing was shown or saved: the question can go elsewhere)."""
    reader, writer = line
    from ..events import event_from_dict
    from .ask import AskView
    from .main import _INTERRUPTED, _main_thread

    loop = asyncio.get_running_loop()
    interrupted = False
    done = loop.create_future()  # set by a Ctrl+C before the answer began

    def interrupt() -> None:  # the answer stops within a token; what was shown is saved
        nonlocal interrupted
        if not interrupted:
            interrupted = True
            _send(writer, {"cmd": "stop"})
            if not answered and not done.done():  # nothing began: no need to wait for the engine
                done.set_result(None)

    view = AskView(args)
    engine = _Line(writer)
    if _main_thread():
        loop.add_signal_handler(signal.SIGINT, interrupt)
    answered = False
    try:
        _send(writer, request)
        await writer.drain()
        while True:
            raw = await (reader.readline() if answered else _line_or(reader, done))
            if raw is None:  # Ctrl+C before the answer began: the engine drops the question
                return _INTERRUPTED
            if not raw:
                if not answered:
                    return None
                view.close()
                print(f"\nwren: {who} stopped during the answer (what came is saved)", file=sys.stderr)
                return 1
            message = json.loads(raw)
            kind = message.get("type")
            if kind == "end":
                return _INTERRUPTED if interrupted else view.code
            if kind == "error":
                if message.get("refused"):  # another model (the window's), another protocol
                    return None
                view.close()
                gap = "\n" if answered and not getattr(args, "json", False) else ""
                print(f"{gap}wren: {message['message']}", file=sys.stderr)
                return _INTERRUPTED if interrupted else int(message.get("status", 1))
            if kind == "notice":
                print(f"wren: {message['message']}", file=sys.stderr)
                continue
            answered = True
            await view.show(engine, event_from_dict(message))
            await writer.drain()
    finally:
        view.close()
        if _main_thread():
            loop.remove_signal_handler(signal.SIGINT)
        writer.close()
        with contextlib.suppress(OSError, ConnectionError):
            await writer.wait_closed()


async def _line_or(reader: asyncio.StreamReader, done: asyncio.Future) -> bytes | None:
    """The engine's next line, or None once `done` is set first."""
    reading = asyncio.ensure_future(reader.readline())
    await asyncio.wait({reading, done}, return_when=asyncio.FIRST_COMPLETED)
    if reading.done():
        return reading.result()
    reading.cancel()
    return None


# -- what other commands tell the engines: `wren data erase`, `wren models rm` -------------

async def stop_for_erase(wait: float = 30.0) -> None:
    """Before `wren data erase`: each resident engine of this data folder stops its answers
    (their askers are told why and exit non-zero) and ends, its database and log files
    closed, before anything is deleted; Wren's window stops the answers it gives the terminal."""
    if not supported():
        return
    reason = "the answer was stopped: `wren data erase` is deleting all of Wren's data"
    for answer in await request("erase", reason=reason):
        if answer.get("type") == "bye":
            pid = int(answer["pid"])
            if not await _ended(pid, wait):
                print(f"wren: the resident engine (pid {pid}) did not end within {wait:.0f} s; "
                      "erasing anyway", file=sys.stderr)
        elif answer.get("type") == "released" and answer.get("stopped"):
            print(f"wren: Wren's window stopped {answer['stopped']} answer(s) it was giving the terminal",
                  file=sys.stderr)


async def _ended(pid: int, wait: float) -> bool:
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        try:  # ended, not yet reaped by the `wren ask` that started it: it holds no file any more
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except (OSError, IndexError):
            pass
        await asyncio.sleep(0.05)
    return False


# -- `wren resident [status|stop]` -------------------------------------------------------------

def register(sub) -> None:
    p = sub.add_parser("resident", help="the engine `wren ask` keeps loaded between questions: status, stop")
    p.add_argument("action", nargs="?", choices=("status", "stop", "serve"), default="status",
                   help="status (the default), stop, or serve (what `wren ask` starts; not for typing)")
    p.add_argument("--json", action="store_true", help="the engine's answer as one JSON object")
    p.add_argument("--socket", type=Path, help=argparse.SUPPRESS)
    p.set_defaults(func=_cmd_resident)


def status_line(answer: dict) -> str:
    """One engine's status answer as `wren resident` prints it."""
    mode = f" ({answer['decode_mode']})" if answer.get("decode_mode") else ""  # none for a remote model
    model = f"{answer['model']} on {answer['backend']}{mode}" if answer.get("model") else "no model loaded yet"
    if answer.get("host") == "window":
        return f"Wren's window: pid {answer['pid']}, {model}, answering {answer['answering']}"
    return (f"resident engine: pid {answer['pid']}, {model}, answering {answer['answering']}, "
            f"ends after {answer['keep_alive']:g} s idle")


async def _cmd_resident(args) -> int:
    if args.action == "serve":
        if args.socket is None:
            raise WrenError("`wren resident serve` is started by `wren ask` with --socket PATH")
        from .resident_host import serve

        return await serve(args.socket)
    if not supported():
        print("wren: no resident engine on this system: `wren ask` answers in its own process")
        return 0
    answers = await request("quit" if args.action == "stop" else "status")
    if args.json:
        for answer in answers:
            print(json.dumps(answer))
        return 0
    if not answers:
        print("no resident engine is running")
    for answer in answers:
        if answer.get("type") == "bye":
            print(f"stopped the resident engine (pid {answer['pid']})")
        elif answer.get("type") == "status":
            print(status_line(answer))
        else:
            print(f"wren: {answer.get('message', answer)}", file=sys.stderr)
    return 0
