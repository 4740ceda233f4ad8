"""Voice models from a fake Hugging Face hub on 127.0.0.1 (tests/fakehub.py): a Whisper
folder and a Piper voice are pulled through the models' downloader, resumed after a dropped
connection and refused when a file does not match its sha256; the chosen model is used."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from tests.fakehub import FakeHub, use_fake_hub
from wren.engine.errors import Cancelled, InvalidRequest, ModelFileError, ModelNotFound
from wren.engine.voice.catalog import STT, VOICE, VoiceModel, VoiceModels, load_voice_catalog
from wren.engine.voice.service import VoiceService

STT_REPO, VOICE_REPO = "acme/faster-whisper-fake", "acme/piper-voices"
VOICE_DIR = "xx/xx_XX/test/medium"
ENTRIES = [
    VoiceModel("whisper-fake", STT, "Fake Whisper", STT_REPO, ("config.json", "model.bin", "tokenizer.json",
                                                               "vocabulary.txt"), 1, "MIT", "multilingual"),
    VoiceModel("xx_XX-test-medium", VOICE, "Test voice", VOICE_REPO,
               (f"{VOICE_DIR}/xx_XX-test-medium.onnx", f"{VOICE_DIR}/xx_XX-test-medium.onnx.json"), 1, "CC0-1.0", "xx"),
]
MODEL_BIN = np.random.default_rng(0).integers(0, 256, 300_000, dtype=np.uint8).tobytes()
VOICE_CONFIG = json.dumps({"audio": {"sample_rate": 22050}, "espeak": {"voice": "fr"},
                           "phoneme_id_map": {"_": [0], "^": [1], "$": [2], "a": [14]}}).encode()


@pytest.fixture
def hub(monkeypatch, tmp_path):
    with FakeHub() as server:
        use_fake_hub(server, monkeypatch, tmp_path / "hf-home")
        server.add_file(STT_REPO, "config.json", b'{"alignment_heads": []}', lfs=False)
        server.add_file(STT_REPO, "model.bin", MODEL_BIN)
        server.add_file(STT_REPO, "tokenizer.json", b"{}", lfs=False)
        server.add_file(STT_REPO, "vocabulary.txt", b"a\nb\n", lfs=False)
        server.add_file(STT_REPO, "README.md", b"# fake\n", lfs=False)
        server.add_file(VOICE_REPO, f"{VOICE_DIR}/xx_XX-test-medium.onnx", MODEL_BIN[:200_000])
        server.add_file(VOICE_REPO, f"{VOICE_DIR}/xx_XX-test-medium.onnx.json", VOICE_CONFIG, lfs=False)
        yield server


@pytest.fixture
def models(tmp_path) -> VoiceModels:
    return VoiceModels(tmp_path / "models" / ".voice", catalog=ENTRIES)


def test_the_shipped_catalog_reads_with_sizes_and_licences():
    entries = load_voice_catalog()
    kinds = {e.kind for e in entries}
    assert kinds == {STT, VOICE}
    assert any(e.languages == "multilingual" and e.repo.startswith("Systran/faster-whisper-") for e in entries)
    assert all(e.repo == "rhasspy/piper-voices" for e in entries if e.kind == VOICE)
    assert all(e.size_bytes > 1_000_000 and e.license for e in entries)
    assert all(f.endswith((".onnx", ".onnx.json")) for e in entries if e.kind == VOICE for f in e.files)


def test_a_recognizer_and_a_voice_are_pulled_and_installed(hub, models):
    seen: list[tuple[int, int]] = []
    entry = models.pull("whisper-fake", progress=lambda done, total: seen.append((done, total)))
    assert entry.installed
    folder = models.stt_dir("whisper-fake")
    assert (folder / "model.bin").read_bytes() == MODEL_BIN
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.bin", "tokenizer.json", "vocabulary.txt"]
    total = seen[-1][1]
    assert seen[-1] == (total, total) and total >= len(MODEL_BIN)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)  # one count across the files
    models.pull("xx_XX-test-medium")
    onnx, config = models.voice_files("xx_XX-test-medium")
    assert onnx.read_bytes() == MODEL_BIN[:200_000] and config.read_bytes() == VOICE_CONFIG
    assert not any((models.root / ".downloads").iterdir())  # nothing left to resume
    with pytest.raises(InvalidRequest, match="already installed"):
        models.pull("whisper-fake")


def test_a_dropped_download_resumes_and_a_corrupt_one_is_refused(hub, models):
    hub.cut_after(STT_REPO, "model.bin", len(MODEL_BIN) // 2)
    models.pull("whisper-fake")
    assert (models.stt_dir("whisper-fake") / "model.bin").read_bytes() == MODEL_BIN
    starts = [r.range for r in hub.downloads("model.bin") if r.range]
    assert starts and starts[-1].startswith("bytes=") and starts[-1] != "bytes=0-"  # the rest only

    hub.corrupt(VOICE_REPO, f"{VOICE_DIR}/xx_XX-test-medium.onnx")
    with pytest.raises(ModelFileError, match="checksum mismatch"):
        models.pull("xx_XX-test-medium")
    assert not (models.root / "xx_XX-test-medium").exists()


def test_a_cancelled_pull_keeps_its_partial_file_for_the_next(hub, models):
    hub.slow(STT_REPO, "model.bin", chunk=16384, delay=0.01)
    cancel = threading.Event()

    def stop_halfway(done: int, total: int) -> None:
        if done >= total // 2:
            cancel.set()

    with pytest.raises(Cancelled):
        models.pull("whisper-fake", progress=stop_halfway, cancel=cancel)
    assert not models.find("whisper-fake").installed
    (partial,) = (models.root / ".downloads").glob("*/*.part")
    assert 0 < partial.stat().st_size < len(MODEL_BIN)
    models.pull("whisper-fake")
    assert (models.stt_dir("whisper-fake") / "model.bin").read_bytes() == MODEL_BIN


def test_choosing_a_model_that_is_not_installed_or_of_the_other_kind_is_refused(hub, models):
    service = VoiceService(models=models)
    with pytest.raises(ModelNotFound, match="wren models pull whisper-fake"):
        service.choose(stt="whisper-fake")
    models.pull("whisper-fake")
    with pytest.raises(InvalidRequest, match="is not a voice"):
        service.choose(voice="whisper-fake")
    with pytest.raises(ModelNotFound, match="no voice model 'nope'"):
        service.choose(stt="nope")
    service.choose(stt="whisper-fake")
    assert service.transcriber().model_dir == models.stt_dir("whisper-fake")
    service.choose()
    assert service.stt_model is None and service.transcriber().model_dir is None  # the starter again
