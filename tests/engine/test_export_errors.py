"""`wren data export` to a place it cannot write: a clear error, a non-zero exit, no
traceback, no crash report, and nothing half-written (no partial zip, no folders made).

Each runs the real `wren` in its own process against real places: /proc, which takes no
new files even for root, and a file-size limit (RLIMIT_FSIZE, what a full disk looks like
to the writer) that cuts the zip off midway."""

from __future__ import annotations

import os
import random
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from wren.engine import paths
from wren.engine.records import Role
from wren.engine.store import Store

REPO = Path(__file__).resolve().parents[2]


def _wren(*args: str, limit_bytes: int | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))

    def limit() -> None:  # in the child: writing past limit_bytes fails with EFBIG
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    return subprocess.run([sys.executable, "-m", "wren.engine.terminal", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                          preexec_fn=limit if limit_bytes else None)


def _chat(text: str = "a question to keep") -> None:
    store = Store(paths.database_path())
    conv = store.create_conversation("Kept")
    q = store.add_message(conv.id, Role.USER, text, parent_id=None)
    store.add_message(conv.id, Role.ASSISTANT, "An answer.", parent_id=q.id)
    store.close()


def _clean_failure(done: subprocess.CompletedProcess, where: str) -> None:
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr and "crash report" not in done.stderr, done.stderr
    assert done.stderr.startswith("wren: cannot write the export to ") and where in done.stderr, done.stderr
    assert "nothing was written" in done.stderr
    crashes = paths.data_dir() / "crashes"
    assert not crashes.exists() or not any(p.name.startswith("crash-") for p in crashes.iterdir())


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc (Linux)")
@pytest.mark.parametrize("target", ["/proc/wren-backup.zip", "/proc", "/proc/wren-new-folder/backup.zip"])
def test_export_to_proc_fails_cleanly(target):
    _chat()
    done = _wren("data", "export", target)
    _clean_failure(done, "/proc/")
    assert not Path("/proc/wren-new-folder").exists()


def test_export_cut_off_by_a_full_disk_leaves_nothing_behind(tmp_path):
    # A chat too big to fit under the limit: random letters compress about 4:3 only.
    rng = random.Random(7)
    _chat("".join(rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") for _ in range(600_000)))
    out = tmp_path / "exports"
    out.mkdir()
    target = out / "new" / "deeper" / "backup.zip"
    done = _wren("data", "export", str(target), limit_bytes=300_000)
    _clean_failure(done, str(target))
    assert list(out.iterdir()) == []  # no zip, no .partial, not even the folders it made

    done = _wren("data", "export", str(target))  # with room it works, and the chat is all there
    assert done.returncode == 0, done.stderr
    assert target.stat().st_size > 300_000
