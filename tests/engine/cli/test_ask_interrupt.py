"""Ctrl+C during `wren ask --keep-alive 0` (the answer made in the asking process): a real
`wren` process over the tiny model, sent SIGINT at several moments from the start — while
it imports, while the model loads, while it answers. Each time it ends promptly with 130
and no answer is saved as complete."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from tests.engine.cli.test_resident import REPO, _env, _wren, long_tiny_dir, tiny_home  # noqa: F401

pytestmark = pytest.mark.slow


def _saved_statuses() -> list[str]:
    listed = _wren("conversations", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    statuses = []
    for line in listed.stdout.splitlines():
        conversation = json.loads(line)["id"]
        export = _wren("conversations", "export", str(conversation), "--format", "json")
        assert export.returncode == 0, export.stderr
        statuses += [m["status"] for m in json.loads(export.stdout)["messages"] if m["role"] == "assistant"]
    return statuses


@pytest.mark.serial  # a wall-clock bound: runs with the machine to itself (make test)
@pytest.mark.usefixtures("tiny_home")
@pytest.mark.parametrize(("keep_alive", "delay"), [("0", 0.8), ("0", 2.0), ("0", 4.0), ("60", 2.5)])
def test_ctrl_c_at_any_moment_stops_promptly_and_saves_no_complete_answer(keep_alive, delay):
    """keep_alive 60: the same through a resident engine the ask starts (and which loads the model)."""
    # greedy, the tiny model writes thousands of tokens here: far longer than any delay. The
    # machine-wide CPU turn is off: other processes' turns (other tests) would add their wait
    # to the time measured here, which is the asker's own handling of Ctrl+C.
    process = subprocess.Popen(
        [sys.executable, "-m", "wren.engine.terminal", "ask", "--keep-alive", keep_alive, "--model", "tiny", "--json",
         "--temperature", "0", "--max-tokens", "6000", "count to ten thousand"],
        cwd=REPO, env=_env(WREN_KEEP_ALIVE=keep_alive, WREN_CPU_SHARE="0"), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    time.sleep(delay)
    if process.poll() is not None:
        pytest.fail(f"the answer ended before the signal ({process.returncode}): {process.communicate()[1][-1500:]}")
    process.send_signal(signal.SIGINT)
    pressed = time.monotonic()
    try:
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    took = time.monotonic() - pressed
    assert process.returncode == 130, err[-2000:]
    assert took < 5, f"{took:.1f} s from Ctrl+C to exit"
    assert "Traceback" not in err, err[-2000:]
    events = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert all(e.get("reason") != "length" for e in events if e["type"] == "finished"), events[-3:]
    if keep_alive != "0":  # the engine may still be writing what it stopped
        deadline = time.monotonic() + 30
        while "streaming" in _saved_statuses() and time.monotonic() < deadline:
            time.sleep(0.2)
    assert "complete" not in _saved_statuses()
