"""Ctrl+C on `wren serve` with streams open: a real `wren serve` process (the scripted
backend, through tests/engine/cli/scripted_wren.py) and real streaming clients. The
answers are stopped and kept as stopped with the text they had, each stream ends with
its final chunk, and the process exits 130 with no traceback."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[3]
LAUNCHER = REPO / "tests" / "engine" / "cli" / "scripted_wren.py"
KEY = "wren-interrupt-test-key-0123456789abcdef"


def _choose_tiny(home: Path, tiny_model_dir: Path) -> None:
    from wren.engine.modelhub.registry import ModelRegistry
    from wren.engine.store import Store

    ModelRegistry(home / "models").register_folder(tiny_model_dir, name="tiny")
    store = Store(home / "wren.sqlite3")
    store.set_setting("model", "tiny")
    store.close()


def _start(home: Path) -> tuple[subprocess.Popen, str]:
    env = dict(os.environ, WREN_API_KEY=KEY, WREN_TEST_DELAY="0.03", WREN_TEST_REPLY="word " * 600,
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    proc = subprocess.Popen([sys.executable, str(LAUNCHER), "serve", "--port", "0"], cwd=REPO, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = ""
    deadline = time.monotonic() + 60
    while "at http://" not in line and time.monotonic() < deadline:
        line = proc.stderr.readline()
        assert line or proc.poll() is None, f"wren serve ended: {proc.returncode}"
    return proc, re.search(r"at (http://127\.0\.0\.1:\d+)", line).group(1)


class Stream(threading.Thread):
    """A streaming request read to its end; `started` once the first answer bytes came."""

    def __init__(self, url: str, path: str, body: dict, marker: bytes):
        super().__init__(daemon=True)
        self.url, self.path, self.body, self.marker = url, path, body, marker
        self.started = threading.Event()
        self.raw = b""
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            with httpx.stream("POST", self.url + self.path, headers={"Authorization": f"Bearer {KEY}"},
                              json=self.body, timeout=60) as r:
                for part in r.iter_raw():
                    self.raw += part
                    if self.marker in self.raw:
                        self.started.set()
        except Exception as exc:  # the test reports it
            self.error = exc


def test_ctrl_c_with_streams_open_stops_and_keeps_the_answers_and_exits_cleanly(wren_home: Path, tiny_model_dir):
    _choose_tiny(wren_home, tiny_model_dir)
    proc, url = _start(wren_home)
    try:
        # the scripted model answers one sequence at a time: the second waits its turn, open
        streams = [Stream(url, "/api/conversation", {"content": "hello"}, b"id: 5\n"),
                   Stream(url, "/v1/chat/completions", {"stream": True, "messages": [{"role": "user", "content": "hi"}]},
                          b"")]
        streams[0].start()
        assert streams[0].started.wait(30), (streams[0].raw[-300:], streams[0].error)
        streams[1].start()
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        for stream in streams:
            stream.join(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()

    assert "Traceback" not in err and "Exception in ASGI" not in err, err[-3000:]
    assert proc.returncode == 130, err[-2000:]
    assert "stopped" in err
    conversation, openai = streams
    assert conversation.error is None and openai.error is None, (conversation.error, openai.error)
    assert b"finished_partial_completion" in conversation.raw and conversation.raw.endswith(b"data: [DONE]\n\n")
    assert openai.raw.endswith(b"data: [DONE]\n\n"), openai.raw[-300:]
    # not "finish_reason": "stop": OpenAI's clients would take the cut answer for a whole one
    assert b'"code": "cancelled"' in openai.raw and b"stopped before it finished" in openai.raw, openai.raw[-300:]
    # read without Wren's store, which would mark a leftover "streaming" row interrupted on opening
    with sqlite3.connect(f"file:{wren_home / 'wren.sqlite3'}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT status, content FROM message WHERE role = 'assistant'").fetchall()
    assert len(rows) == 1
    status, content = rows[0]
    assert status == "stopped" and content.startswith("word word"), (status, content[:80])
