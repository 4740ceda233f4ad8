"""The engines that answer `wren ask` over a Unix socket. The resident engine's process
(`wren resident serve`, started by `wren ask`) answers until it has been idle `keep_alive`
seconds, loading the model each question names. While Wren's window is open, its engine
answers too (`host_for_window`), for the model the window has loaded, so a question from the
terminal does not load a second copy; one for another model is left to the resident engine.
engine/terminal/resident.py is the asking side and describes the protocol.

A question arrives as an AskRequest (ask_request.py), checked field by field before anything
runs, and is answered with ask_request.answer over the Engine's public surface: nothing here
imports the terminal's command line (main.py, ask.py, argparse) or prints."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from .. import __version__, paths
from ..engine_sockets import LINE_LIMIT, PROTOCOL, connect, private_folder, send, supported, window_socket_path
from ..errors import InvalidRequest, WrenError
from ..keep_alive import DEFAULT_KEEP_ALIVE, seconds
from .ask_request import AskRequest, answer, load_asked_model, policy_notices


class _Stopped(Exception):
    """An answer stopped before it began (while its model loaded)."""


class Refused(Exception):
    """The window's engine leaves this question to the resident engine (another model)."""


class Resident:
    """Answers `wren ask` lines on one socket: the resident engine's process (until idle
    `keep_alive` seconds), or with `window`, the window's engine (its loaded model only;
    never stopped from the terminal)."""

    def __init__(self, path: Path, engine: Any, *, window: bool = False) -> None:
        self.path = path
        self.engine = engine
        self.window = window
        self.keep_alive: float | None = None  # the last request's, else the setting's
        self.asking = 0  # questions being answered; a client that only stays connected keeps nothing alive
        self.idle_since = time.monotonic()
        self.done = asyncio.Event()
        self._models = asyncio.Condition()  # a model change waits for the answers on the current one
        self._answering = 0
        self._notices_sent = 0
        self._policy_stamp = _policy_stamp()
        self._cuts: dict[int, Callable[[str], None]] = {}  # each answer's stop, given why

    async def idle_limit(self) -> float:
        if self.keep_alive is not None:
            return self.keep_alive
        return await self.engine.settings.terminal_keep_alive()

    async def watch(self) -> None:
        """Ends the process when idle past the keep-alive, or when its data folder is gone."""
        home = paths.data_dir()
        seen, limit = None, DEFAULT_KEEP_ALIVE
        retry = time.monotonic()
        while not self.done.is_set():
            await asyncio.sleep(0.25)
            if self.idle_since != seen:  # read as the engine goes idle, not four times a second
                seen, limit = self.idle_since, await self.idle_limit()
            if not home.is_dir():
                self.shutdown(f"the data folder {home} was removed")
            elif not self.path.exists():
                self.shutdown(f"the resident engine's socket {self.path} was removed")
            elif self.asking == 0 and time.monotonic() - self.idle_since >= limit:
                self.done.set()
            elif self.asking == 0 and time.monotonic() >= retry:  # an answer a full disk left unfinished
                retry = time.monotonic() + 5.0
                try:
                    await self.engine.db(self.engine.store.flush_held)
                except Exception:  # the watch goes on: it is what ends this process
                    logging.getLogger("wren.resident").exception("retrying held answers failed")

    def cut(self, reason: str) -> int:
        """Stop every answer in progress; each asker is told `reason` and exits non-zero.
        How many were stopped."""
        cuts = list(self._cuts.values())
        for cut in cuts:
            cut(reason)
        return len(cuts)

    def shutdown(self, reason: str) -> None:
        """End the process; the answers in progress stop, and their askers are told why."""
        self.cut(reason)
        self.done.set()

    async def settled(self, timeout: float) -> None:
        """Wait (at most `timeout` s) until no question is being answered."""
        deadline = time.monotonic() + timeout
        while self.asking and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One client's line: a command, or a question and then its approvals and stops."""
        try:
            message = _message(await reader.readline())
            if message.get("resident") != PROTOCOL:
                send(writer, {"type": "error", "refused": True, "message": "another protocol"})
            elif message.get("cmd") == "ask":
                await self._question(message, reader, writer)
            else:
                send(writer, await self._command(message))
            await writer.drain()
        except InvalidRequest as exc:  # not a JSON object: said to whoever sent it
            with contextlib.suppress(ConnectionError):
                send(writer, {"type": "error", "message": str(exc), "status": 2})
                await writer.drain()
        except ConnectionError:
            pass
        except Exception:  # a bug: logged; the asker sees the line close
            logging.getLogger("wren.resident").exception("a request could not be handled")
        finally:
            writer.close()
            with contextlib.suppress(OSError, ConnectionError):
                await writer.wait_closed()

    async def _command(self, message: dict) -> dict:
        """The answer to "status", "quit", "erase" or "drop"."""
        cmd = message.get("cmd")
        if cmd == "status":
            return await self._status()
        if cmd == "quit" and self.window:
            return {"type": "error", "status": 1, "pid": os.getpid(),
                    "message": f"Wren's window (pid {os.getpid()}) answers `wren ask` while it is open; "
                               "it stops when Wren quits"}
        if cmd == "quit":
            self.shutdown(str(message.get("reason") or "the resident engine was stopped (`wren resident stop`)"))
            return {"type": "bye", "pid": os.getpid()}
        if cmd == "erase":
            return self._erase(str(message.get("reason") or "the data is being erased"))
        if cmd == "drop":
            return await self._drop(str(message.get("model")), str(message.get("reason") or ""))
        return {"type": "error", "message": f"unknown command {cmd!r}", "status": 2}

    async def _status(self) -> dict:
        status = self.engine.models.current
        return {"type": "status", "pid": os.getpid(), "version": __version__,
                "model": status.name if status else None, "backend": status.backend if status else None,
                "decode_mode": await self.engine.models.decode_mode() if status else None,
                "keep_alive": None if self.window else await self.idle_limit(),
                "answering": self._answering, "host": "window" if self.window else "resident"}

    async def _question(self, message: dict, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A question: refused with what was wrong before anything runs, else answered."""
        try:
            request = AskRequest.from_wire(message.get("question"))
        except InvalidRequest as exc:
            send(writer, {"type": "error", "message": str(exc), "status": 2})
            return
        self.asking += 1
        try:
            if request.keep_alive is not None:
                self.keep_alive = seconds(request.keep_alive)  # a bad one cannot make it endless
            await self._answer(request, reader, writer)
        finally:
            self.asking -= 1
            self.idle_since = time.monotonic()

    async def _answer(self, request: AskRequest, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        from ..events import Started, event_to_dict

        one = _Answer(self, reader)
        listening = asyncio.create_task(one.listen())
        self._cuts[id(one)] = one.stop
        try:
            await self._fresh_policy()
            for message in policy_notices(self.engine):
                send(writer, {"type": "notice", "message": message})
            async for event in answer(self.engine, request, load=one.load):
                if isinstance(event, Started):
                    one.started(event.conversation_id)
                if not writer.is_closing():
                    send(writer, event_to_dict(event))
                    with contextlib.suppress(ConnectionError):
                        await writer.drain()
            self._send_notices(writer)
            send(writer, one.ending())
        except _Stopped:
            send(writer, {"type": "error", "status": 1 if one.why else 130,
                          "message": f"{one.why[0] if one.why else 'stopped'}; the question was not answered"})
        except Refused as exc:
            send(writer, {"type": "error", "refused": True, "message": str(exc)})
        except WrenError as exc:
            self._send_notices(writer)
            send(writer, {"type": "error", "message": str(exc), "status": 2})
        except Exception as exc:  # a bug: logged and written up here; the client says so
            send(writer, _crashed(exc))
        finally:
            self._cuts.pop(id(one), None)
            listening.cancel()
            if one.held:
                async with self._models:
                    self._answering -= 1
                    self._models.notify_all()

    def _erase(self, reason: str) -> dict:
        """`wren data erase` is about to delete everything: a resident engine ends (its
        database and log files closed first); the window's stops the answers it gives the
        terminal (the window itself stays)."""
        if self.window:
            return {"type": "released", "pid": os.getpid(), "host": "window", "stopped": self.cut(reason)}
        self.shutdown(reason)
        return {"type": "bye", "pid": os.getpid()}

    async def _drop(self, name: str, reason: str) -> dict:
        """`wren models rm NAME` is about to delete a model: a resident engine that has it
        loaded stops its answers on it and unloads it; the window keeps the model the user
        chose there, so the removal is refused while the window has it loaded."""
        status = self.engine.models.current
        if status is None or status.name != name:
            return {"type": "dropped", "pid": os.getpid(), "had": False}
        if self.window:
            return {"type": "error", "status": 2, "pid": os.getpid(),
                    "message": f"{name} is loaded in Wren's window (pid {os.getpid()}); "
                               "choose another model there before removing it"}
        async with self._models:
            self.cut(reason or f"the model {name} was removed (`wren models rm`)")
            while self._answering:
                await self._models.wait()
            status = self.engine.models.current
            if status is not None and status.name == name:
                await self.engine.models.unload()
        return {"type": "dropped", "pid": os.getpid(), "had": True}

    async def acquire(self, request: AskRequest) -> None:
        """The asked-for model, loaded unless it already is (answers on another model finish
        first), and counted as answering."""
        engine = self.engine
        name, backend = await self._wanted(request)
        if self.window:  # the window's model is the user's choice there: never switched from here
            status = engine.models.current
            if status is None or status.name != name or backend not in (None, status.backend):
                raise Refused(f"the window has {status.name if status else 'no model'} loaded, not {name}")
            self._answering += 1
            return
        async with self._models:
            while True:
                status = engine.models.current
                if status is not None and status.name == name and backend in (None, status.backend):
                    break
                if self._answering == 0:
                    await load_asked_model(engine, request)
                    break
                await self._models.wait()
            self._answering += 1

    async def _wanted(self, request: AskRequest) -> tuple[str, str | None]:
        """The model's name and backend a question means (None: whichever `auto` chose)."""
        from ..inference.select import resolve_backend

        name = request.model or await self.engine.models.default()
        backend = request.backend or await self.engine.settings.get("backend", "auto")
        return name, None if backend == "auto" else resolve_backend(backend).name

    async def _fresh_policy(self) -> None:
        """The safety policy as its files are now (another Wren may have changed them)."""
        stamp = _policy_stamp()
        if stamp != self._policy_stamp:
            from ..safety import Policy

            self._policy_stamp = stamp
            loop = asyncio.get_running_loop()
            self.engine.policy, self.engine.policy_warnings = await loop.run_in_executor(None, Policy.load)

    def _send_notices(self, writer: asyncio.StreamWriter) -> None:
        notices = self.engine.notices()
        for notice in notices[self._notices_sent:]:
            send(writer, {"type": "notice", "message": notice.message})
        self._notices_sent = len(notices)


class _Answer:
    """One question being answered: who stopped it and why, its conversation, and whether
    it holds the model."""

    def __init__(self, host: Resident, reader: asyncio.StreamReader) -> None:
        self.host = host
        self.reader = reader
        self.stopped = False
        self.why: list[str] = []  # why the engine stopped this answer (not the asker): said to it
        self.conversation: int | None = None
        self.held = False  # the model is counted as in use until the answer ends

    def stop(self, reason: str | None = None) -> None:
        self.stopped = True
        if reason and not self.why:
            self.why.append(reason)
        if self.conversation is not None:
            self.host.engine.chat.stop(self.conversation)

    def started(self, conversation_id: int) -> None:
        self.conversation = conversation_id
        if self.stopped:
            self.host.engine.chat.stop(conversation_id)

    async def load(self, engine: Any, request: AskRequest) -> None:
        await self.host.acquire(request)
        self.held = True
        if self.stopped:  # stopped while the model loaded: no chat is made for it
            raise _Stopped

    async def listen(self) -> None:
        """Approvals and Ctrl+C from the client; its going away stops the answer."""
        while True:
            try:
                raw = await self.reader.readline()
            except (ConnectionError, OSError):  # gone while an event was being written to it
                raw = b""
            if not raw:
                self.stop()
                return
            try:
                line = json.loads(raw)
            except json.JSONDecodeError:
                continue
            if not isinstance(line, dict):
                continue
            if line.get("cmd") == "stop":
                self.stop()
            elif line.get("cmd") == "approve" and "id" in line and "decision" in line:
                self.host.engine.tools.approve(str(line["id"]), str(line["decision"]))

    def ending(self) -> dict:
        """The answer's last line: its end, or, cut by erase, a removed model or folder or a
        stop, an error that says why (the asker then fails)."""
        if self.why:
            return {"type": "error", "status": 1, "cut": self.conversation is not None,
                    "message": f"{self.why[0]}; the answer was cut there (what came is saved)"}
        return {"type": "end"}


def _message(raw: bytes) -> dict:
    """A client's first line as a JSON object (nothing at all reads as {})."""
    if not raw:
        return {}
    try:
        message = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"a request must be one JSON object a line: {exc}") from None
    if not isinstance(message, dict):
        raise InvalidRequest(f"a request must be a JSON object, not {type(message).__name__}")
    return message


def _crashed(exc: Exception) -> dict:
    """A bug while answering: logged and written up here; the client says so."""
    from ..crashreport import write_crash_report

    logging.getLogger("wren.resident").exception("answering a question failed")
    report = write_crash_report(exc, program="wren", where="the resident engine")
    where = f"; a crash report was saved at {report}" if report else ""
    return {"type": "error", "status": 1,
            "message": f"an unexpected error in the resident engine: {type(exc).__name__}{where}"}


def _policy_stamp() -> tuple:
    folder = paths.data_dir() / "safety"
    stamp = []
    for path in sorted(folder.rglob("*")) if folder.is_dir() else ():
        with contextlib.suppress(OSError):
            info = path.stat()
            stamp.append((str(path), info.st_mtime_ns, info.st_size))
    return tuple(stamp)


async def serve(path: Path) -> int:
    private_folder(path.parent)
    if await connect(path) is not None:
        return 0  # another engine listens there already
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # left by an engine that did not end cleanly
    # Not the folder of whichever `wren ask` started it, which may go away.
    with contextlib.suppress(OSError):
        os.chdir(Path.home())
    from ..api import Engine

    engine = Engine.open()
    resident = Resident(path, engine)
    server, mine = await _listen(path, resident)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, resident.shutdown, f"the resident engine was stopped ({sig.name})")
    watching = asyncio.create_task(resident.watch())
    from ..logs import log_event

    log_event("resident.started", pid=os.getpid())
    try:
        await resident.done.wait()
    finally:
        server.close()
        watching.cancel()
        await resident.settled(15.0)  # the askers cut short are told why before the data closes
        await engine.close()
        _unlink_if_mine(path, mine)  # gone once the database is closed (`wren data erase` waits for it)
        log_event("resident.stopped", pid=os.getpid())
    return 0


async def _listen(path: Path, resident: Resident) -> tuple[asyncio.AbstractServer, int]:
    """The server on `path` (its owner's alone) and the socket file's inode."""
    old_umask = os.umask(0o177)
    try:
        server = await asyncio.start_unix_server(resident.handle, str(path), limit=LINE_LIMIT)
    finally:
        os.umask(old_umask)
    return server, path.stat().st_ino


def _unlink_if_mine(path: Path, inode: int) -> None:
    """Remove the socket file unless another engine has bound the path since."""
    with contextlib.suppress(OSError):
        if path.stat().st_ino == inode:
            path.unlink()


async def host_for_window(engine: Any) -> Callable[[], Awaitable[None]] | None:
    """Let `wren ask` reach `engine` (the window's) while it runs: the call that stops it,
    or None where there are no Unix sockets, or another window of these data answers."""
    if not supported():
        return None
    path = window_socket_path()
    private_folder(path.parent)
    if await connect(path) is not None:
        return None
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # left by a window that did not end cleanly
    server, mine = await _listen(path, Resident(path, engine, window=True))

    async def stop() -> None:
        server.close()
        _unlink_if_mine(path, mine)

    return stop
