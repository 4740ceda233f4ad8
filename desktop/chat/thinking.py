"""A thinking model's thinking above its answer: a folded section that says "Thinking…"
while the model thinks, then "Thought for N s"; a click, Space or Enter on its header opens
it and shows the thinking's text."""

from __future__ import annotations

import time

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QLabel, QSizePolicy, QToolButton, QVBoxLayout, QWidget

LIVE_TITLE = "Thinking…"


def thought_title(seconds: float | None) -> str:
    """The folded section's title once the thinking is over."""
    if seconds is None:
        return "Thought"
    shown = max(1, round(seconds)) if seconds >= 0.5 else "<1"
    return f"Thought for {shown} s"


class _Header(QToolButton):
    """The section's header: Enter and Return open or fold it too (Space does, as for any button)."""

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            self.toggle()
            return
        super().keyPressEvent(event)


class ThinkingSection(QWidget):
    """Folded by default; `append` shows thinking as it streams, `finish` (or `show_stored`
    for a stored answer) gives its final title."""

    toggled = Signal(bool)  # opened (True) or folded

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("thinkingSection")
        self.header = _Header()
        self.header.setObjectName("thinkingHeader")
        self.header.setCheckable(True)
        self.header.setAutoRaise(True)
        self.header.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.header.setArrowType(Qt.ArrowType.RightArrow)
        self.header.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.header.toggled.connect(self._opened)
        self.text_label = QLabel()
        self.text_label.setObjectName("thinkingText")
        self.text_label.setAccessibleName("The model's thinking")
        self.text_label.setWordWrap(True)
        self.text_label.setTextFormat(Qt.TextFormat.PlainText)
        self.text_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse
                                                | Qt.TextInteractionFlag.TextSelectableByKeyboard)
        self.text_label.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
        self.text_label.hide()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.header, 0, Qt.AlignmentFlag.AlignLeft)
        layout.addWidget(self.text_label)
        self._parts: list[str] = []
        self._began: float | None = None
        self.live = False
        self._title(LIVE_TITLE)
        self.hide()

    # -- what it shows -----------------------------------------------------------------

    def text(self) -> str:
        return "".join(self._parts)

    @property
    def expanded(self) -> bool:
        return self.header.isChecked()

    def set_expanded(self, on: bool) -> None:
        self.header.setChecked(on)

    def append(self, text: str) -> None:
        """More thinking, as it streams: the section shows, folded, titled "Thinking…"."""
        if not self.live:
            self.live = True
            self._began = time.monotonic()
            self._title(LIVE_TITLE)
        self._parts.append(text)
        if self.expanded:
            self.text_label.setText(self.text().strip())
        self.show()

    def finish(self, seconds: float | None = None) -> None:
        """The thinking is over (the answer began, or the stream ended): "Thought for N s",
        from `seconds` or else the time it streamed."""
        if not self.live:
            return
        self.live = False
        if seconds is None and self._began is not None:
            seconds = time.monotonic() - self._began
        self._title(thought_title(seconds))

    def show_stored(self, reasoning: str, seconds: float | None) -> None:
        """A stored answer's thinking (none: the section hides)."""
        self.live = False
        self._parts = [reasoning] if reasoning else []
        if not reasoning:
            self.hide()
            return
        self._title(thought_title(seconds))
        self.text_label.setText(reasoning.strip())
        self.show()

    def clear(self) -> None:
        self.live = False
        self._parts = []
        self.set_expanded(False)
        self.hide()

    # -- internals ---------------------------------------------------------------------

    def _title(self, title: str) -> None:
        self.header.setText(title)
        state = "open" if self.expanded else "folded"
        self.header.setAccessibleName(f"{title} ({state})")
        self.header.setToolTip("Hide the model's thinking" if self.expanded else "Show the model's thinking")

    def _opened(self, on: bool) -> None:
        self.header.setArrowType(Qt.ArrowType.DownArrow if on else Qt.ArrowType.RightArrow)
        if on:
            self.text_label.setText(self.text().strip())
        self.text_label.setVisible(on)
        self._title(self.header.text())
        self.toggled.emit(on)
