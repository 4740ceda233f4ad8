"""What a screen reader is told without the user moving focus: an answer's start and its
finished text (once, not token by token), errors, tool approvals, thinking. Qt hands an
announcement to the platform's accessibility bridge (AT-SPI on Linux, NSAccessibility on
macOS, UI Automation on Windows); polite ones wait for the reader to finish its sentence,
assertive ones interrupt it.

And what a control with no visible label is (`say_what_it_is`): on Linux Qt names a combo box
by its current text whatever its accessible name, so a reader said only "tiny" for the
model picker; it says the control's label (AT-SPI's labelled-by relation) before it."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject
from PySide6.QtGui import QAccessible, QAccessibleAnnouncementEvent
from PySide6.QtWidgets import QLabel, QWidget

LONGEST = 4000  # characters of an answer read out at once; the rest is in the chat to read on


def announce(widget: QWidget, text: str, *, assertive: bool = False) -> None:
    text = " ".join(text.split())
    if not text:
        return
    if len(text) > LONGEST:
        text = text[:LONGEST].rsplit(" ", 1)[0] + " … The rest is in the chat."
    event = QAccessibleAnnouncementEvent(widget, text)
    event.setPoliteness(QAccessible.AnnouncementPoliteness.Assertive if assertive
                        else QAccessible.AnnouncementPoliteness.Polite)
    QAccessible.updateAccessibility(event)


def say_what_it_is(control: QWidget, name: str) -> None:
    """Name `control` (its accessible name, which macOS, Windows and Linux's spin boxes read)
    and give it a label relation: a hidden label, its buddy, beside it in whatever widget
    holds it (Qt finds a control's labels among its siblings), moved with it when it moves."""
    control.setAccessibleName(name)
    _Labeller(control, name)


class _Labeller(QObject):
    def __init__(self, control: QWidget, name: str) -> None:
        super().__init__(control)
        self.control, self.name = control, name
        self.label: QLabel | None = None
        control.installEventFilter(self)
        self._place()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() in (QEvent.Type.ParentChange, QEvent.Type.Show):
            self._place()
        return False

    def _place(self) -> None:
        holder = self.control.parentWidget()
        if holder is None:
            return
        if self.label is None:
            self.label = QLabel(self.name, holder)
            self.label.setObjectName(f"{self.control.objectName() or 'control'}Label")
            self.label.setBuddy(self.control)
        elif self.label.parentWidget() is not holder:
            self.label.setParent(holder)
        self.label.hide()  # the visible window shows what the control is some other way (its place, a tooltip)
