"""The voice controls of the window: the microphone button beside Send, a panel with the level
meter and the words heard so far, the Voice menu (dictate, voice mode, read the last answer
aloud, pause, stop, pace, and the choices in choices.py), and voice mode — listen → send →
read the answer aloud → listen, where speaking over Wren stops it (barge-in) and starts the
next question. Without headphones (the user says so in the Voice menu) barge-in listens with
the engine's echo guard, which can still miss a quiet voice; the window says so (BARGE_IN_HINT)."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, Qt, QTimer
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QHBoxLayout, QLabel, QMenu, QProgressBar, QWidget

from .choices import VoiceChoices
from .devices import default_input, default_output
from .dictation import Dictation, Heard
from .mic_button import MicButton
from .reader import ReadAloud

METER_FLOOR_DB = -60.0
SPEEDS = (0.75, 1.0, 1.25, 1.5)
BARGE_IN_HINT = ("Headphones work best: through speakers the microphone hears Wren too, so only speech clearly "
                 "louder than Wren interrupts it (Voice → I use headphones: off).")


class VoicePanel(QWidget):
    """Above the composer while listening: a level meter and the words heard so far."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("voicePanel")
        self.meter = QProgressBar()
        self.meter.setObjectName("voiceMeter")
        self.meter.setAccessibleName("Microphone level")
        self.meter.setRange(0, int(-METER_FLOOR_DB))
        self.meter.setTextVisible(False)
        self.meter.setFixedWidth(90)
        self.meter.setMaximumHeight(8)
        self.label = QLabel()
        self.label.setObjectName("voiceHeard")
        self.label.setAccessibleName("What Wren heard")
        self.label.setWordWrap(True)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.meter, 0, Qt.AlignmentFlag.AlignVCenter)
        row.addWidget(self.label, 1)
        self.hide()

    def show_level(self, db: float) -> None:
        self.meter.setValue(int(max(0.0, min(-METER_FLOOR_DB, db - METER_FLOOR_DB))))

    def say(self, text: str) -> None:
        self.label.setText(text)
        self.show()


class VoiceControls(QObject):
    def __init__(self, window: Any, voice: Any, *, input_factory=default_input,
                 output_factory=default_output) -> None:
        """`window`: the MainWindow (its composer, chat, conversations and menu bar)."""
        super().__init__(window)
        self.window: Any = window
        self.voice = voice  # engine.voice
        self.choices: VoiceChoices  # made with the menu, below; asked at each start for the chosen microphone
        self.menu: QMenu

        def microphone() -> Any:
            return input_factory(self.choices.device())

        self.dictation = Dictation(voice, input_factory=microphone, parent=self)
        self.reader = ReadAloud(voice, output_factory=output_factory, parent=self)
        self.barge_in = Dictation(voice, input_factory=microphone, parent=self)  # speech detection only
        self.panel = VoicePanel()
        self.mic = MicButton(self.dictation, "micButton",
                             "Dictate: speak, and the words land in the message box (Ctrl+Shift+Space)",
                             start=self._start_dictation)
        self.window.composer.add_panel(self.panel)
        self.window.composer.add_row_widget(self.mic)
        self._build_menu()
        self.choices = VoiceChoices(window, voice, self.menu)
        self.choices.notice.connect(self._notice)
        QTimer.singleShot(0, lambda: self.window.tasks.run(self.choices.load(), what="reading the voice settings"))
        self._voice_mode = False
        self._kept_audio: Heard | None = None  # a dictated question's sound, kept once it is sent
        self.language = "en"  # what the recognizer heard last (a multilingual model detects it)
        d = self.dictation
        d.level.connect(self.panel.show_level)
        d.partial.connect(lambda text: self.panel.say(f"Listening… {text}"))
        d.speech_started.connect(lambda: self.reader.stop())
        d.finished.connect(self._heard)
        d.heard.connect(self._heard_with)
        d.failed.connect(self._failed)
        d.listening.connect(self._listening)
        self.barge_in.speech_started.connect(self._barged_in)
        self.reader.failed.connect(self._failed)
        self.reader.speaking.connect(self._speaking)
        self.window.conversations.turn_finished.connect(self._answered)
        self.window.conversations.turn_finished.connect(self._keep_audio)
        self.window.conversations.answer_text.connect(self._answer_piece)
        self._reading_answer = False  # voice mode is reading the answer that streams in now

    # -- the menu ---------------------------------------------------------------------

    def _build_menu(self) -> None:
        w = self.window
        self.dictate_action = self._action("&Dictate", self.toggle_dictation, "Ctrl+Shift+Space", "dictateAction")
        self.voice_mode_action = self._action("&Voice mode (talk and listen)", self.set_voice_mode, "Ctrl+Shift+V",
                                              "voiceModeAction", checkable=True)
        self.read_action = self._action("&Read the last answer aloud", self.read_last_answer, "Ctrl+Shift+R",
                                        "readAloudAction")
        self.pause_action = self._action("&Pause reading", self.reader.pause, None, "pauseReadingAction", checkable=True)
        self.stop_reading_action = self._action("&Stop reading", self.stop_reading, "Ctrl+Shift+.", "stopReadingAction")
        menu = self.menu = w.menuBar().addMenu("&Voice")
        help_menu = next((a for a in w.menuBar().actions() if a.text() == "&Help"), None)
        if help_menu is not None:
            w.menuBar().insertMenu(help_menu, menu)
        for a in (self.dictate_action, self.voice_mode_action, self.read_action, self.pause_action,
                  self.stop_reading_action):
            menu.addAction(a)
        pace = menu.addMenu("Reading &pace")
        for speed in SPEEDS:
            a = QAction(f"{speed:g}×", self, checkable=True, checked=speed == 1.0)
            a.triggered.connect(lambda _on=False, s=speed: self.set_speed(s))
            pace.addAction(a)
        self.pace_menu = pace
        self.voice_mode_action.setToolTip(BARGE_IN_HINT)

    def _action(self, text: str, slot, shortcut: str | None, name: str, *, checkable: bool = False) -> QAction:
        action = QAction(text, self.window)
        action.setObjectName(name)
        action.setCheckable(checkable)
        if shortcut:
            action.setShortcut(QKeySequence(shortcut))
        (action.toggled if checkable else action.triggered).connect(slot)
        self.window.addAction(action)
        return action

    # -- dictation ------------------------------------------------------------------------

    def toggle_dictation(self) -> None:
        self.mic.toggle_dictation()

    def _start_dictation(self) -> None:
        self.reader.stop()
        self.dictation.start()

    def _listening(self, on: bool) -> None:
        if on:
            self.panel.say("Listening…")

    def _heard(self, text: str) -> None:
        composer = self.window.composer
        if not text:
            self.panel.say("Nothing was heard.") if not self._voice_mode else self.panel.hide()
            if self._voice_mode:
                self.dictation.start()  # voice mode keeps listening
            return
        self.panel.hide()
        typed = composer.edit.toPlainText().strip()
        composer.set_text(f"{typed} {text}".strip() if typed else text)
        if self._voice_mode and composer.ready:
            composer.send_button.click()
        else:
            composer.edit.setFocus()
            cursor = composer.edit.textCursor()
            cursor.movePosition(cursor.MoveOperation.End)
            composer.edit.setTextCursor(cursor)

    def _heard_with(self, heard: Heard) -> None:
        """The language heard, and the sound when the user keeps it (saved once the question is sent)."""
        self.language = heard.language
        if heard.language != "en":
            self.window.statusBar().showMessage(f"Heard in {heard.language}", 5000)
        self._kept_audio = heard if self.choices.keep_audio else None

    def _keep_audio(self, finished: Any) -> None:
        heard, self._kept_audio = self._kept_audio, None
        chat = self.window.conversations.current_id
        if heard is not None and chat is not None and self.choices.keep_audio:
            import asyncio

            self.window.tasks.run(asyncio.to_thread(self.voice.keep_audio, chat, heard.audio),
                                  what="keeping the dictated audio")

    def _notice(self, message: str) -> None:
        self.window.statusBar().showMessage(message, 10_000)

    def _failed(self, message: str) -> None:
        if not self.dictation.active:
            self.mic.show_listening(False)  # the button a click checked goes back
        self.panel.say(message)
        self.window.statusBar().showMessage(message, 15_000)
        if self._voice_mode:
            self.voice_mode_action.setChecked(False)

    # -- reading aloud -----------------------------------------------------------------------

    def read_last_answer(self) -> None:
        widget = self.window.chat.last_answer()
        if widget is not None and widget.text().strip():
            self.read_text(widget.text())

    def read_text(self, text: str) -> None:
        self.dictation.cancel()
        self.reader.speak(text)

    def stop_reading(self) -> None:
        self.reader.stop()

    def set_speed(self, speed: float) -> None:
        self.reader.speed = speed
        for a in self.pace_menu.actions():
            a.setChecked(a.text() == f"{speed:g}×")

    def _speaking(self, on: bool) -> None:
        if on and self._voice_mode:
            self.barge_in.start(transcribe=False, no_speech_timeout=3600.0, echo_guard=not self.choices.headphones)
        elif not on:
            self.barge_in.cancel()
            self.pause_action.setChecked(False)
            if self._voice_mode and not self.dictation.active:
                self.dictation.start()  # the answer was read: the next question

    def _barged_in(self) -> None:
        """The user spoke over Wren: it stops and listens."""
        self.barge_in.cancel()
        self.reader.stop()

    # -- voice mode --------------------------------------------------------------------------

    def set_voice_mode(self, on: bool) -> None:
        self._voice_mode = on
        if on:
            self.reader.stop()
            self.dictation.start()
            self.window.statusBar().showMessage(f"Voice mode: speak; Wren answers aloud. Ctrl+Shift+V ends it. "
                                                f"{BARGE_IN_HINT}", 15_000)
        else:
            self.dictation.cancel()
            self.barge_in.cancel()
            self.reader.stop()
            self.panel.hide()

    def _answer_piece(self, conversation_id: Any, text: str) -> None:
        """Voice mode reads the answer sentence by sentence while it streams."""
        if not self._voice_mode or conversation_id != self.window.conversations.current_id:
            return
        if not self._reading_answer:
            self._reading_answer = True
            self.dictation.cancel()
            self.reader.begin()
        self.reader.feed(text)

    def _answered(self, finished: Any) -> None:
        if self._reading_answer:
            self._reading_answer = False
            self.reader.end()
        elif self._voice_mode:  # an answer with no text (refused, failed): listen again
            self._speaking(False)

    def close(self) -> None:
        self.choices.close()
        self._voice_mode = False
        self.dictation.cancel()
        self.barge_in.cancel()
        self.reader.stop()
