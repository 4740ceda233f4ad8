"""A one-line label that shortens its text with "…" to fit, and shows the whole of it in a
tooltip when it had to: long titles must never widen the window or push other controls out."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget

MIN_CHARS = 6  # the least a shortened label keeps, in average character widths


def elide(text: str, limit: int) -> str:
    """`text` cut to `limit` characters with "…" (for places that measure in characters,
    like a window title)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: max(1, limit - 1)].rstrip() + "…"


class ElidedLabel(QLabel):
    def __init__(self, text: str = "", parent: QWidget | None = None, *, mode: Qt.TextElideMode = Qt.TextElideMode.ElideRight):
        super().__init__(parent)
        self._full = ""
        self._mode = mode
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setText(text)

    def text(self) -> str:  # the whole text, not what fits
        return self._full

    def shown_text(self) -> str:
        return super().text()

    def setText(self, text: str) -> None:
        self._full = " ".join((text or "").split())  # one line: newlines would be cut silently
        self.setAccessibleDescription(self._full)
        self._fit()

    def is_elided(self) -> bool:
        return self.shown_text() != self._full

    def minimumSizeHint(self) -> QSize:
        hint = super().minimumSizeHint()
        return QSize(min(hint.width(), self.fontMetrics().averageCharWidth() * MIN_CHARS), hint.height())

    def sizeHint(self) -> QSize:
        margins = self.contentsMargins()
        width = self.fontMetrics().horizontalAdvance(self._full) + margins.left() + margins.right() + 2
        return QSize(width, super().sizeHint().height())

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit()

    def _fit(self) -> None:
        margins = self.contentsMargins()
        width = max(0, self.width() - margins.left() - margins.right())
        QLabel.setText(self, self.fontMetrics().elidedText(self._full, self._mode, width))
        self.setToolTip(self._full)
