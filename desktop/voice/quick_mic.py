"""The quick prompt's microphone: a Mic button beside its box and the same push-to-talk
shortcut as the window (Ctrl+Shift+Space); the words land in the box for editing, as in
the composer. Its own Dictation, on the engine's recognizer, off the GUI thread."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Qt
from PySide6.QtGui import QKeySequence, QShortcut

from .devices import AudioInput, default_input
from .dictation import Dictation
from .mic_button import MicButton

SHORTCUT = "Ctrl+Shift+Space"


class QuickMic(QObject):
    def __init__(self, quick: Any, voice: Any, *, input_factory: Callable[[str | None], AudioInput] = default_input,
                 device: Callable[[], str | None] = lambda: None) -> None:
        """`quick`: the QuickPrompt (its input box, its row for the box, its status line)."""
        super().__init__(quick)
        self.quick = quick
        self.dictation = Dictation(voice, input_factory=lambda: input_factory(device()), parent=self)
        self.mic = MicButton(self.dictation, "quickMicButton",
                             f"Dictate: speak, and the words land in the box ({SHORTCUT})", start=self._start)
        quick.input_row.addWidget(self.mic)
        self.shortcut = QShortcut(QKeySequence(SHORTCUT), quick)
        self.shortcut.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        self.shortcut.activated.connect(self.toggle)
        d = self.dictation
        d.listening.connect(self._listening)
        d.partial.connect(lambda text: quick.status.setText(f"Listening… {text}"))
        d.finished.connect(self._heard)
        d.failed.connect(quick.status.setText)

    def toggle(self) -> None:
        self.mic.toggle_dictation()

    def _start(self) -> None:
        if self.quick.input.isEnabled():
            self.dictation.start()

    def _listening(self, on: bool) -> None:
        if on:
            self.quick.status.setText("Listening…")

    def _heard(self, text: str) -> None:
        if not text:
            if not self.dictation.active and self.quick.status.text().startswith("Listening"):
                self.quick.status.setText("Nothing was heard.")
            return
        box = self.quick.input
        typed = box.text().strip()
        box.setText(f"{typed} {text}".strip() if typed else text)
        box.setFocus()
        box.end(False)
        self.quick.status.clear()

    def close(self) -> None:
        self.dictation.cancel()
