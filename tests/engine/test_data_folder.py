"""The data folder's permissions: Wren never changes those of a folder it did not make, and
refuses one that other users can write to, saying which folder and what to do.

Real folders with real modes; the `wren` runs are real processes (`wren scan hello` is the
cheapest command that opens the data folder: it writes its log there)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from wren.engine import paths
from wren.engine.paths import DataFolderError

REPO = Path(__file__).resolve().parents[2]
POSIX_ONLY = pytest.mark.skipif(os.name == "nt", reason="POSIX folder modes")
AS_ROOT = pytest.mark.skipif(os.name == "nt" or os.geteuid() != 0, reason="changing a folder's owner needs root")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _folder(parent: Path, mode: int, name: str = "data") -> Path:
    folder = parent / name
    folder.mkdir()
    os.chmod(folder, mode)
    assert _mode(folder) == mode
    return folder


def _wren(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, WREN_HOME=str(home),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, "-m", "wren.engine.terminal", *args], cwd=REPO, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)


# -- in the process ---------------------------------------------------------------------------

@POSIX_ONLY
@pytest.mark.parametrize("mode", [0o1777, 0o777, 0o773], ids=oct)
def test_a_folder_every_user_can_write_is_refused_and_left_as_it_is(tmp_path, monkeypatch, mode):
    home = _folder(tmp_path, mode)
    monkeypatch.setenv("WREN_HOME", str(home))
    with pytest.raises(DataFolderError) as refused:
        paths.logs_dir()
    said = str(refused.value)
    assert str(home) in said and f"mode {mode:04o}" in said and "every user" in said
    assert "WREN_HOME" in said  # what to do
    if mode & stat.S_ISVTX:  # shared like /tmp: a subfolder of one's own is the way
        assert f"WREN_HOME={home / 'wren'}" in said
    else:
        assert f"chmod go-w {home}" in said
    assert _mode(home) == mode and list(home.iterdir()) == []  # nothing changed, nothing written


@POSIX_ONLY
def test_the_suggested_subfolder_of_a_shared_folder_is_made_private(tmp_path, monkeypatch):
    shared = _folder(tmp_path, 0o1777)
    monkeypatch.setenv("WREN_HOME", str(shared / "wren"))
    home = paths.data_dir()
    assert home == shared / "wren" and _mode(home) == 0o700
    assert _mode(shared) == 0o1777


@POSIX_ONLY
def test_an_existing_folder_only_its_owner_writes_keeps_its_mode(tmp_path, monkeypatch):
    home = _folder(tmp_path, 0o755)
    monkeypatch.setenv("WREN_HOME", str(home))
    assert paths.data_dir() == home
    logs, models = paths.logs_dir(), paths.models_dir()
    assert _mode(home) == 0o755  # the user's choice, not Wren's
    assert _mode(logs) == 0o700 and _mode(models) == 0o700  # Wren's own folders in it


@POSIX_ONLY
def test_a_missing_folder_and_its_missing_parents_are_made_private_whatever_the_umask(tmp_path, monkeypatch):
    home = tmp_path / "new" / "deeper" / "wren"
    monkeypatch.setenv("WREN_HOME", str(home))
    old = os.umask(0o002)  # a umask that leaves folders group-writable
    try:
        assert paths.data_dir() == home
    finally:
        os.umask(old)
    assert [_mode(p) for p in (tmp_path / "new", tmp_path / "new" / "deeper", home)] == [0o700] * 3


@POSIX_ONLY
def test_wrens_own_subfolder_is_closed_again_but_a_symlinked_one_is_left_alone(tmp_path, monkeypatch):
    home = _folder(tmp_path, 0o700)
    monkeypatch.setenv("WREN_HOME", str(home))
    logs = _folder(home, 0o755, "logs")  # as an older Wren or a copy left it
    elsewhere = _folder(tmp_path, 0o755, "big-disk")
    (home / "models").symlink_to(elsewhere, target_is_directory=True)  # the user's own arrangement
    assert paths.logs_dir() == logs and _mode(logs) == 0o700
    assert paths.models_dir() == home / "models" and _mode(elsewhere) == 0o755


@POSIX_ONLY
def test_a_data_folder_path_that_is_a_file_is_refused(tmp_path, monkeypatch):
    file = tmp_path / "data"
    file.write_text("mine")
    monkeypatch.setenv("WREN_HOME", str(file))
    with pytest.raises(DataFolderError, match="is not a folder"):
        paths.data_dir()
    assert file.read_text() == "mine"


@AS_ROOT
def test_a_folder_a_group_of_others_can_write_is_refused(tmp_path, monkeypatch):
    home = _folder(tmp_path, 0o2775)
    os.chown(home, os.getuid(), 54321)  # a group with no name: nobody can tell who is in it
    os.chmod(home, 0o2775)
    monkeypatch.setenv("WREN_HOME", str(home))
    with pytest.raises(DataFolderError, match="can be written by the group with id 54321"):
        paths.data_dir()
    assert _mode(home) == 0o2775


@POSIX_ONLY
def test_a_folder_its_owners_private_group_can_write_is_used_as_it_is(tmp_path, monkeypatch):
    import grp
    import pwd

    me = pwd.getpwuid(os.getuid())
    members = set(grp.getgrgid(me.pw_gid).gr_mem) | {u.pw_name for u in pwd.getpwall() if u.pw_gid == me.pw_gid}
    if members != {me.pw_name}:
        pytest.skip("this user's group has other members")
    home = _folder(tmp_path, 0o775)  # umask 002, usual where each user has a group of their own
    os.chown(home, -1, me.pw_gid)
    monkeypatch.setenv("WREN_HOME", str(home))
    assert paths.data_dir() == home and _mode(home) == 0o775


@POSIX_ONLY
def test_a_symlinked_socket_folder_is_refused_and_its_target_left_alone(tmp_path, monkeypatch):
    import shutil
    import tempfile

    from wren.engine import engine_sockets

    runtime = Path(tempfile.mkdtemp(prefix="wren-rt-"))  # short: socket paths have a length limit
    try:
        target = _folder(tmp_path, 0o755, "someone-elses-pick")
        (runtime / "wren").symlink_to(target, target_is_directory=True)  # as planted in /tmp/wren-UID
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
        folder = engine_sockets.socket_path(tmp_path).parent
        assert folder == runtime / "wren"
        with pytest.raises(DataFolderError, match="not private to this user"):
            engine_sockets.private_folder(folder)
        assert _mode(target) == 0o755
    finally:
        shutil.rmtree(runtime)


@AS_ROOT
def test_a_folder_of_another_user_is_refused(tmp_path, monkeypatch):
    home = _folder(tmp_path, 0o755)
    os.chown(home, 65534, 65534)
    monkeypatch.setenv("WREN_HOME", str(home))
    with pytest.raises(DataFolderError, match="belongs to the user"):
        paths.data_dir()
    assert _mode(home) == 0o755 and home.stat().st_uid == 65534


# -- real `wren` processes ---------------------------------------------------------------------

@POSIX_ONLY
@pytest.mark.slow
@pytest.mark.parametrize("mode", [0o1777, 0o777], ids=oct)
def test_wren_scan_refuses_a_world_writable_folder_with_status_2_and_changes_nothing(tmp_path, mode):
    home = _folder(tmp_path, mode)
    done = _wren(home, "scan", "hello")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"wren: the data folder {home} can be written by every user")
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert _mode(home) == mode and list(home.iterdir()) == []  # no log, no crash report


@POSIX_ONLY
@pytest.mark.slow
def test_wren_scan_keeps_an_existing_private_enough_folder_as_it_is(tmp_path):
    home = _folder(tmp_path, 0o755)
    done = _wren(home, "scan", "hello")
    assert done.returncode == 0, done.stderr
    assert _mode(home) == 0o755
    made = [p for p in home.iterdir() if p.is_dir()]
    assert made and all(_mode(p) == 0o700 for p in made)  # its logs folder, and any other it made


@POSIX_ONLY
@pytest.mark.slow
def test_wren_scan_makes_a_missing_folder_private(tmp_path):
    home = tmp_path / "missing" / "wren"
    done = _wren(home, "scan", "hello")
    assert done.returncode == 0, done.stderr
    assert _mode(home.parent) == 0o700 and _mode(home) == 0o700


@POSIX_ONLY
@pytest.mark.slow
def test_wren_serve_refuses_a_world_writable_folder_cleanly(tmp_path):
    home = _folder(tmp_path, 0o1777)
    done = _wren(home, "serve", "--port", "0")
    assert done.returncode == 2, done.stderr
    assert f"the data folder {home} can be written by every user" in done.stderr
    assert "Traceback" not in done.stderr
    assert _mode(home) == 0o1777 and list(home.iterdir()) == []


# -- what Wren writes inside a data folder others may read (0755 is left as it is) -------------

@POSIX_ONLY
def test_an_answer_journaled_past_a_lock_is_private_in_an_open_data_folder(tmp_path):
    import sqlite3
    import threading

    from wren.engine.records import MessageStatus, Role
    from wren.engine.store import Store

    home = _folder(tmp_path, 0o755)
    store = Store(home / "wren.sqlite3", busy_timeout_ms=100, lock_retry_seconds=5)
    conv = store.create_conversation()
    question = store.add_message(conv.id, Role.USER, "question", parent_id=None)
    answer = store.add_message(conv.id, Role.ASSISTANT, "", parent_id=question.id, status=MessageStatus.STREAMING)
    held, release = threading.Event(), threading.Event()

    def other_program() -> None:
        con = sqlite3.connect(home / "wren.sqlite3", timeout=5, isolation_level=None)
        con.execute("BEGIN EXCLUSIVE")
        held.set()
        release.wait(10)
        con.execute("COMMIT")
        con.close()

    thread = threading.Thread(target=other_program, daemon=True)
    thread.start()
    assert held.wait(5)
    try:
        store.update_message(answer.id, content="my private answer")  # locked: journaled beside the database
        journal = home / ".wren.sqlite3-journal"
        written = list(journal.glob("*.json"))
        assert written and "my private answer" in written[0].read_text("utf-8")
        assert _mode(journal) == 0o700 and [_mode(p) for p in written] == [0o600]
    finally:
        release.set()
        thread.join(10)
        store.close()


@POSIX_ONLY
def test_the_users_block_list_is_private_in_an_open_data_folder(tmp_path):
    from wren.engine.safety import user_policy

    home = _folder(tmp_path, 0o755)
    user_policy.set_blocklist(home, ["project-nightjar"], [])
    path = user_policy.policy_path(home)
    assert "project-nightjar" in path.read_text("utf-8")
    assert _mode(path.parent) == 0o700 and _mode(path) == 0o600 and _mode(home) == 0o755
