"""Listening as the window does it, with sound fed in 20 ms pieces as a microphone gives them:
speech's start and end found by the voice-activity detector, a partial transcript while
speaking, the final one after, silence timing out, and the user's voice detected over
silence (barge-in)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.engine.voice.conftest import SENTENCES, espeak, wer
from wren.engine.voice.audio import RATE, load_audio
from wren.engine.voice.listen import Listener

pytestmark = pytest.mark.timeout(300)
PIECE = RATE // 50  # 20 ms


def feed_all(listener, samples):
    """Feed until the listener says the utterance ended; every Heard, in order."""
    heard = []
    for start in range(0, samples.size, PIECE):
        heard.append(listener.feed(samples[start:start + PIECE]))
        if listener.ended:
            break
    return heard


@pytest.fixture(scope="module")
def utterance(tmp_path_factory):
    speech = load_audio(espeak(SENTENCES[1], tmp_path_factory.mktemp("listen") / "u.wav"))
    silence = np.zeros(RATE, dtype=np.float32)
    return np.concatenate([silence, speech, silence, silence, np.full(RATE, 0.3, dtype=np.float32)])


def test_end_of_speech_is_found_and_the_words_are_heard(utterance, transcriber):
    listener = Listener(transcriber, end_silence=0.8)
    heard = feed_all(listener, utterance)
    starts = [n for n, h in enumerate(heard) if h.started]
    ends = [n for n, h in enumerate(heard) if h.ended]
    assert len(starts) == 1 and len(ends) == 1
    start_s, end_s = starts[0] * PIECE / RATE, ends[0] * PIECE / RATE
    file_end = utterance.size / RATE - 3  # espeak's file (its own trailing quiet included) ends 3 s before the samples
    last_word = listener.last_speech_seconds
    assert 0.9 <= start_s <= 1.5, start_s
    assert last_word < file_end and end_s < file_end + 1.0, (last_word, end_s, file_end)
    assert end_s - last_word == pytest.approx(0.8, abs=0.05)  # end_silence after the last speech, not the hum after
    assert max(h.level_db for h in heard) > -40 and heard[10].level_db == -100.0  # the meter: loud speech, silence
    assert wer(SENTENCES[1], listener.transcript().text) <= 0.15


def test_a_partial_transcript_while_speaking(utterance, transcriber):
    listener = Listener(transcriber)
    for start in range(0, int(RATE * 2.6), PIECE):  # 1 s of silence, then 1.6 s of the sentence
        listener.feed(utterance[start:start + PIECE])
    assert listener.speaking and not listener.ended
    partial = listener.transcript().text.lower()
    assert "remind" in partial and "sister" not in partial


def test_silence_times_out_without_words(transcriber):
    listener = Listener(transcriber, no_speech_timeout=2.0)
    heard = feed_all(listener, np.zeros(RATE * 5, dtype=np.float32))
    assert heard[-1].timed_out and not listener.heard_speech
    assert listener.seconds == pytest.approx(2.0, abs=0.1)
    assert listener.transcript().text == ""


def test_barge_in_speech_is_detected_quickly(utterance):
    listener = Listener(None)  # what the window runs on the microphone while Wren speaks
    heard = feed_all(listener, utterance)
    first = next(n for n, h in enumerate(heard) if h.speaking) * PIECE / RATE
    assert 1.0 <= first <= 1.4  # the speech begins at 1.0 s
