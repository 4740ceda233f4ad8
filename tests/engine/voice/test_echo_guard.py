"""Barge-in without headphones: the microphone hears Wren's own voice from the speakers.
With the echo guard, that voice (quiet at the microphone, there from the start of playback)
does not count as the user; the user's voice, clearly louder, does. Real Silero VAD on
eSpeak NG speech."""

from __future__ import annotations

import numpy as np
import pytest

from tests.engine.voice.conftest import SENTENCES, espeak
from wren.engine.voice.audio import RATE, load_audio
from wren.engine.voice.listen import CHUNK, EchoGuard, Listener


@pytest.fixture(scope="module")
def speech(tmp_path_factory):
    folder = tmp_path_factory.mktemp("echo")
    wren = load_audio(espeak(" ".join(SENTENCES[:2]), folder / "wren.wav", voice="en-gb"))
    user = load_audio(espeak(SENTENCES[2], folder / "user.wav"))
    return wren / np.abs(wren).max(), user / np.abs(user).max()


def first_speech_second(listener: Listener, samples: np.ndarray) -> float | None:
    for start in range(0, samples.size, CHUNK):
        if listener.feed(samples[start:start + CHUNK]).started:
            return start / RATE
    return None


def echo_then_user(wren: np.ndarray, user: np.ndarray, at: float) -> np.ndarray:
    """Wren's voice at -26 dB all along (the speakers, heard across the room), the user's at full level from `at`."""
    mixed = 0.05 * wren.copy()
    begin = int(at * RATE)
    end = min(mixed.size, begin + user.size)
    mixed[begin:end] += 0.6 * user[:end - begin]
    return mixed


def test_wren_heard_through_the_speakers_is_not_the_user(speech):
    wren, _ = speech
    echo = 0.05 * wren
    assert first_speech_second(Listener(None), echo) is not None  # without the guard: Wren interrupts itself
    assert first_speech_second(Listener(None, echo_guard=EchoGuard()), echo) is None


def test_the_user_speaking_over_the_echo_is_heard(speech):
    wren, user = speech
    mixed = echo_then_user(wren, user, at=2.0)
    heard = first_speech_second(Listener(None, echo_guard=EchoGuard()), mixed)
    assert heard is not None and 2.0 <= heard <= 3.0  # soon after the user began, not before
