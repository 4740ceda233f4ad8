"""A GGUF file that changes while it is imported: cut short, rewritten or deleted by the user
(or a download still running) after the import opened it. Each import runs in a child process,
so a crash by signal (SIGBUS from a mapped file that shrank) fails the test instead of pytest.

Whatever happens, the import ends in one of two ways: a clean refusal that names the file and
leaves nothing listed or on disk, or an install whose model file is the whole original, byte
for byte, and passes the checks."""

from __future__ import annotations

import json
import mmap
import os
import subprocess
import sys
from pathlib import Path

import pytest

from wren.engine.modelhub import gguf_import
from wren.engine.modelhub.gguf_file import GGUFFile
from wren.engine.modelhub.registry import ModelRegistry

# The child imports `source` into the models folder `root`; its progress callback changes the
# source once: at the first report (the file is open, no byte copied yet), or at the first
# report after some bytes were copied (the copy is read in small chunks to make one).
CHILD = r"""
import json, os, sys
from pathlib import Path
from wren.engine.errors import WrenError
from wren.engine.modelhub import gguf_import, private_copy
from wren.engine.modelhub.registry import ModelRegistry

source, root, action, when = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
private_copy.COPY_CHUNK = 4096
changed = []

def change(done, total):
    if changed or (when == "mid-copy" and done == 0):
        return
    changed.append(done)
    if action == "truncate":
        with open(source, "r+b") as fh:
            fh.truncate(total // 2)
    elif action == "overwrite":
        with open(source, "r+b") as fh:
            fh.write(os.urandom(total))
    elif action == "grow":
        with open(source, "ab") as fh:
            fh.write(b"\0" * 8192)
    elif action == "delete":
        source.unlink()

try:
    info = ModelRegistry(root).import_gguf(source, "changed", progress=change)
    print(json.dumps({"installed": info.name, "changed_at": changed}))
except WrenError as exc:
    print(json.dumps({"refused": str(exc), "changed_at": changed}))
"""

ACTIONS = ("truncate", "overwrite", "grow", "delete")


def _import_while_changing(source: Path, root: Path, action: str, when: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, str(source), str(root), action, when],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"the import died (status {proc.returncode}):\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if not p.name.endswith(".lock")) if root.exists() else []


@pytest.mark.parametrize("when", ["at-open", "mid-copy"])
@pytest.mark.parametrize("action", ACTIONS)
def test_a_source_changed_during_the_import_is_refused_or_installed_whole(tiny_gguf, tmp_path, action, when):
    source, _ = tiny_gguf()
    original = source.read_bytes()
    root = tmp_path / "models"
    outcome = _import_while_changing(source, root, action, when)
    assert outcome["changed_at"], "the source was never changed: the test did not test anything"
    if "refused" in outcome:
        message = outcome["refused"]
        assert str(source) in message and "changed while it was being imported" in message, message
        assert "nothing was installed" in message
        assert ModelRegistry(root).list() == []
        assert _leftovers(root) == []  # no .partial folder, no stray copy
        assert action != "delete", "a deleted file that was already open can still be copied whole"
    else:
        # a deleted file was already open: its whole content is still readable, and installed
        assert action == "delete", f"the source changed ({action}) mid-import, yet it was installed: {outcome}"
        registry = ModelRegistry(root)
        installed = root / "changed" / gguf_import.GGUF_FILE
        assert installed.read_bytes() == original
        assert registry.verify_weights("changed").ok
        with GGUFFile(installed) as gguf:  # the installed copy passes the checks
            assert gguf.metadata["general.architecture"] == "llama"


def test_the_copy_is_private_and_the_source_is_never_mapped(tiny_gguf, tmp_path, monkeypatch):
    """A mapped file that shrinks under the reader raises SIGBUS: only the private copy may be
    mapped. The copy is mode 0600 from its first byte."""
    source, _ = tiny_gguf()
    source_id = (source.stat().st_dev, source.stat().st_ino)
    mapped: list[tuple[int, int]] = []
    real_mmap = mmap.mmap

    def spy(fileno, *args, **kwargs):
        st = os.fstat(fileno)
        mapped.append((st.st_dev, st.st_ino))
        return real_mmap(fileno, *args, **kwargs)

    monkeypatch.setattr(mmap, "mmap", spy)
    modes = []

    def progress(done, total):
        for copy in (tmp_path / "models").glob(".partial-*/model.gguf"):
            modes.append(copy.stat().st_mode & 0o777)

    ModelRegistry(tmp_path / "models").import_gguf(source, "private", progress=progress)
    monkeypatch.undo()
    assert mapped, "nothing was mapped: the spy saw no parse"
    assert source_id not in mapped
    assert modes and set(modes) == {0o600}
    assert (tmp_path / "models" / "private" / gguf_import.GGUF_FILE).stat().st_mode & 0o777 == 0o600


def test_a_refused_copy_names_the_users_file_not_the_copy(tiny_gguf, tmp_path):
    source, _ = tiny_gguf(meta={"llama.attention.head_count": 0})
    with pytest.raises(Exception, match="head_count") as caught:
        ModelRegistry(tmp_path / "models").import_gguf(source, "bad")
    assert str(source) in str(caught.value) and ".partial-" not in str(caught.value)
    assert _leftovers(tmp_path / "models") == []
    assert source.exists()


def test_a_refused_download_is_given_back(tiny_gguf, tmp_path):
    """With move (a finished download), a file refused after it was moved in is put back."""
    source, _ = tiny_gguf(meta={"llama.attention.head_count": 0})
    before = source.read_bytes()
    with pytest.raises(Exception, match="head_count"):
        ModelRegistry(tmp_path / "models").import_gguf(source, "bad", move=True)
    assert source.read_bytes() == before
    assert _leftovers(tmp_path / "models") == []
