"""How far the model has read a long prompt, under an answer that has no text yet: a bar,
and the time left at the rate measured since reading began."""

from __future__ import annotations

import time
from collections.abc import Callable

from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QWidget


def prefill_status_text(done: int, total: int) -> str:
    """What an answer's status says while the model reads a long prompt."""
    return f"Reading your message… {done:,} / {total:,} tokens"


def time_left_text(seconds: float | None) -> str:
    """"about 40 s left", "about 3 min left"; before a rate is known, that it is being measured."""
    if seconds is None:
        return "estimating time left…"
    if seconds < 1:
        return "almost done"
    if seconds < 90:
        return f"about {round(seconds)} s left"
    return f"about {round(seconds / 60)} min left"


class ReadingRate:
    """Tokens read per second since the first report; the time left at that rate."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._first: tuple[float, int] | None = None
        self.done = 0
        self.total = 0
        self._now = 0.0

    def update(self, done: int, total: int) -> None:
        self._now = self._clock()
        if self._first is None or done < self._first[1]:
            self._first = (self._now, done)
        self.done, self.total = done, total

    def seconds_left(self) -> float | None:
        if self._first is None:
            return None
        started, first_done = self._first
        read, spent = self.done - first_done, self._now - started
        if read <= 0 or spent <= 0:
            return None
        return (self.total - self.done) / (read / spent)


class ReadingProgress(QWidget):
    """The bar and the time left; hidden except while a long prompt is read."""

    def __init__(self, parent: QWidget | None = None, clock: Callable[[], float] = time.monotonic):
        super().__init__(parent)
        self.setObjectName("readingProgress")
        self.rate = ReadingRate(clock)
        self._clock = clock
        self.bar = QProgressBar()
        self.bar.setObjectName("readingBar")
        self.bar.setAccessibleName("Reading your message")
        self.bar.setTextVisible(False)
        self.bar.setMaximumHeight(8)
        self.left_label = QLabel()
        self.left_label.setObjectName("readingTimeLeft")
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.bar, 1)
        row.addWidget(self.left_label)
        self.reading: tuple[int, int] | None = None  # (done, total) while a long prompt is read
        self.hide()

    def show_progress(self, done: int, total: int) -> None:
        self.reading = (done, total)
        self.rate.update(done, total)
        self.bar.setRange(0, max(1, total))
        self.bar.setValue(min(done, total))
        self.left_label.setText(time_left_text(self.rate.seconds_left()))
        self.setVisible(True)

    def end(self) -> bool:
        """Reading is over (the answer's text began, or it ended); True if it was shown."""
        was = self.reading is not None
        self.reading = None
        self.rate = ReadingRate(self._clock)
        self.hide()
        return was
