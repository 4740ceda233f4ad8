"""The adversarial run against the CLI, kept: bad inputs and a hostile machine around
`wren` (ids beyond 64 bits, a read-only data folder, a database of mode 000, a locked or
unreachable Secret Service, a damaged database), each through the real program in a child
process. Handled cleanly means: the status the case expects (2 for a refusal, 0 where the
command can still do its job), a message from Wren naming what was wrong, no traceback and
no crash report."""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.engine.cli.hostile_homes import (
    as_other_user,
    crash_reports,
    damage_header,
    damage_table,
    give_to_other_user,
    make_home,
    mount_read_only,
    shared_dir,
    unmount,
    wren,
)

HUGE = "123456789012345678901234"  # 24 digits: beyond SQLite's 64-bit integers
LOCKED = "tests.engine.cli.locked_keyring.Locked"
BROKEN = "tests.engine.cli.locked_keyring.Broken"


@dataclass(frozen=True)
class Case:
    name: str
    args: tuple[str, ...]
    home: str  # sound, damaged, not-a-database, read-only, mode-000
    expect: str  # a regular expression the message must match (stdout and stderr)
    status: int = 2
    scripted: bool = False  # answered by the scripted backend over the tiny model
    env: dict[str, str] = field(default_factory=dict)


CASES = [
    Case("show-huge-id", ("conversations", "show", HUGE), "sound", r"not a valid id"),
    Case("export-huge-id", ("conversations", "export", HUGE), "sound", r"not a valid id"),
    Case("show-huge-negative-id", ("conversations", "show", "-" + HUGE), "sound", r"not a valid id"),
    Case("context-huge-id", ("context", HUGE), "sound", r"not a valid conversation id"),
    Case("memories-edit-huge-id", ("memories", "edit", HUGE, "a new text"), "sound", r"not a valid id"),
    Case("memories-forget-huge-id", ("memories", "forget", HUGE), "sound", r"not a valid id"),
    Case("continue-huge-id", ("continue", HUGE), "sound", r"not a valid message id"),
    Case("read-only-list", ("conversations",), "read-only", r"read-only file system"),
    Case("read-only-ask", ("ask", "hello"), "read-only", r"read-only file system"),
    Case("read-only-erase", ("data", "erase", "--yes"), "read-only", r"read-only file system"),
    Case("read-only-memories", ("memories", "list"), "read-only", r"read-only file system"),
    Case("mode-000-list", ("conversations",), "mode-000", r"permission denied on .*wren\.sqlite3"),
    Case("mode-000-ask", ("ask", "hello"), "mode-000", r"permission denied on .*wren\.sqlite3"),
    Case("mode-000-erase", ("data", "erase", "--yes"), "mode-000", r"permission denied on .*wren\.sqlite3"),
    Case("keyring-locked-show-key", ("serve", "--show-key"), "sound", r"keyring is locked",
         env={"PYTHON_KEYRING_BACKEND": LOCKED}),
    Case("keyring-locked-new-key", ("serve", "--new-key"), "sound", r"keyring is locked",
         env={"PYTHON_KEYRING_BACKEND": LOCKED}),
    Case("keyring-broken-show-key", ("serve", "--show-key"), "sound", r"keyring could not be opened",
         env={"PYTHON_KEYRING_BACKEND": BROKEN}),
    Case("damaged-list", ("conversations",), "damaged", r"wren\.sqlite3 is damaged", status=0),
    Case("damaged-ask", ("ask", "--keep-alive", "0", "hello"), "damaged", r"is damaged, so Wren wrote nothing",
         scripted=True),
    Case("damaged-erase", ("data", "erase", "--yes"), "damaged", r"database was damaged", status=0),
    Case("not-a-database-list", ("conversations",), "not-a-database", r"is damaged.*cannot read it"),
    Case("not-a-database-erase", ("data", "erase", "--yes"), "not-a-database", r"database was damaged",
         status=0),
]


@pytest.fixture(scope="module")
def template(tmp_path_factory, tiny_model_dir) -> Path:
    """One real data folder of six chats (the tiny model chosen), copied for each case."""
    return make_home(tmp_path_factory.mktemp("bad-inputs") / "home", tiny_model_dir)


@pytest.fixture
def home_for(template, tmp_path):
    made: list[Path] = []
    mounts: list[Path] = []

    def build(kind: str) -> tuple[Path, list[str]]:
        """(the data folder, the command prefix that runs wren there)."""
        if kind in ("read-only", "mode-000"):
            base = shared_dir()  # another user must be able to reach it
            made.append(base)
        else:
            base = tmp_path
        home = base / "home"
        shutil.copytree(template, home, symlinks=True)
        if kind == "damaged":
            damage_table(home / "wren.sqlite3")
        elif kind == "not-a-database":
            damage_header(home / "wren.sqlite3")
        elif kind == "read-only":
            where = base / "mounted"
            if not mount_read_only(home, where):
                pytest.skip("a read-only file system needs root and mount(8) here")
            mounts.append(where)
            return where, []
        elif kind == "mode-000":
            prefix = as_other_user()
            if prefix is None:
                pytest.skip("running as root without setpriv: permission bits cannot be tested")
            (home / "wren.sqlite3").chmod(0)
            give_to_other_user(base)
            return home, prefix
        return home, []

    yield build
    for where in mounts:
        unmount(where)
    for base in made:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_handled_cleanly(case: Case, home_for):
    home, prefix = home_for(case.home)
    before = crash_reports(home)
    done = wren(home, *case.args, prefix=prefix, scripted=case.scripted, **case.env)
    said = done.stdout + done.stderr
    assert "Traceback" not in said, said
    assert "unexpected error" not in said, said
    assert re.search(case.expect, said, re.DOTALL), said
    assert done.returncode == case.status, said
    assert crash_reports(home) == before
