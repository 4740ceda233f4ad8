"""`wren ask` says what the safety policy did: a line per notice on standard error (plain
and --json), and a blocked question exits with status 3 with nothing on standard output.
Real `wren ask` processes over the tiny model, answering in their own process
(--keep-alive 0) and through the resident engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wren.engine.terminal import resident

REPO = Path(__file__).resolve().parents[3]
BLOCKED_STATUS = 3
POLICY = """
[actions]
"secret.openai_key" = "warn"
"pii.email" = "redact"

[blocklist]
words = ["pineapples"]
"""
KEY = "sk-proj-" + "Ab3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1eF3hJ5kL7"

pytestmark = pytest.mark.slow


def _env(keep_alive: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.pop("XDG_RUNTIME_DIR", None)  # the resident engine's socket under this test's data folder
    env["WREN_KEEP_ALIVE"] = keep_alive
    return env


def _wren(*args: str, keep_alive: str = "0") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "wren.engine.terminal", *args], cwd=REPO, env=_env(keep_alive),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180)


@pytest.fixture
def home(wren_home, tiny_model_dir, monkeypatch):
    from wren.engine.modelhub.registry import ModelRegistry

    ModelRegistry(wren_home / "models").register_folder(tiny_model_dir, name="tiny")
    (wren_home / "safety").mkdir(exist_ok=True)
    (wren_home / "safety" / "policy.toml").write_text(POLICY)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    yield wren_home
    _wren("resident", "stop")
    path = resident.socket_path(wren_home)
    deadline = time.monotonic() + 30
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)


def _ask(*words: str, keep_alive: str = "0") -> subprocess.CompletedProcess:
    return _wren("ask", "--model", "tiny", "--seed", "1", "--max-tokens", "2", *words, keep_alive=keep_alive)


def _check_blocked(done: subprocess.CompletedProcess, json_mode: bool) -> None:
    assert done.returncode == BLOCKED_STATUS, (done.stdout, done.stderr)
    assert "safety: user.blocklist in your question: blocked" in done.stderr
    assert "not sent: the safety policy blocks this question" in done.stderr
    if json_mode:
        events = [json.loads(line) for line in done.stdout.splitlines()]
        assert [e["type"] for e in events] == ["safetynotice", "finished"]
        assert events[-1]["reason"] == "blocked"
    else:
        assert done.stdout == ""


@pytest.mark.parametrize("keep_alive", ["0", "60"], ids=["in-process", "resident"])
def test_a_blocked_question_says_so_and_exits_3(home, keep_alive):
    _check_blocked(_ask("tell me about pineapples", keep_alive=keep_alive), json_mode=False)
    _check_blocked(_ask("--json", "tell me about pineapples", keep_alive=keep_alive), json_mode=True)


@pytest.mark.parametrize("keep_alive", ["0", "60"], ids=["in-process", "resident"])
def test_warnings_and_redactions_are_said_on_standard_error(home, keep_alive):
    done = _ask(f"is {KEY} mine? write to ann.lee@mailbox.org", keep_alive=keep_alive)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if "safety:" in line]
    assert lines == [
        "wren: safety: secret.openai_key in your question: warning (rule openai-api-key)",
        "wren: safety: pii.email in your question: replaced by [REDACTED:pii.email] (rule email-address)",
    ], done.stderr
    assert KEY not in done.stderr and "ann.lee" not in done.stderr
    assert done.stdout.endswith("\n")  # the answer (two tokens of a random model) still came


@pytest.mark.parametrize("keep_alive", ["0", "60"], ids=["in-process", "resident"])
def test_a_broken_policy_file_is_said_before_every_answer(home, keep_alive):
    """A mistake in the user's policy.toml leaves their rules out (the shipped policy is in
    force): `wren scan` said so, `wren ask` answered without a word. Now every answer says
    it on standard error first, through a resident engine too, and once the file is mended
    the user's rules are back in force at once."""
    policy = home / "safety" / "policy.toml"
    policy.write_text(POLICY.replace('["pineapples"]', '["pineapples"'))  # the array never closes
    done = _ask("tell me about pineapples", keep_alive=keep_alive)
    assert done.returncode == 0, done.stderr  # not blocked: the user's blocklist is not in force
    said = [line for line in done.stderr.splitlines() if "safety policy:" in line]
    assert len(said) == 1 and said[0].startswith(f"wren: safety policy: {policy}"), done.stderr
    assert "Unclosed array" in said[0] and said[0].endswith("using the shipped safety policy"), said
    policy.write_text(POLICY)
    mended = _ask("tell me about pineapples", keep_alive=keep_alive)
    assert "safety policy:" not in mended.stderr
    _check_blocked(mended, json_mode=False)


def test_an_answer_the_policy_stops_says_so_and_exits_3(scripted, wren_home, capsys):
    from tests.engine.cli.conftest import set_reply
    from wren.engine.terminal.main import main

    (wren_home / "safety").mkdir(exist_ok=True)
    (wren_home / "safety" / "policy.toml").write_text(POLICY)
    set_reply(scripted, "I like pineapples a lot.")
    assert main(["ask", "--keep-alive", "0", "what fruit do you like?"]) == BLOCKED_STATUS
    out, err = capsys.readouterr()
    assert "pineapples" not in out
    assert "wren: safety: user.blocklist in the answer: blocked (rule blocklist:words)" in err
    assert "wren: the answer was stopped: the safety policy blocks what came next" in err
