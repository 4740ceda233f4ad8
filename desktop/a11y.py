"""What a screen reader is told without the user moving focus: an answer's start and its
finished text (once, not token by token), errors, tool approvals, thinking. Qt hands an
announcement to the platform's accessibility bridge (AT-SPI on Linux, NSAccessibility on
macOS, UI Automation on Windows); polite ones wait for the reader to finish its sentence,
assertive ones interrupt it."""

from __future__ import annotations

from PySide6.QtGui import QAccessible, QAccessibleAnnouncementEvent
from PySide6.QtWidgets import QWidget

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
