"""Speech for the voice tests: sentences spoken by eSpeak NG (Debian's espeak-ng, listed in
tests/system/packages.txt), a voice unlike Wren's own, so recognition is not checked against
the synthesizer that made the audio."""

from __future__ import annotations

import re
import shutil
import subprocess
import wave
from pathlib import Path

import numpy as np
import pytest

SENTENCES = [
    "The weather today is sunny with a light breeze.",
    "Please remind me to call my sister tomorrow morning.",
    "How many kilometers are there in a mile?",
    "Open the window and let some fresh air into the room.",
    "My favorite book is about a journey across the ocean.",
]


def espeak(text: str, path: Path, *, voice: str = "en-us", speed: int = 150) -> Path:
    program = shutil.which("espeak-ng")
    if program is None:
        pytest.skip("espeak-ng is not installed (Debian package espeak-ng, in tests/system/packages.txt)")
    subprocess.run([program, "-v", voice, "-s", str(speed), "-w", str(path), text], check=True, capture_output=True)
    return path


def read_wav(path: Path) -> tuple[np.ndarray, int]:
    with wave.open(str(path), "rb") as w:
        frames = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768
        return frames.reshape(-1, w.getnchannels()), w.getframerate()


def write_wav(path: Path, samples: np.ndarray, rate: int) -> Path:
    """samples: (frames, channels) float in [-1, 1]."""
    samples = samples.reshape(samples.shape[0], -1)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(samples.shape[1])
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())
    return path


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower().replace("kilometres", "kilometers"))


def wer(reference: str, heard: str) -> float:
    """Word error rate: word-level edit distance over the reference's length."""
    ref, hyp = words(reference), words(heard)
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[len(hyp)] / max(1, len(ref))


@pytest.fixture(scope="session")
def transcriber():
    from wren.engine.voice.stt import Transcriber

    t = Transcriber(threads=2)
    t.load()
    return t


@pytest.fixture(scope="session")
def voice():
    from wren.engine.voice.speech import Voice

    v = Voice(threads=2)
    v.load()
    return v
