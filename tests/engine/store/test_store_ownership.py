"""Answers in progress have an owner: a second process's start-up sweep leaves a live
process's `streaming` answer alone, and marks it interrupted once that process is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from wren.engine.records import MessageStatus, Role
from wren.engine.store import Store

REPO = Path(__file__).resolve().parents[3]

# Process A: opens the store, starts an answer, reports its id, then obeys stdin.
_WRITER = textwrap.dedent("""
    import sys
    from wren.engine.records import MessageStatus, Role
    from wren.engine.store import Store
    store = Store(sys.argv[1])
    conv = store.create_conversation("live")
    q = store.add_message(conv.id, Role.USER, "question", parent_id=None)
    a = store.add_message(conv.id, Role.ASSISTANT, "", parent_id=q.id, status=MessageStatus.STREAMING)
    store.update_message(a.id, content="first words")
    print(a.id, flush=True)
    for line in sys.stdin:
        if line.strip() == "finish":
            store.update_message(a.id, content="first words and the rest", status=MessageStatus.COMPLETE)
            print("done", flush=True)
        elif line.strip() == "quit":
            break
    store.close()
""")

# Process B: only opens the same database (its start-up sweep runs) and reports the row.
_OPENER = textwrap.dedent("""
    import sys
    from wren.engine.store import Store
    store = Store(sys.argv[1])
    msg = store.get_message(int(sys.argv[2]))
    print(msg.status.value, msg.content)
    store.close()
""")


def _python(code: str, *args: str, **kwargs) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, "-c", code, *args], env=env, cwd=REPO, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)


def _open_elsewhere(db: Path, message_id: int) -> str:
    proc = _python(_OPENER, str(db), str(message_id))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return out.strip()


@pytest.mark.slow
def test_second_process_leaves_a_live_answer_streaming(tmp_path):
    db = tmp_path / "wren.sqlite3"
    writer = _python(_WRITER, str(db))
    try:
        answer_id = int(writer.stdout.readline())
        # B opens while A streams: A's answer stays A's.
        assert _open_elsewhere(db, answer_id) == "streaming first words"
        writer.stdin.write("finish\n")
        writer.stdin.flush()
        assert writer.stdout.readline().strip() == "done"
        assert _open_elsewhere(db, answer_id) == "complete first words and the rest"
        writer.stdin.write("quit\n")
        writer.stdin.flush()
        assert writer.wait(30) == 0
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()


@pytest.mark.slow
def test_answer_of_a_killed_process_becomes_interrupted(tmp_path):
    db = tmp_path / "wren.sqlite3"
    writer = _python(_WRITER, str(db))
    try:
        answer_id = int(writer.stdout.readline())
        writer.send_signal(signal.SIGKILL)
        writer.wait(30)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    assert _open_elsewhere(db, answer_id) == "interrupted first words"
    # The dead owner's lock file is swept away with it.
    assert list((tmp_path / ".wren.sqlite3-owners").glob("*.lock")) == []


def test_same_process_second_store_leaves_the_first_ones_answer(tmp_path):
    db = tmp_path / "wren.sqlite3"
    first = Store(db)
    conv = first.create_conversation()
    q = first.add_message(conv.id, Role.USER, "q", parent_id=None)
    a = first.add_message(conv.id, Role.ASSISTANT, "so far", parent_id=q.id, status=MessageStatus.STREAMING)
    second = Store(db)
    assert second.get_message(a.id).status is MessageStatus.STREAMING
    second.close()
    first.close()  # its owner gone: the next open recovers the row
    third = Store(db)
    assert third.get_message(a.id).status is MessageStatus.INTERRUPTED
    third.close()


def test_rows_from_before_owners_are_recovered(tmp_path):
    db = tmp_path / "wren.sqlite3"
    store = Store(db)
    conv = store.create_conversation()
    q = store.add_message(conv.id, Role.USER, "q", parent_id=None)
    a = store.add_message(conv.id, Role.ASSISTANT, "old", parent_id=q.id, status=MessageStatus.STREAMING,
                          owner=None)
    other = Store(db)  # the row has no owner: a crash from an older Wren
    assert other.get_message(a.id).status is MessageStatus.INTERRUPTED
    other.close()
    store.close()
