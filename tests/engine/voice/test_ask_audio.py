"""`wren ask --audio`: a spoken question, recognised on this machine, is the question the
starter model answers."""

from __future__ import annotations

import pytest

from tests.engine.voice.conftest import espeak, wer
from wren.engine.terminal.main import main

STARTER = "smollm2-135m-instruct"
pytestmark = pytest.mark.timeout(300)


@pytest.mark.slow
def test_a_spoken_question_is_answered(tmp_path, wren_home, starter_models_dir, capsys):
    models = wren_home / "models"
    models.mkdir(exist_ok=True)
    (models / STARTER).symlink_to(starter_models_dir / STARTER, target_is_directory=True)
    question = espeak("What is the capital of France?", tmp_path / "question.wav")
    assert main(["ask", "--audio", str(question), "--temperature", "0", "--keep-alive", "0", "--no-save"]) == 0
    captured = capsys.readouterr()
    heard = captured.err.split("heard: ", 1)[1].splitlines()[0]
    assert wer("What is the capital of France?", heard) <= 0.25
    assert "Paris" in captured.out


def test_silence_asks_nothing(tmp_path, capsys):
    import numpy as np

    from tests.engine.voice.conftest import write_wav

    silent = write_wav(tmp_path / "silence.wav", np.zeros((16_000 * 2, 1)), 16_000)
    assert main(["ask", "--audio", str(silent), "--keep-alive", "0"]) == 2
    assert "no speech was heard" in capsys.readouterr().err
    assert main(["conversations", "list", "--json"]) == 0
    assert capsys.readouterr().out == ""  # nothing was asked, so no chat was made
