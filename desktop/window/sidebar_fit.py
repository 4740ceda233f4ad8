"""The sidebar gives way to the chat's title in a narrow window: at 800 px a 260 px sidebar
left the title "A Gi…". At its default width it shrinks (down to its least width) until the
title has room, and grows back once the window is wide again. A width the user chose
(dragged, or restored from an earlier drag) is theirs and is kept."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QTimer
from PySide6.QtWidgets import QSplitter, QWidget

from ..sidebar.sidebar import MIN_WIDTH
from .elided import ElidedLabel

DEFAULT_WIDTH = 260  # the sidebar's width until the user drags it
TITLE_ROOM = 240  # pixels the title is given before the sidebar keeps its width (a short title needs less)


class SidebarFit(QObject):
    """Sizes the sidebar while it is at its default width; a dragged or restored width is the
    user's and left alone."""

    def __init__(self, splitter: QSplitter, sidebar: QWidget, title: ElidedLabel, parent: QObject | None = None):
        super().__init__(parent)
        self.splitter, self.sidebar, self.title = splitter, sidebar, title
        self.own = False  # the user chose the sidebar's width
        self._timer = QTimer(self, singleShot=True, interval=0)
        self._timer.timeout.connect(self.fit)
        splitter.splitterMoved.connect(lambda *_: self.chosen(splitter.sizes()[0]))
        splitter.window().installEventFilter(self)
        title.installEventFilter(self)  # the header settles after the window: fit again then

    def eventFilter(self, watched, event) -> bool:
        if event.type() == QEvent.Type.Resize and watched in (self.splitter.window(), self.title):
            self._timer.start()
        return False

    def chosen(self, width: int) -> None:
        """The sidebar's width set on purpose (dragged, or restored): the user's unless it is the default."""
        self.own = width != DEFAULT_WIDTH
        self._timer.start()

    def title_changed(self) -> None:
        self._timer.start()

    def natural_sizes(self) -> list[int]:
        """The splitter's sizes to keep: the default width while the user chose none (not what
        a narrow window took from it)."""
        sizes = self.splitter.sizes()
        if self.own or len(sizes) != 2:
            return sizes
        return [DEFAULT_WIDTH, sum(sizes) - DEFAULT_WIDTH]

    def needed(self) -> int:
        """The room the title wants: its whole text, up to TITLE_ROOM."""
        return min(TITLE_ROOM, self.title.fontMetrics().horizontalAdvance(self.title.text()) + 8)

    def fit(self) -> None:
        sizes = self.splitter.sizes()
        if self.own or len(sizes) != 2 or sum(sizes) <= 0 or not self.splitter.isVisible():
            return
        title_at_default = self.title.width() + sizes[0] - DEFAULT_WIDTH
        short = max(0, self.needed() - title_at_default)
        target = max(MIN_WIDTH, DEFAULT_WIDTH - short)
        if target != sizes[0]:
            self.splitter.setSizes([target, sum(sizes) - target])
