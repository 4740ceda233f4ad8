"""An MCP tool's result is untrusted text: `wren tools call` and the `[tool]`/`[result]`
lines of `wren ask --tools` print it on a terminal without escape sequences (no clipboard
write by OSC 52, no cleared screen), as a model's answer is printed; to a pipe it stays as
it came. A real stdio MCP server (mcp_test_server.py's echo tool) returns the sequences."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engine.cli.conftest import FakeTerminal
from tests.engine.mcp.conftest import SERVER
from tests.engine.tools.conftest import by_round, call
from wren.engine.inference.backends.scripted import ScriptedBackend
from wren.engine.terminal.main import main

REPO = Path(__file__).resolve().parents[3]
# OSC 52 (set the clipboard), clear screen and cursor home, a C1 OSC, a window title.
HOSTILE = "\x1b]52;c;cm0gLXJmIH4=\x07safe\x1b[2J\x1b[H text\x9d0;pwned\x9c end\x1b]0;title\x1b\\"
CONTROLS = ("\x1b", "\x07", "\x9d", "\x9c", "\x9b")



def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))


def _call_on_a_pty(*extra: str) -> str:
    import pty  # POSIX only

    master, slave = pty.openpty()
    args = json.dumps({"text": HOSTILE})
    process = subprocess.Popen([sys.executable, "-m", "wren.engine.terminal", "tools", "call", "t__echo", "--args", args,
                                *extra], cwd=REPO, env=_env(), stdin=subprocess.DEVNULL, stdout=slave,
                               stderr=subprocess.PIPE)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not data:
            break
        chunks.append(data)
    _, err = process.communicate(timeout=120)
    os.close(master)
    assert process.returncode == 0, err.decode()
    return b"".join(chunks).decode()


@pytest.mark.slow
def test_tools_call_on_a_terminal_prints_no_escape_sequences(wren_home):
    assert main(["mcp", "add", "t", "--", sys.executable, str(SERVER)]) == 0
    out = _call_on_a_pty()
    assert not any(c in out for c in CONTROLS), repr(out)
    assert "safe text end" in out
    shown = json.loads(_call_on_a_pty("--json"))  # JSON on a terminal: every control escaped
    assert shown["content"] == HOSTILE
    # To a pipe the result is left exactly as it came (`| cat -v` shows it).
    piped = subprocess.run([sys.executable, "-m", "wren.engine.terminal", "tools", "call", "t__echo", "--args",
                            json.dumps({"text": HOSTILE})], cwd=REPO, env=_env(), stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=120)
    assert piped.stdout == HOSTILE + "\n"


@pytest.fixture
def calls_echo(wren_home, tiny_model_dir, monkeypatch):
    from wren.engine.inference import select
    from wren.engine.modelhub.registry import ModelRegistry

    ModelRegistry(wren_home / "models").register_folder(tiny_model_dir, name="tiny")
    backend = ScriptedBackend(by_round("Echoing. " + call("t__echo", text=HOSTILE), "Done."))
    monkeypatch.setattr(select, "resolve_backend", lambda name: backend)
    assert main(["mcp", "add", "t", "--", sys.executable, str(SERVER)]) == 0
    return backend


def test_ask_tools_result_line_on_a_terminal_has_no_escape_sequences(calls_echo, monkeypatch, capsys):
    err = FakeTerminal()
    capsys.readouterr()
    monkeypatch.setattr(sys, "stderr", err)
    assert main(["ask", "--model", "tiny", "--tools", "t__echo", "--approve", "--keep-alive", "0", "echo it"]) == 0
    # Wren's own progress line ends in "\r\x1b[K" on a terminal; the call's lines follow it.
    lines = [line.rsplit("\x1b[K", 1)[-1] for line in err.getvalue().split("\n")]
    tool = next(line for line in lines if line.startswith("[tool] t__echo "))
    result = next(line for line in lines if line.startswith("[result] "))
    assert result.startswith("[result] safe text"), repr(result)
    assert not any(c in tool + result for c in CONTROLS), repr(tool + result)
