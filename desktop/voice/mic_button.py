"""The Mic button, in the window beside Send and in the quick prompt beside its box: checkable,
it starts or stops a Dictation when clicked and shows whether that Dictation listens (checked,
and read out as "Stop dictating" while it does)."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtWidgets import QPushButton, QWidget

from .dictation import Dictation

IDLE_NAME = "Dictate"
LISTENING_NAME = "Stop dictating"


class MicButton(QPushButton):
    """A push button like Send beside it (a tool button drew a light box in the dark palette,
    smaller and lower than Send)."""

    def __init__(self, dictation: Dictation, name: str, tooltip: str, *,
                 start: Callable[[], None] | None = None, parent: QWidget | None = None) -> None:
        """`start`: what starting dictation means here (the window stops reading aloud first;
        the quick prompt only listens while its box takes text); the Dictation's own by default."""
        super().__init__(parent)
        self.dictation = dictation
        self._start = start or dictation.start
        self.setObjectName(name)
        self.setText("Mic")
        self.setCheckable(True)
        self.setAccessibleName(IDLE_NAME)
        self.setToolTip(tooltip)
        self.toggled.connect(self._clicked)
        dictation.listening.connect(self.show_listening)

    def toggle_dictation(self) -> None:
        """Stop dictating if it listens, else start (the shortcut's and the menu's action)."""
        if self.dictation.active:
            self.dictation.stop()
        else:
            self._start()

    def show_listening(self, on: bool) -> None:
        """Checked while the Dictation listens, without that counting as a click."""
        self.blockSignals(True)
        self.setChecked(on)
        self.blockSignals(False)
        self.setAccessibleName(LISTENING_NAME if on else IDLE_NAME)

    def _clicked(self, on: bool) -> None:
        if on != self.dictation.active:
            self.toggle_dictation()
