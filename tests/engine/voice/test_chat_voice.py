"""`wren chat --voice` on a real terminal (a pseudo-terminal), answered by the scripted
backend: a spoken question (a WAV file as the microphone, WREN_AUDIO_INPUT=wav:PATH) is heard,
answered, and the answer spoken (WREN_AUDIO_OUTPUT=memory); without a microphone, a clear error."""

from __future__ import annotations

import sys

import pytest

from tests.engine.cli.conftest import (
    LAUNCHER,
    child_env,
    tiny_chosen,  # noqa: F401  (a fixture)
)
from tests.engine.cli.test_chat_pty import Terminal
from tests.engine.voice.conftest import espeak, wer

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX"),
]
QUESTION = "Please remind me to call my sister tomorrow morning."


def start(**env: str) -> Terminal:
    return Terminal([sys.executable, str(LAUNCHER), "chat", "--voice", "--no-save"],
                    child_env(TERM="dumb", WREN_TEST_CTTY="1", **env))


def test_a_spoken_question_is_answered_aloud_then_it_listens_again(tiny_chosen, tmp_path):  # noqa: F811
    question = espeak(QUESTION, tmp_path / "question.wav")
    t = start(WREN_AUDIO_INPUT=f"wav:{question}", WREN_AUDIO_OUTPUT="memory")
    try:
        t.expect("(listening…")
        heard = t.expect("echo: ", timeout=120)  # the transcript is shown as the question, then answered
        assert wer(QUESTION, heard.rsplit(">", 1)[-1]) <= 0.25
        answer = t.expect("(spoke ", timeout=120)
        assert wer(QUESTION, answer) <= 0.25  # the echo of what was heard
        seconds = float(t.expect(" s)").strip())
        assert seconds > 1.0  # the answer became speech, not silence
        t.expect("(listening…")  # and the next question is awaited
        assert t.finish(timeout=60) == 0  # the file ended: the input ended
    finally:
        t.kill()



def test_without_a_microphone_it_says_so_before_loading_the_model(tiny_chosen):  # noqa: F811
    t = start(WREN_AUDIO_INPUT="none")
    try:
        t.expect("no microphone was found")
        assert t.finish() != 0
    finally:
        t.kill()
    assert "Loading the model" not in t.seen


def test_ctrl_c_while_listening_ends_the_chat(tiny_chosen, tmp_path):  # noqa: F811
    import numpy as np

    from tests.engine.voice.conftest import write_wav

    quiet = write_wav(tmp_path / "quiet.wav", np.zeros((16_000 * 30, 1)), 16_000)
    t = start(WREN_AUDIO_INPUT=f"wav:{quiet}", WREN_AUDIO_OUTPUT="memory")
    try:
        t.expect("(listening…", timeout=120)
        t.send("\x03")
        assert t.finish(timeout=30) == 0, t.seen
    finally:
        t.kill()
