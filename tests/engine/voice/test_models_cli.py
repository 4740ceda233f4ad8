"""`wren models pull ID` for a recognizer Wren offers, from a fake hub on 127.0.0.1 that
serves Systran/faster-whisper-tiny's file names (not its weights): installed where the
window and `wren transcribe --model` find it; a model that is not installed, or whose files
are not a Whisper model, is a clear error."""

from __future__ import annotations

import numpy as np
import pytest

from tests.engine.voice.conftest import write_wav
from tests.fakehub import FakeHub, use_fake_hub
from wren.engine.terminal.main import main

REPO = "Systran/faster-whisper-tiny"
NOT_WEIGHTS = np.random.default_rng(1).integers(0, 256, 100_000, dtype=np.uint8).tobytes()


@pytest.fixture
def hub(monkeypatch, tmp_path):
    with FakeHub() as server:
        use_fake_hub(server, monkeypatch, tmp_path / "hf-home")
        for name, data in {"config.json": b"{}", "tokenizer.json": b"{}", "vocabulary.txt": b"a\n"}.items():
            server.add_file(REPO, name, data, lfs=False)
        server.add_file(REPO, "model.bin", NOT_WEIGHTS)
        yield server


def test_a_recognizer_is_pulled_by_its_id(hub, wren_home, tmp_path, capsys):
    sound = write_wav(tmp_path / "tone.wav", 0.2 * np.ones((16_000, 1)), 16_000)
    assert main(["transcribe", str(sound), "--model", "whisper-tiny"]) != 0
    assert "wren models pull whisper-tiny" in capsys.readouterr().err  # not installed: how to get it

    assert main(["models", "pull", "whisper-tiny"]) == 0
    captured = capsys.readouterr()
    assert "Installed whisper-tiny" in captured.out and "MIT" in captured.err
    assert (wren_home / "models" / ".voice" / "whisper-tiny" / "model.bin").read_bytes() == NOT_WEIGHTS
    assert main(["models", "list", "--json"]) == 0
    assert "whisper-tiny" not in capsys.readouterr().out  # not a language model

    assert main(["transcribe", str(sound), "--model", "whisper-tiny"]) != 0
    err = capsys.readouterr().err
    assert "could not be loaded" in err and "Traceback" not in err
