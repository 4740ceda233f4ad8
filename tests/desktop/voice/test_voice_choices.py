"""The Voice menu's choices, offscreen on the real qasync loop, with the fake device layer
(a WAV file as the microphone, WREN_AUDIO_INPUT=wav:PATH; a listed set of devices): the
microphone picker and its fallback, "keep my dictated audio" off and on, the recognizer
choice, and the quick prompt's microphone."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QWidget

from tests.desktop.test_tray import wren_app  # noqa: F401  (a fixture)
from tests.engine.voice.conftest import SENTENCES, espeak, wer
from wren.desktop.voice.devices import InputDevice

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]
CTRL_SHIFT = Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier


@pytest.fixture
def spoken(tmp_path):
    return espeak(SENTENCES[1], tmp_path / "spoken.wav")


def _menu_titles(menu) -> list[str]:
    menu.aboutToShow.emit()
    return [a.text() for a in menu.actions()]


def test_the_microphone_is_picked_remembered_and_a_missing_one_falls_back(open_window, qtbot, arun):
    window = open_window("Fine.")
    choices = window.voice.choices
    devices = [InputDevice(0, "Desk USB mic", False), InputDevice(1, "Built-in", True)]
    choices.list_devices = lambda: devices
    titles = _menu_titles(choices.mic_menu)
    assert titles == ["System default", "Desk USB mic", "Built-in"]
    choices.mic_menu.actions()[1].trigger()
    qtbot.waitUntil(lambda: arun(window.engine.settings.get("voice.input_device")) == "Desk USB mic", timeout=5000)
    opened: list[str | None] = []
    window.voice.dictation.input_factory = lambda: opened.append(choices.device()) or _NoSound()
    notices: list[str] = []
    choices.notice.connect(notices.append)
    assert choices.device() == "Desk USB mic" and notices == []

    devices.pop(0)  # unplugged; the saved choice stays, the default is used, and the user is told
    assert choices.device() is None
    assert notices and "Desk USB mic" in notices[-1] and "default" in notices[-1]
    assert "Desk USB mic (not connected)" in _menu_titles(choices.mic_menu)

    again = open_window("Fine.", engine=window.engine)  # a later start remembers the choice
    qtbot.waitUntil(lambda: again.voice.choices.saved_device == "Desk USB mic", timeout=5000)


class _NoSound:
    name = "nothing"

    def start(self, sink) -> None:
        pass

    def stop(self) -> None:
        pass


@pytest.mark.parametrize("keep", [False, True])
def test_dictated_audio_is_kept_only_when_asked(open_window, qtbot, spoken, monkeypatch, arun, keep):
    monkeypatch.setenv("WREN_AUDIO_INPUT", f"wav:{spoken}")
    window = open_window("Noted.")
    voice = window.voice
    assert not voice.choices.keep_action.isChecked()  # off by default
    if keep:
        voice.choices.keep_action.trigger()
        qtbot.waitUntil(lambda: arun(window.engine.settings.get("voice.keep_audio")) is True, timeout=5000)
    heard = []
    voice.dictation.heard.connect(heard.append)
    window.composer.edit.setFocus()
    qtbot.keyClick(window.composer.edit, Qt.Key.Key_Space, CTRL_SHIFT)
    qtbot.waitUntil(lambda: bool(window.composer.text()) and not voice.dictation.active, timeout=30000)
    (utterance,) = heard  # the words, the language the recognizer reported, the sound
    assert utterance.text == window.composer.text() and utterance.language == voice.language == "en"
    assert utterance.audio.size > 16_000
    with qtbot.waitSignal(window.conversations.turn_finished, timeout=20000):
        window.composer.send_button.click()
    chat = window.conversations.current_id
    if keep:
        qtbot.waitUntil(lambda: bool(window.engine.voice.recordings(chat)), timeout=5000)
        (kept,) = window.engine.voice.recordings(chat)
        assert kept.stat().st_size > 16_000 * 2  # over a second of 16-bit sound
    else:
        qtbot.wait(300)
        assert window.engine.voice.recordings(chat) == []


def test_the_recognizer_menu_offers_downloads_and_keeps_the_starter_chosen(open_window):
    window = open_window("Fine.")
    choices = window.voice.choices
    titles = _menu_titles(choices.stt_menu)
    assert titles[0].startswith("Whisper tiny (English, starter)")
    assert any("99 languages" in t and "download" in t and "MB" in t and "MIT" in t for t in titles)
    assert choices.stt_menu.actions()[0].isChecked()
    voices = _menu_titles(choices.voice_menu)
    assert voices[0].startswith("Joe") and any("German" in t for t in voices)


def test_the_quick_prompt_has_a_microphone_and_push_to_talk(wren_app, qtbot, spoken, monkeypatch):  # noqa: F811
    monkeypatch.setenv("WREN_AUDIO_INPUT", f"wav:{spoken}")
    app = wren_app()
    quick = app.quick
    quick.popup()
    qtbot.waitUntil(quick.input.hasFocus, timeout=5000)
    assert app.quick_mic.mic.isVisible() and app.quick_mic.mic.accessibleName() == "Dictate"
    qtbot.keyClick(quick.input, Qt.Key.Key_Space, CTRL_SHIFT)
    qtbot.waitUntil(lambda: app.quick_mic.mic.isChecked(), timeout=5000)
    qtbot.waitUntil(lambda: bool(quick.input.text()) and not app.quick_mic.dictation.active, timeout=30000)
    assert wer(SENTENCES[1], quick.input.text()) <= 0.25
    assert not app.quick_mic.mic.isChecked() and quick.conversation_id is None  # in the box, not sent


def test_the_models_page_lists_voice_models_and_downloads_one_through_the_voice_choice(open_window, qtbot):
    window = open_window("Fine.")
    dialog = window.open_models()
    section = dialog.page.findChild(QWidget, "voiceModelsSection")
    qtbot.waitUntil(lambda: section is not None and len(section.buttons) > 2, timeout=10000)
    buttons = section.buttons
    in_use = [b for b in buttons.values() if b.text() == "In use"]
    assert len(in_use) == 2  # the starter recognizer and the starter voice
    offered = window.voice.choices.voice.offered()
    download = next(m for m in offered if not m.installed and not m.starter)
    asked: list[str] = []
    window.voice.choices.download = lambda model: asked.append(model.id)  # no network in tests
    button = buttons[download.id]
    details = button.parent().findChild(QLabel, "modelRowDetails")
    assert button.text() == "Download and use" and download.license in details.text()
    button.setFocus()
    qtbot.keyClick(button, Qt.Key.Key_Space)
    assert asked == [download.id]
