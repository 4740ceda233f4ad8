"""A `wren ask` killed with SIGKILL mid-stream leaves a sound database behind."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def test_sigkill_mid_stream_leaves_question_and_partial_answer(starter_models_dir, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "models").symlink_to(starter_models_dir, target_is_directory=True)
    env = dict(os.environ, WREN_HOME=str(home), PYTHONPATH=str(REPO))
    question = "Write a long story about a lighthouse keeper and a storm."
    proc = subprocess.Popen(
        [sys.executable, "-m", "wren.engine.terminal", "ask", "--backend", "torch-cpu", "--seed", "1",
         "--temperature", "0.8", "--max-tokens", "2000", question],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO,
    )
    db = home / "wren.sqlite3"
    deadline = time.monotonic() + 120
    partial = ""
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
            if not db.exists():
                continue
            try:
                con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)
                row = con.execute(
                    "SELECT content FROM message WHERE role='assistant' AND status='streaming'"
                ).fetchone()
                con.close()
            except sqlite3.OperationalError:
                continue
            if row and len(row[0]) > 20:
                partial = row[0]
                break
        assert partial, f"no checkpointed answer appeared; stderr: {proc.stderr.read().decode() if proc.poll() is not None else ''}"
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()

    from wren.engine.records import MessageStatus, Role
    from wren.engine.store import Store

    store = Store(db)  # opening recovers messages left streaming
    (conv,) = store.list_conversations()
    messages = store.messages(conv.id)
    assert messages[0].role is Role.USER and messages[0].content == question
    answer = messages[1]
    assert answer.status is MessageStatus.INTERRUPTED
    assert answer.content.startswith(partial) and len(answer.content) >= len(partial)
    assert store.integrity_check() == "ok"
