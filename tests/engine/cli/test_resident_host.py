"""The engine side of `wren ask` (engine/terminal/resident_host.py): a real engine behind a
real Unix socket reads each question as a typed AskRequest, refuses a bad line with what
was wrong and runs no terminal code. (That the engine's core imports nothing of the terminal
is tests/test_import_contract.py's rule.)"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.test_import_contract import imported_modules
from wren.engine import engine_sockets
from wren.engine.records import ORIGIN_KEY, TERMINAL_ORIGIN
from wren.engine.terminal import resident_host

REPO = Path(__file__).resolve().parents[3]
TERMINAL = REPO / "engine" / "terminal"
# What the host may import of the terminal package: itself and the typed question.
HOST_MODULES = {"engine.terminal", "engine.terminal.resident_host", "engine.terminal.ask_request"}

needs_sockets = pytest.mark.skipif(not engine_sockets.supported(), reason="the host listens on a Unix socket")


def _module(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    package = parts[-1] == "__init__"
    if package:
        parts.pop()
    return ".".join(parts), package


@pytest.mark.parametrize("name", ["resident_host.py", "ask_request.py"])
def test_the_host_names_no_terminal_command_line_module(name):
    """Every import statement counts, a function's too: what the resident engine runs."""
    path = TERMINAL / name
    module, package = _module(path)
    names = imported_modules(path.read_text(encoding="utf-8"), module, package)
    terminal = {n for n in names if n.startswith("engine.terminal.")}
    # `from .ask_request import AskRequest` yields engine.terminal.ask_request.AskRequest too: a name
    modules = {n for n in terminal if not any(n.startswith(m + ".") for m in HOST_MODULES - {"engine.terminal"})}
    assert modules <= HOST_MODULES, sorted(modules - HOST_MODULES)
    assert "argparse" not in names


def test_the_checks_catch_what_the_old_host_did():
    """The resident engine once rebuilt an argparse.Namespace and ran the CLI's own code."""
    old = ("import argparse\nfrom .resident import _ASK_FIELDS\n"
           "async def _ask():\n    from .ask import ask_events\n    from .main import _load\n")
    names = imported_modules(old, "engine.terminal.resident_host")
    assert {"argparse", "engine.terminal.ask", "engine.terminal.main", "engine.terminal.resident"} <= names


def test_loading_the_host_loads_no_terminal_command_line_module():
    code = ("import sys\nimport wren.engine.terminal.resident_host\nimport wren.engine.api\n"
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('wren.engine.terminal') or m == 'argparse')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    loaded = set(out.stdout.split())
    assert loaded <= {"wren." + m for m in HOST_MODULES}, sorted(loaded)


# -- over a real socket -----------------------------------------------------------------


@pytest.fixture
def socket_path():
    folder = Path(tempfile.mkdtemp(prefix="wren-host-"))  # short: a socket's path has a length limit
    folder.chmod(0o700)
    yield folder / "engine.sock"
    shutil.rmtree(folder, ignore_errors=True)


async def _exchange(path: Path, line: bytes) -> list[dict]:
    """Send one line, read every line back until the host closes."""
    reader, writer = await asyncio.open_unix_connection(str(path))
    writer.write(line)
    await writer.drain()
    answers = []
    while raw := await asyncio.wait_for(reader.readline(), 60):
        answers.append(json.loads(raw))
    writer.close()
    return answers


def _ask(question) -> bytes:
    return json.dumps({"resident": engine_sockets.PROTOCOL, "cmd": "ask", "question": question}).encode() + b"\n"


@needs_sockets
def test_the_host_answers_a_typed_question_and_refuses_bad_lines(make_engine, socket_path):
    async def scenario() -> None:
        engine = make_engine("Scripted answer.")
        host = resident_host.Resident(socket_path, engine)
        server, _ = await resident_host._listen(socket_path, host)
        try:
            bad_json = await _exchange(socket_path, b"{not json\n")
            assert len(bad_json) == 1 and bad_json[0]["type"] == "error" and bad_json[0]["status"] == 2
            assert "one JSON object a line" in bad_json[0]["message"]

            not_object = await _exchange(socket_path, b"[1, 2]\n")
            assert not_object[0]["status"] == 2 and "not list" in not_object[0]["message"]

            bad_field = await _exchange(socket_path, _ask({"text": "hi", "temperature": "hot"}))
            assert bad_field == [{"type": "error", "status": 2,
                                  "message": "a question's 'temperature' must be a number or null, not str"}]
            unknown = await _exchange(socket_path, _ask({"text": "hi", "args": {"model": "tiny"}}))
            assert unknown[0]["status"] == 2 and "no field 'args'" in unknown[0]["message"]
            # the version-1 shape (`wren ask`'s arguments) is another protocol: its asker answers itself
            old = await _exchange(socket_path, json.dumps({"resident": 1, "cmd": "ask", "text": "hi"}).encode() + b"\n")
            assert old == [{"type": "error", "refused": True, "message": "another protocol"}]
            assert await engine.conversations.list() == []  # nothing ran for any of them
            assert host.asking == 0

            answered = await _exchange(socket_path, _ask({"text": "hi", "title": "a greeting", "temperature": 0,
                                                          "save": True, "keep_alive": 42}))
            kinds = [a["type"] for a in answered]
            assert kinds[0] == "started" and kinds[-2:] == ["finished", "end"], kinds
            assert "".join(a["text"] for a in answered if a["type"] == "delta") == "Scripted answer."
            (conv,) = await engine.conversations.list()
            assert conv.title == "a greeting" and conv.settings.get(ORIGIN_KEY) == TERMINAL_ORIGIN
            assert host.keep_alive == 42.0 and host.asking == 0
        finally:
            server.close()
            await engine.close()

    asyncio.run(scenario())
