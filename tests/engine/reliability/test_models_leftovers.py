"""Start-up removes what killed imports left in models/ (and says how much disk it freed),
never a folder a live process is still writing; weight files are checked against the
checksums recorded at import."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from wren.engine.modelhub.gguf_import import staging_dir
from wren.engine.modelhub.registry import RECORD_FILE, ModelRegistry

REPO = Path(__file__).resolve().parents[3]


def _kit():
    spec = importlib.util.spec_from_file_location("wren_modelhub_kit", REPO / "tests/engine/modelhub/conftest.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_leftovers_are_removed_and_the_disk_they_held_reported(tmp_path):
    root = tmp_path / "models"
    root.mkdir()
    for name, size in ((".partial-starter-0a1b2c3d", 300_000), (".removing-old-00ff00ff", 5_000),
                       (".download-x-12345678", 1_000)):
        (root / name).mkdir()
        (root / name / "model.gguf").write_bytes(b"\0" * size)
    (root / ".partial-gone-99999999.lock").write_text("")  # its folder is gone
    (root / ".downloads").mkdir()  # resumable pulls are not leftovers
    report = ModelRegistry(root).sweep_leftovers()
    assert sorted(report.removed) == [".download-x-12345678", ".partial-starter-0a1b2c3d", ".removing-old-00ff00ff"]
    assert report.bytes_freed == 306_000
    assert sorted(p.name for p in root.iterdir()) == [".downloads"]


def test_a_folder_being_written_is_never_removed(tmp_path):
    root = tmp_path / "models"
    registry = ModelRegistry(root)
    with staging_dir(root / "busy") as tmp:
        (tmp / "model.gguf").write_bytes(b"x" * 1000)
        assert registry.sweep_leftovers().removed == ()
        assert tmp.is_dir()
    assert (root / "busy" / "model.gguf").is_file()
    assert [p.name for p in root.iterdir()] == ["busy"]  # its lock file went with it


@pytest.mark.slow
def test_a_killed_writers_partial_folder_goes_and_a_live_ones_stays(tmp_path):
    root = tmp_path / "models"
    root.mkdir()
    writer = textwrap.dedent("""
        import sys, time
        from pathlib import Path
        from wren.engine.modelhub.gguf_import import staging_dir
        with staging_dir(Path(sys.argv[1]) / sys.argv[2]) as tmp:
            (tmp / "model.gguf").write_bytes(b"w" * 50_000)
            print(tmp, flush=True)
            time.sleep(120)
    """)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    procs = [subprocess.Popen([sys.executable, "-c", writer, str(root), name], env=env, cwd=REPO,
                              stdout=subprocess.PIPE, text=True) for name in ("killed", "alive")]
    try:
        folders = [Path(p.stdout.readline().strip()) for p in procs]
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(30)
        report = ModelRegistry(root).sweep_leftovers()
        assert report.removed == (folders[0].name,)
        assert report.bytes_freed == 50_000
        assert not folders[0].exists() and folders[1].is_dir()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_import_records_a_checksum_and_damage_is_found(tmp_path):
    kit = _kit()
    spec = kit.TinySpec()
    source = kit.write_gguf(tmp_path / "tiny.gguf", spec, kit.hf_weights(spec))
    registry = ModelRegistry(tmp_path / "models")
    info = registry.import_gguf(source, "tiny")
    import json

    record = json.loads((info.path / RECORD_FILE).read_text("utf-8"))
    assert record["checksums"]["model.gguf"]["size"] == source.stat().st_size
    assert registry.verify_weights("tiny").ok is True
    gguf = info.path / "model.gguf"
    with open(gguf, "r+b") as fh:  # random bytes into the middle, size unchanged
        fh.seek(gguf.stat().st_size // 2)
        fh.write(os.urandom(64))
    check = registry.verify_weights("tiny")
    assert check.ok is False
    assert str(gguf) in check.message and "Re-import" in check.message
    assert check.damaged == (str(gguf),)
    cancel = threading.Event()
    cancel.set()
    assert registry.verify_weights("tiny", cancel).ok is None
