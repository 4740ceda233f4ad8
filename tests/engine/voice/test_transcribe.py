"""`wren transcribe` on speech eSpeak NG spoke: the words come back (WER at most 0.15), at any
sample rate, mono or stereo; silence and noise give no invented words; a file that is not
audio, is empty, missing or too long is refused naming the file and the reason."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.engine.voice.conftest import SENTENCES, espeak, read_wav, wer, write_wav
from wren.engine.terminal.main import main
from wren.engine.voice import audio
from wren.engine.voice.audio import AudioError, load_audio, resample

pytestmark = pytest.mark.timeout(300)


@pytest.mark.slow
def test_transcribe_recognises_espeak_sentences(tmp_path, capsys):
    errors = []
    for n, sentence in enumerate(SENTENCES):
        audio = espeak(sentence, tmp_path / f"s{n}.wav")
        assert main(["transcribe", str(audio)]) == 0
        heard = capsys.readouterr().out.strip()
        errors.append(wer(sentence, heard))
    assert sum(errors) / len(errors) <= 0.15, errors


@pytest.mark.slow
def test_transcribe_json_has_segments_with_times(tmp_path, capsys):
    audio = espeak(" ".join(SENTENCES[:2]), tmp_path / "two.wav")
    assert main(["transcribe", str(audio), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["language"] == "en" and result["duration"] > 3
    assert result["segments"] and all(0 <= s["start"] < s["end"] <= result["duration"] + 1 for s in result["segments"])
    assert wer(" ".join(SENTENCES[:2]), result["text"]) <= 0.15


@pytest.mark.slow
@pytest.mark.parametrize("rate, channels", [(8_000, 1), (96_000, 1), (44_100, 2)])
def test_any_rate_and_stereo(tmp_path, transcriber, rate, channels):
    samples, source_rate = read_wav(espeak(SENTENCES[2], tmp_path / "q.wav"))
    mono = resample(samples[:, 0], source_rate, rate)
    frames = np.stack([mono] * channels, axis=1) if channels == 2 else mono[:, None]
    path = write_wav(tmp_path / f"q-{rate}-{channels}.wav", frames, rate)
    assert wer(SENTENCES[2], transcriber.transcribe(path).text) <= 0.25


@pytest.mark.slow
def test_silence_and_noise_are_not_words(tmp_path, transcriber, capsys):
    silent = write_wav(tmp_path / "silence.wav", np.zeros((16_000 * 4, 1)), 16_000)
    assert not transcriber.transcribe(silent).heard
    assert main(["transcribe", str(silent)]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and "no speech was heard" in captured.err
    noise = np.random.default_rng(7).normal(0, 0.05, (16_000 * 4, 1))
    heard = transcriber.transcribe(write_wav(tmp_path / "noise.wav", noise, 16_000))
    assert len(heard.text.split()) <= 2  # hiss is not a sentence


def _bad_file(kind: str, folder):
    path = folder / f"{kind}.wav"
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "text":
        path.write_text("not audio at all\n" * 50)
    elif kind == "truncated":
        path.write_bytes(b"RIFF\x24\x00\x00\x00WAVEfmt ")
    elif kind == "long":  # the limit is 4 hours; here it is lowered to 2 seconds, and the file is 3
        write_wav(path, np.zeros((8_000 * 3, 1)), 8_000)
    elif kind == "folder":
        return folder
    return path


@pytest.mark.parametrize("kind, message", [
    ("missing", "does not exist"),
    ("empty", "is empty"),
    ("text", "is not an audio file Wren can read"),
    ("truncated", "not an audio file"),
    ("long", "3 s long; Wren transcribes up to 2 s at a time"),
    ("folder", "is not a file"),
])
def test_bad_files_are_refused_with_the_reason(tmp_path, capsys, monkeypatch, kind, message):
    monkeypatch.setattr(audio, "LONGEST_SECONDS", 2)
    path = _bad_file(kind, tmp_path)
    with pytest.raises(AudioError, match=message):
        load_audio(path)
    assert main(["transcribe", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_ask_refuses_audio_and_words_together(tmp_path, capsys):
    assert main(["ask", "--audio", str(tmp_path / "q.wav"), "what", "now"]) == 2
    assert "not both" in capsys.readouterr().err
