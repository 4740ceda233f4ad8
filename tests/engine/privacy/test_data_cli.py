"""`wren data export PATH` and `wren data erase --yes [--models]`."""

from __future__ import annotations

import json
import stat
import zipfile

from wren.engine import paths
from wren.engine.memory.service import MemoryService
from wren.engine.records import Role
from wren.engine.store import Store
from wren.engine.terminal.main import main

SECRET = "Pumblechook"


def _fill() -> int:
    store = Store(paths.database_path())
    conv = store.create_conversation(f"{SECRET} notes")
    q = store.add_message(conv.id, Role.USER, f"Who is {SECRET}?", parent_id=None)
    store.add_message(conv.id, Role.ASSISTANT, "A character.", parent_id=q.id)
    MemoryService(store).add(f"{SECRET} is my cat")
    store.close()
    return conv.id


def test_wren_data_export_writes_the_zip(tmp_path, capsys):
    _fill()
    target = tmp_path / "backup.zip"
    assert main(["data", "export", str(target)]) == 0
    assert capsys.readouterr().out.strip() == str(target)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    with zipfile.ZipFile(target) as zf:
        assert any(n.endswith(".md") for n in zf.namelist())
        assert json.loads(zf.read("memories.json"))[0]["text"] == f"{SECRET} is my cat"


def test_wren_data_erase_needs_yes_then_erases(capsys):
    _fill()
    assert main(["data", "erase"]) == 2
    assert "--yes" in capsys.readouterr().err
    assert SECRET.encode() in paths.database_path().read_bytes() + _wal()
    assert main(["data", "erase", "--yes", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["rows"]["conversation"] == 1 and report["rows"]["memory"] == 1 and report["models_kept"]
    assert SECRET.encode() not in paths.database_path().read_bytes() + _wal()


def _wal() -> bytes:
    wal = paths.database_path().with_name("wren.sqlite3-wal")
    return wal.read_bytes() if wal.exists() else b""
