"""The resident engine against what the user does elsewhere: erasing the data, removing the
model or the data folder, stopping the engine from another terminal. An answer cut by any
of these says why and exits non-zero; the engine lets go of what was deleted. Also its
keep-alive's bounds and what counts as idle, and which variables make a second engine.
Real `wren` processes and the real engine over the tiny model (tests/engine/cli/test_resident.py)."""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import time
from pathlib import Path

import pytest

from tests.engine.cli.test_resident import (  # noqa: F401
    _answer_stream,
    _ask,
    _status,
    _until_first_delta,
    _wren,
    long_tiny_dir,
    tiny_home,
)
from wren.engine import engine_sockets
from wren.engine.errors import WrenError
from wren.engine.terminal import resident

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not resident.supported(), reason="the resident engine listens on a Unix socket"),
]


def _gone(pid: int, wait: float = 30) -> bool:
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except (ProcessLookupError, FileNotFoundError):
            return True
        time.sleep(0.1)
    return False


def _cut_mid_answer(action) -> tuple[int, str, int]:
    """A long answer through a warm engine, `action()` once it streams: the asker's exit
    status and standard error, and the engine's pid."""
    assert _ask("--max-tokens", "2", "hi").returncode == 0  # the engine up, the model loaded
    pid = _status()["pid"]
    process = _answer_stream("count to ten thousand")
    try:
        _until_first_delta(process)
        action()
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    return process.returncode, err, pid


@pytest.mark.usefixtures("tiny_home")
def test_erase_stops_the_engine_first_and_the_cut_answer_says_so():
    erased = []
    code, err, pid = _cut_mid_answer(lambda: erased.append(_wren("data", "erase", "--yes")))
    assert erased[0].returncode == 0, erased[0].stderr
    assert code == 1, err[-2000:]
    assert "`wren data erase`" in err
    assert _gone(pid, wait=5), "the resident engine outlived the erase (its deleted files stay open)"
    listed = _wren("conversations", "list", "--json")
    assert listed.returncode == 0 and listed.stdout.strip() == ""  # nothing came back after the erase


@pytest.mark.usefixtures("tiny_home")
def test_a_removed_data_folder_ends_the_engine_and_the_asker_says_why(wren_home):
    code, err, pid = _cut_mid_answer(lambda: shutil.rmtree(wren_home))
    assert code == 1, err[-2000:]
    assert f"the data folder {wren_home} was removed" in err
    assert _gone(pid)


@pytest.mark.usefixtures("tiny_home")
def test_resident_stop_from_another_terminal_tells_the_asker():
    stopped = []
    code, err, pid = _cut_mid_answer(lambda: stopped.append(_wren("resident", "stop")))
    assert f"stopped the resident engine (pid {pid})" in stopped[0].stdout
    assert code == 1, err[-2000:]
    assert "`wren resident stop`" in err
    assert _gone(pid)


@pytest.mark.usefixtures("tiny_home")
def test_models_rm_makes_the_engine_drop_the_model():
    removed = []
    code, err, pid = _cut_mid_answer(lambda: removed.append(_wren("models", "rm", "tiny", "--yes")))
    assert removed[0].returncode == 0, removed[0].stderr
    assert code == 1, err[-2000:]
    assert "the model tiny is being removed" in err
    status = _status()
    assert status["pid"] == pid and status["model"] is None  # the engine stays, without the model
    again = _ask("--max-tokens", "2", "hi")
    assert again.returncode == 2 and "no model named 'tiny'" in again.stderr


@pytest.mark.usefixtures("tiny_home")
def test_an_endless_keep_alive_is_refused():
    done = _ask("--keep-alive", "1e400", "--max-tokens", "2", "hi")
    assert done.returncode == 2
    assert "--keep-alive must be 0 or more seconds, at most 604800" in done.stderr
    assert _status() == {"type": "none"}


def test_keep_alive_bounds(monkeypatch):
    monkeypatch.delenv("WREN_KEEP_ALIVE", raising=False)
    for bad in (float("inf"), float("nan"), resident.MAX_KEEP_ALIVE + 1, -1.0):
        with pytest.raises(WrenError, match="at most 604800"):
            resident.keep_alive(argparse.Namespace(keep_alive=bad))
    monkeypatch.setenv("WREN_KEEP_ALIVE", "inf")
    with pytest.raises(WrenError, match="WREN_KEEP_ALIVE must be"):
        resident.keep_alive(argparse.Namespace(keep_alive=None))
    assert resident.keep_alive(argparse.Namespace(keep_alive=resident.MAX_KEEP_ALIVE)) == resident.MAX_KEEP_ALIVE
    # a setting (or a question's value) past the week is held to it, not refused
    assert resident.seconds(1e400) == resident.seconds(10**12) == resident.MAX_KEEP_ALIVE


@pytest.mark.usefixtures("tiny_home")
def test_a_connected_idle_client_does_not_keep_the_engine_alive(wren_home):
    assert _ask("--keep-alive", "4", "--max-tokens", "2", "hi").returncode == 0
    idle = socket.socket(socket.AF_UNIX)
    idle.connect(str(resident.socket_path(wren_home)))  # says nothing, stays connected
    try:
        pid = _status()["pid"]
        assert _gone(pid, wait=20), "an idle client kept the engine alive past its keep-alive"
    finally:
        idle.close()


def test_unrelated_variables_and_secrets_do_not_make_a_second_engine(tmp_path, monkeypatch):
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    for name in [n for n in os.environ if n.startswith("WREN_") and n != "WREN_HOME"]:
        monkeypatch.delenv(name)
    plain = resident.socket_path(tmp_path)
    monkeypatch.setenv("WREN_API_KEY", "sk-serve-only")  # read by `wren serve` alone
    monkeypatch.setenv("WREN_KEEP_ALIVE", "5")  # sent with each question
    monkeypatch.setenv("WREN_SOMETHING_NEW", "1")
    monkeypatch.setenv("EDITOR", "vi")
    assert resident.socket_path(tmp_path) == plain
    monkeypatch.setenv("WREN_ISA", "scalar")  # other kernels: another engine
    assert resident.socket_path(tmp_path) != plain
    monkeypatch.delenv("WREN_ISA")
    monkeypatch.setenv("WREN_KEY_MYSERVER", "sk-remote")  # a remote model's key: answers differ
    keyed = resident.socket_path(tmp_path)
    assert keyed != plain and "sk-remote" not in str(keyed)


@pytest.fixture
def full_disk_home(wren_home, long_tiny_dir, monkeypatch, tmp_path):  # noqa: F811
    """A data folder on a 48 MB tmpfs of its own (root only), with the tiny model (by reference)."""
    import subprocess

    from wren.engine.modelhub.registry import ModelRegistry

    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(disk)],
                                           capture_output=True).returncode != 0:
        pytest.skip("a full disk is simulated with a small tmpfs, which needs root")
    home = disk / "home"
    home.mkdir()
    monkeypatch.setenv("WREN_HOME", str(home))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    ModelRegistry(home / "models").register_folder(long_tiny_dir, name="tiny")
    try:
        yield home
    finally:
        _wren("resident", "stop")
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def test_a_full_disk_mid_answer_is_said_and_the_answer_finished_once_there_is_room(full_disk_home):
    import sqlite3

    filler = full_disk_home.parent / "filler"

    def fill() -> None:
        with open(filler, "wb", buffering=0) as out, pytest.raises(OSError):
            while True:
                out.write(b"\0" * 2**16)

    code, err, pid = _cut_mid_answer(fill)
    assert code != 0 and "the disk is full" in err, err[-2000:]
    left = [p for p in full_disk_home.rglob("*") if p.name.endswith(".tmp")]
    assert left == [], "a temporary file was left behind"
    filler.unlink()  # room again: the engine saves the answer it could not finish
    database = f"file:{full_disk_home / 'wren.sqlite3'}?mode=ro"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with sqlite3.connect(database, uri=True) as db:
            rows = db.execute("SELECT status, error FROM message WHERE role = 'assistant'").fetchall()
        if all(status != "streaming" for status, _ in rows):
            break
        time.sleep(0.5)
    assert _status()["pid"] == pid  # while the same engine runs
    assert ("streaming", None) not in rows, rows
    assert any(status == "interrupted" and "disk is full" in (error or "") for status, error in rows), rows


@pytest.mark.usefixtures("tiny_home")
def test_removing_a_model_through_the_engine_api_unloads_it_from_the_resident_engine():
    """What the window's Models page does (engine.models.remove)."""
    import asyncio

    from wren.engine.api import Engine

    assert _ask("--max-tokens", "2", "hi").returncode == 0
    pid = _status()["pid"]

    async def remove() -> None:
        engine = Engine.open()
        try:
            await engine.models.remove("tiny")
        finally:
            await engine.close()

    asyncio.run(remove())
    status = _status()
    assert status["pid"] == pid and status["model"] is None


@pytest.mark.usefixtures("tiny_home")
@pytest.mark.parametrize("keep_alive", ["60", "0"])
def test_a_database_locked_for_a_while_is_waited_out_alike_here_and_in_the_resident_engine(wren_home, keep_alive):
    import sqlite3
    import threading

    from tests.engine.cli.test_resident import _env

    env = _env(WREN_KEEP_ALIVE=keep_alive)
    assert _ask("--max-tokens", "2", "hi", env=env).returncode == 0  # warm: a resident engine's model is loaded
    held = threading.Event()

    def lock(seconds: float) -> None:
        db = sqlite3.connect(str(wren_home / "wren.sqlite3"), isolation_level=None)
        db.execute("BEGIN EXCLUSIVE")  # another program writing for a while
        held.set()
        time.sleep(seconds)
        db.execute("COMMIT")
        db.close()

    holder = threading.Thread(target=lock, args=(8.0,))
    holder.start()
    held.wait(10)
    started = time.monotonic()
    done = _ask("--max-tokens", "2", "hi", env=env)
    took = time.monotonic() - started
    holder.join()
    assert done.returncode == 0, done.stderr  # was: "locked by another program" after 3.6 s (resident)
    assert took >= 7.0  # it did wait for the lock


def test_every_variable_wren_reads_is_sorted_into_shaping_or_not():
    """A new WREN_ variable must be placed: in the engine's identity or knowingly out of it."""
    import re

    engine = Path(engine_sockets.__file__).parent
    read = set()
    for path in [*engine.rglob("*.py"), *engine.rglob("*.cpp"), *engine.rglob("*.inc"), *engine.rglob("*.h")]:
        read |= set(re.findall(r"[\"'](WREN_[A-Z0-9_]+)[\"']", path.read_text(encoding="utf-8", errors="replace")))
    known = {*engine_sockets.ENV_NAMES, *engine_sockets.SECRET_NAMES, *engine_sockets.NOT_SHAPING,
             *engine_sockets.SECRET_PREFIXES}
    assert read - known == set()
