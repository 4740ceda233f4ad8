"""The folders Wren makes under its data folder are 0700 whatever the umask (engine/paths.py):
the database's owners folder, the models folder and each model's folder (a GGUF file
imported, a folder registered), the compiled-graphs cache. The data folder a user named
keeps the mode it has. Real files, under a umask of 022 (the usual one, which left them 0755)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.fixtures.tiny import make_tiny_model_dir
from wren.engine.modelhub import ModelRegistry


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_opening_a_store_makes_its_folders_private(umask_022, wren_home, tmp_path):
    from wren.engine.store.store import Store

    os.chmod(wren_home, 0o755)  # the data folder, as the user made it
    Store(wren_home / "wren.sqlite3").close()
    assert mode(wren_home / ".wren.sqlite3-owners") == 0o700
    assert mode(wren_home) == 0o755  # the user's folder: left as it is

    nested = tmp_path / "new-home" / "deeper"
    Store(nested / "wren.sqlite3").close()  # missing folders: made, each private
    assert [mode(p) for p in (nested.parent, nested, nested / ".wren.sqlite3-owners")] == [0o700] * 3


def test_an_owners_folder_an_older_wren_left_open_is_closed(umask_022, wren_home):
    from wren.engine.store.store import Store

    (wren_home / ".wren.sqlite3-owners").mkdir(mode=0o755)
    Store(wren_home / "wren.sqlite3").close()
    assert mode(wren_home / ".wren.sqlite3-owners") == 0o700


def test_imported_models_get_private_folders(umask_022, wren_home, tiny_gguf, tmp_path):
    registry = ModelRegistry()  # <data folder>/models
    gguf = registry.import_gguf(tiny_gguf()[0], name="from-gguf")
    folder = registry.register_folder(make_tiny_model_dir(tmp_path / "hf"), name="from-folder")
    assert [mode(p) for p in (registry.root, gguf.path, registry.root / folder.name)] == [0o700] * 3
    assert mode(folder.path) == 0o755  # the registered folder is the user's own: left as it is

    explicit = ModelRegistry(tmp_path / "elsewhere" / "models")
    assert mode(explicit.root) == mode(explicit.root.parent) == 0o700


def test_the_compiled_graphs_cache_is_private(umask_022, wren_home, tmp_path):
    torch_backend = pytest.importorskip("wren.engine.inference.backends.torch")
    # a context this short never runs compiled, so asking to compile only makes the folder
    torch_backend.TorchBackend("cpu").load(make_tiny_model_dir(tmp_path / "tiny"), compile=True, context_length=2)
    cache = wren_home / "cache"
    assert [mode(p) for p in (cache, cache / "torch-inductor")] == [0o700, 0o700]


def test_tool_settings_logs_and_locks_get_private_folders(umask_022, tmp_path):
    from wren.engine.store.locks import HeldLock
    from wren.engine.tools import mcp_config
    from wren.engine.tools.mcp import LogRing

    config = tmp_path / "a" / "mcp.json"  # the MCP servers' settings (their env may hold keys)
    mcp_config.save({"files": mcp_config.McpServerConfig(name="files", command="true")}, config)
    log = LogRing(path=tmp_path / "b" / "logs" / "files.log")  # what a server wrote on stderr
    log.add("stderr", "started")
    HeldLock(tmp_path / "c" / "locks" / "model.lock").release()
    made = [tmp_path / "a", tmp_path / "b", tmp_path / "b" / "logs", tmp_path / "c", tmp_path / "c" / "locks"]
    assert [mode(p) for p in made] == [0o700] * len(made)
