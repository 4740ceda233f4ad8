"""Pulling models from a fake Hugging Face hub on 127.0.0.1: choice of file, checks made
before the download, resuming, cancelling, checksums."""

from __future__ import annotations

import hashlib
import re
import threading

import pytest
from gguf import GGMLQuantizationType as Q

from tests.fakehub import FakeHub, use_fake_hub
from wren.engine.errors import (
    Cancelled,
    InvalidRequest,
    ModelFileError,
    ModelNotFound,
    UnsupportedArchitecture,
    UnsupportedQuantization,
    WrenError,
)
from wren.engine.modelhub import ModelRegistry, pull

REPO = "acme/tiny-GGUF"
FILE = "tiny-llama.Q8_0.gguf"


@pytest.fixture
def hub(monkeypatch, tmp_path):
    with FakeHub() as server:
        use_fake_hub(server, monkeypatch, tmp_path / "hf-home")
        # a small first Range request, so the header check is visibly a fraction of the file
        monkeypatch.setattr(pull, "HEADER_PROBE_BYTES", 4096)
        yield server


@pytest.fixture
def registry(tmp_path) -> ModelRegistry:
    return ModelRegistry(tmp_path / "models")


@pytest.fixture
def gguf_bytes(kit, tmp_path):
    """A tiny llama GGUF of about 1.3 MB (Q8_0 weights) whose header is a few KB."""
    def make(arch: str = "llama", qtype: Q = Q.Q8_0, **options) -> bytes:
        spec = kit.TinySpec(arch=arch, hidden=256, heads=4, kv_heads=2, ffn=512, layers=2)
        path = kit.write_gguf(tmp_path / f"{arch}-{qtype.name}.gguf", spec, kit.hf_weights(spec), qtype, **options)
        return path.read_bytes()

    return make


def publish(hub: FakeHub, data: bytes, filename: str = FILE, repo: str = REPO) -> None:
    hub.add_file(repo, filename, data)
    hub.add_file(repo, "README.md", b"# tiny\n", lfs=False)


def resume_starts(hub: FakeHub, filename: str = FILE) -> list[int]:
    """The start offsets of the open-ended Range requests (resumes) made for a file."""
    starts = []
    for r in hub.downloads(filename):
        match = re.fullmatch(r"bytes=(\d+)-", r.range or "")
        if match:
            starts.append(int(match.group(1)))
    return starts


def test_pull_installs_a_gguf_end_to_end(hub, registry, gguf_bytes):
    data = gguf_bytes()
    publish(hub, data)
    plan = pull.resolve(REPO, quant="Q8_0")
    assert (plan.repo, plan.filename, plan.size) == (REPO, FILE, len(data))
    assert plan.sha256 == hashlib.sha256(data).hexdigest()
    assert plan.revision == hub.commit(REPO) and plan.quantization == "Q8_0"
    seen: list[tuple[int, int]] = []
    info = pull.pull(registry, plan, progress=lambda done, total: seen.append((done, total)))
    assert info.name == "tiny-llama.q8_0"
    assert (info.path / "model.gguf").read_bytes() == data
    assert info.architecture == "llama" and info.quantization == "Q8_0"
    assert [m.name for m in registry.list()] == [info.name]
    assert seen[-1] == (len(data), len(data))
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert hub.bytes_served(FILE) == len(data)  # the header's bytes were the download's first, not fetched twice
    assert not any(pull.downloads_folder(registry).iterdir())


def test_a_dropped_connection_is_resumed_with_a_range_request(hub, registry, gguf_bytes):
    data = gguf_bytes()
    publish(hub, data)
    plan = pull.resolve(REPO, quant="Q8_0")
    hub.cut_after(REPO, FILE, len(data) // 2)  # the download proper, not the 4 KB header check
    info = pull.pull(registry, plan)
    assert (info.path / "model.gguf").read_bytes() == data
    starts = resume_starts(hub)
    # after the header check's bytes: the download, then its retry for only what was missing
    assert len(starts) == 2 and 4096 <= starts[0] < len(data) // 10
    assert starts[0] < starts[1] <= starts[0] + len(data) // 2
    assert hub.bytes_served(FILE) < 2 * len(data)


def test_a_cancelled_pull_leaves_a_partial_file_the_next_pull_resumes(hub, registry, gguf_bytes):
    data = gguf_bytes()
    publish(hub, data)
    plan = pull.resolve(REPO, quant="Q8_0")
    cancel = threading.Event()

    def stop_halfway(done: int, total: int) -> None:
        if done >= total // 2:
            cancel.set()

    with pytest.raises(Cancelled, match="resumes"):
        pull.pull(registry, plan, progress=stop_halfway, cancel=cancel)
    assert registry.list() == []
    (partial,) = pull.downloads_folder(registry).glob("*/*.part")
    kept = partial.stat().st_size
    assert len(data) // 2 - 2 * (16 << 10) <= kept < len(data)  # the chunk being written when stopped is dropped

    info = pull.pull(registry, plan)
    assert (info.path / "model.gguf").read_bytes() == data
    assert resume_starts(hub)[-1] == kept  # picked up where the partial file ends
    # the resume fetched just the rest (the cancelled response may still be counting the
    # bytes it pushed into the closed connection, so it is not part of this sum)
    (resume,) = [r for r in hub.downloads(FILE) if r.range == f"bytes={kept}-"]
    assert resume.body_bytes == len(data) - kept


def test_a_corrupt_download_is_rejected_and_nothing_is_installed(hub, registry, gguf_bytes):
    publish(hub, gguf_bytes())
    hub.corrupt(REPO, FILE)
    plan = pull.resolve(REPO, quant="Q8_0")
    with pytest.raises(ModelFileError, match="checksum mismatch .* the download is corrupt; run the pull again"):
        pull.pull(registry, plan)
    assert registry.list() == []
    assert not list(pull.downloads_folder(registry).glob("*/*.gguf*"))  # the bad bytes are gone


@pytest.mark.parametrize(("arch", "qtype", "error"), [
    ("gpt2", Q.Q8_0, UnsupportedArchitecture),
    ("llama", Q.IQ4_NL, UnsupportedQuantization),
])
def test_an_unrunnable_gguf_is_refused_before_the_download(hub, registry, gguf_bytes, arch, qtype, error):
    data = gguf_bytes(arch=arch, qtype=qtype)
    publish(hub, data)
    plan = pull.resolve(REPO + ":" + FILE)
    with pytest.raises(error, match=re.escape(f"{REPO}:{FILE}")):
        pull.pull(registry, plan)
    assert hub.bytes_served(FILE) < len(data) // 10
    assert registry.list() == []
    assert not any(pull.downloads_folder(registry).iterdir())


def test_not_enough_disk_space_is_refused_before_the_download(hub, registry, gguf_bytes, monkeypatch):
    data = gguf_bytes()
    publish(hub, data)
    plan = pull.resolve(REPO, quant="Q8_0")
    usage = pull.shutil.disk_usage(registry.root)
    monkeypatch.setattr(pull.shutil, "disk_usage", lambda path: usage._replace(free=len(data)))
    with pytest.raises(InvalidRequest, match=r"needs [\d.]+ [KM]B free .* and [\d.]+ [KM]B are free"):
        pull.pull(registry, plan)
    assert hub.downloads(FILE) == []


def test_a_hub_that_ignores_ranges_is_refused_without_a_mangled_partial(hub, registry, gguf_bytes):
    data = gguf_bytes()
    publish(hub, data)
    hub.ignore_ranges = True
    plan = pull.resolve(REPO, quant="Q8_0")
    with pytest.raises(WrenError, match="ignored a byte-range request"):
        pull.pull(registry, plan)
    assert all(p.stat().st_size == 0 for p in pull.downloads_folder(registry).glob("*/*.part"))
    assert registry.list() == []


def test_quantization_choice_and_a_clear_error_when_it_is_missing(hub):
    for name in ("Tiny-Q4_K_M.gguf", "Tiny-Q8_0.gguf", "Tiny-IQ4_XS.gguf", "mmproj-Tiny-F16.gguf",
                 "Tiny-F16-00001-of-00002.gguf", "Tiny-F16-00002-of-00002.gguf"):
        hub.add_file(REPO, name, b"GGUF" + bytes(60))
    assert pull.resolve(REPO).filename == "Tiny-Q4_K_M.gguf"  # the default
    assert pull.resolve(REPO, quant="q8_0").filename == "Tiny-Q8_0.gguf"
    assert pull.resolve(REPO, quant="IQ4_XS").filename == "Tiny-IQ4_XS.gguf"
    assert pull.resolve(f"{REPO}:Tiny-Q8_0.gguf", quant="Q4_K_M").filename == "Tiny-Q8_0.gguf"  # FILE wins
    with pytest.raises(InvalidRequest, match=r"has no Q5_K_M GGUF; its quantizations: F16, IQ4_XS, Q4_K_M, Q8_0"):
        pull.resolve(REPO, quant="Q5_K_M")
    with pytest.raises(InvalidRequest, match=r"split into 2 files"):
        pull.resolve(REPO, quant="F16")
    with pytest.raises(InvalidRequest, match=r"has no file 'nope.gguf' \(its GGUF files: .*Tiny-Q8_0.gguf"):
        pull.resolve(f"{REPO}:nope.gguf")
    with pytest.raises(InvalidRequest, match="several GGUF files"):
        pull.resolve(REPO, quant=None)
    with pytest.raises(ModelNotFound, match="no model acme/missing"):
        pull.resolve("acme/missing")
    with pytest.raises(InvalidRequest, match="OWNER/NAME"):
        pull.resolve("not a repo")


def test_a_taken_name_is_refused_before_the_download(hub, registry, gguf_bytes):
    publish(hub, gguf_bytes())
    plan = pull.resolve(REPO, quant="Q8_0")
    pull.pull(registry, plan, name="mine")
    served = hub.bytes_served(FILE)
    with pytest.raises(InvalidRequest, match="'mine' is already installed"):
        pull.pull(registry, plan, name="mine")
    assert hub.bytes_served(FILE) == served


def test_a_safetensors_repo_is_pulled_as_a_folder(hub, registry, tiny_model_dir):
    for path in sorted(tiny_model_dir.iterdir()):
        hub.add_file("acme/tiny-hf", path.name, path.read_bytes(), lfs=path.suffix == ".safetensors")
    plan = pull.resolve("acme/tiny-hf")
    assert plan.kind == "folder" and plan.filename is None and "config.json" in plan.files
    seen: list[tuple[int, int]] = []
    info = pull.pull(registry, plan, progress=lambda done, total: seen.append((done, total)))
    assert info.name == "tiny-hf" and info.source == "folder"
    assert seen and seen[-1] == (plan.size, plan.size)  # bytes of every file, not a count of files
    for path in tiny_model_dir.glob("*.safetensors"):
        assert (info.path / path.name).read_bytes() == path.read_bytes()


def test_a_folder_of_an_unknown_architecture_is_refused_after_reading_its_config(hub, registry):
    hub.add_file("acme/bert", "config.json", b'{"model_type": "bert"}', lfs=False)
    hub.add_file("acme/bert", "model.safetensors", bytes(4096))
    plan = pull.resolve("acme/bert")
    with pytest.raises(UnsupportedArchitecture, match="'bert'"):
        pull.pull(registry, plan)
    assert hub.downloads("model.safetensors") == []


def test_header_length_is_found_from_the_first_bytes(gguf_bytes, tmp_path):
    from wren.engine.modelhub.gguf_file import GGUFFile

    data = gguf_bytes()
    path = tmp_path / "whole.gguf"
    path.write_bytes(data)
    with GGUFFile(path) as whole:
        data_start = min(t.offset for t in whole.tensors.values())
    end = pull.gguf_header_length(data, len(data))
    assert end is not None and end <= data_start == -(-end // 32) * 32
    assert pull.gguf_header_length(data[:end], len(data)) == end
    assert pull.gguf_header_length(data[: end - 1], len(data)) is None
    assert pull.gguf_header_length(data[:10], len(data)) is None
    assert pull.gguf_header_length(b"PK\x03\x04" + bytes(100), 10_000) == 104  # not GGUF: left to the import
