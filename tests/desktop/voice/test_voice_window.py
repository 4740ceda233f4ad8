"""Voice in the window, offscreen, on the real qasync loop: the microphone is a WAV file of
eSpeak NG speech played in real time at the device layer (desktop/voice/devices.py), the
speakers an output that keeps what it played; the recognizer and the voice are the real ones.
Keys only, no mouse."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from PySide6.QtCore import Qt

from tests.engine.voice.conftest import SENTENCES, espeak, wer
from wren.desktop.voice.devices import MemoryOutput, WavFileInput

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]
ANSWER = "Paris is the capital of France. It lies on the Seine."


@pytest.fixture
def spoken(tmp_path):
    return espeak(SENTENCES[1], tmp_path / "spoken.wav")


def _press(qtbot, window, key, modifiers):
    qtbot.keyClick(window.composer.edit, key, modifiers)


def test_dictation_by_keyboard_fills_the_composer(open_window, qtbot, spoken, monkeypatch):
    monkeypatch.setenv("WREN_AUDIO_INPUT", f"wav:{spoken}")
    window = open_window(ANSWER)
    voice = window.voice
    levels, partials = [], []
    voice.dictation.level.connect(levels.append)
    voice.dictation.partial.connect(partials.append)
    window.composer.edit.setFocus()
    _press(qtbot, window, Qt.Key.Key_Space, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    qtbot.waitUntil(lambda: voice.mic.isChecked(), timeout=5000)
    assert voice.panel.isVisible() and voice.mic.accessibleName() == "Stop dictating"
    qtbot.waitUntil(lambda: not voice.dictation.active, timeout=30000)
    qtbot.waitUntil(lambda: bool(window.composer.text()), timeout=5000)
    assert wer(SENTENCES[1], window.composer.text()) <= 0.25
    assert max(levels) > -40 and min(levels) == -100.0  # the meter moved with the speech
    assert partials and any("remind" in p.lower() for p in partials)  # words while speaking
    assert not voice.mic.isChecked() and window.composer.edit.hasFocus()
    assert window.conversations.current_id is None  # dictation types; it does not send


def test_no_microphone_says_so_and_where_to_allow_it(open_window, qtbot, monkeypatch):
    monkeypatch.delenv("WREN_AUDIO_INPUT", raising=False)  # the real PortAudio layer: no device on this machine
    window = open_window(ANSWER)
    failures = []
    window.voice.dictation.failed.connect(failures.append)
    window.voice.mic.click()
    qtbot.waitUntil(lambda: bool(failures), timeout=5000)
    assert "no microphone was found" in failures[0] or "no audio system was found" in failures[0]
    assert window.voice.panel.label.text() == failures[0] and not window.voice.mic.isChecked()


# Long enough that one misheard pair ("Paris is" as "parishes": Piper's voice varies from run
# to run) does not decide the check; heard back alone it gives 0.06, at worst 0.17 in 8 runs.
READ_ALOUD = "Paris is the capital of France. It lies on the river Seine, in the north of the country."


def test_read_aloud_speaks_the_last_answer(open_window, send, qtbot, transcriber):
    window = open_window(READ_ALOUD)
    output = MemoryOutput(speed=8.0)
    window.voice.reader.output_factory = lambda: output
    send(window, "What is the capital of France?")
    _press(qtbot, window, Qt.Key.Key_R, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    qtbot.waitUntil(lambda: len(output.played) == 2, timeout=30000)
    qtbot.waitUntil(lambda: not window.voice.reader.active, timeout=5000)
    audio = np.concatenate([samples for samples, _ in output.played])
    rate = output.played[0][1]
    heard = transcriber.transcribe(np.interp(np.arange(0, audio.size, rate / 16_000), np.arange(audio.size), audio))
    assert wer(READ_ALOUD, heard.text) <= 0.25


def test_voice_mode_listens_sends_reads_and_listens_again(open_window, qtbot, spoken, tmp_path):
    from tests.engine.voice.conftest import write_wav

    quiet = write_wav(tmp_path / "quiet.wav", np.zeros((16_000, 1)), 16_000)
    opened = []

    def microphone():  # the user asks once, then is quiet while Wren answers and after
        opened.append(1)
        return WavFileInput(str(spoken if len(opened) == 1 else quiet), tail_seconds=30)

    # a short first sentence, then a long one streaming for seconds: the first is heard meanwhile
    answer = "It is Paris. " + " ".join(["The city lies on the river Seine in the north of France"] * 3) + "."
    window = open_window(answer, delay=0.06)
    window.voice.dictation.input_factory = window.voice.barge_in.input_factory = microphone
    output = MemoryOutput(speed=8.0)
    window.voice.reader.output_factory = lambda: output
    happened = []
    window.voice.reader.first_audio.connect(lambda _s: happened.append("first audio"))
    window.conversations.turn_finished.connect(lambda _f: happened.append("answer finished"))
    window.composer.edit.setFocus()
    _press(qtbot, window, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    qtbot.waitUntil(lambda: "answer finished" in happened, timeout=60000)
    qtbot.waitUntil(lambda: len(output.played) == 2, timeout=30000)
    qtbot.waitUntil(lambda: window.voice.dictation.active, timeout=10000)  # listening for the next question
    assert wer(SENTENCES[1], window.chat.message_widgets()[0].text()) <= 0.25  # the spoken question was sent
    assert happened.index("first audio") < happened.index("answer finished")  # read while it streamed
    _press(qtbot, window, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    qtbot.waitUntil(lambda: not window.voice.dictation.active, timeout=5000)


def test_speaking_over_wren_stops_it(open_window, qtbot, spoken, monkeypatch):
    """Barge-in: while an answer is read aloud, the user's voice stops it."""
    monkeypatch.setenv("WREN_AUDIO_INPUT", f"wav:{spoken}")
    window = open_window(ANSWER)
    output = MemoryOutput()  # real time: the answer takes ~4 s to read
    window.voice.reader.output_factory = lambda: output
    window.voice._voice_mode = True  # as set_voice_mode would, without starting a question first
    window.voice.read_text(ANSWER + " " + ANSWER)
    qtbot.waitUntil(lambda: window.voice.barge_in.active, timeout=10000)
    qtbot.waitUntil(lambda: output.stopped.is_set(), timeout=10000)  # the speech starts 1 s in
    played = sum(s.size for s, _ in output.played) / 22_050
    assert played < 4.0  # cut short, not read to the end
    window.voice.set_voice_mode(False)


def test_an_unplugged_microphone_ends_dictation_with_a_reason(qtbot, spoken):
    from wren.desktop.voice.dictation import Dictation
    from wren.engine.voice.service import VoiceService

    class Unplugged(WavFileInput):
        def start(self, sink):
            def cut(samples):
                if not stop.is_set():
                    sink(samples)
            stop = threading.Event()
            threading.Timer(1.5, stop.set).start()
            super().start(cut)

    dictation = Dictation(VoiceService(), input_factory=lambda: Unplugged(str(spoken), tail_seconds=10))
    failures, results = [], []
    dictation.failed.connect(failures.append)
    dictation.finished.connect(results.append)
    dictation.start()
    qtbot.waitUntil(lambda: bool(results), timeout=15000)
    assert failures == ["the microphone stopped sending sound (was it unplugged?)"]
    dictation.cancel()
