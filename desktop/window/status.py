"""The status bar: model and backend, speed of the last answer, context used, load progress,
and a mark while the offline lock is on."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from PySide6.QtCore import QRect, Qt, QTimer
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QLabel, QProgressBar, QStatusBar, QWidget

from wren.engine.events import Usage

from .elided import ElidedLabel

OFFLINE_POLL_MS = 3000  # the lock is a file any Wren process may change: read this often


class WrenStatusBar(QStatusBar):
    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("statusBar")
        self.setAccessibleName("Status")
        self.model_label = ElidedLabel("No model")  # a long model name is cut, whole in its tooltip
        self.model_label.setObjectName("modelStatus")
        self.model_label.setAccessibleName("Model and backend")
        self.speed_label = QLabel()
        self.speed_label.setObjectName("speedStatus")
        self.speed_label.setAccessibleName("Speed of the last answer")
        self.context_label = QLabel()
        self.context_label.setObjectName("contextStatus")
        self.context_label.setAccessibleName("Context used")
        self.progress = QProgressBar()
        self.progress.setObjectName("loadProgress")
        self.progress.setAccessibleName("Loading progress")
        self.progress.setMaximumWidth(140)
        self.progress.setTextVisible(False)
        self.progress.hide()
        self.offline_mark = QLabel("Offline")
        self.offline_mark.setObjectName("offlineLockMark")
        self.offline_mark.setAccessibleName("Offline lock on")
        self.offline_mark.hide()
        self._offline_poll = QTimer(self)
        self._offline_poll.setInterval(OFFLINE_POLL_MS)
        self.addWidget(self.progress)
        self.addPermanentWidget(self.offline_mark)
        for label in (self.model_label, self.speed_label, self.context_label):
            label.setContentsMargins(6, 0, 6, 0)  # apart from each other, not run together
            self.addPermanentWidget(label)
        self.context_length = 0
        self.messageChanged.connect(self.setToolTip)  # a message cut to fit is whole in the tooltip

    def message_rect(self) -> QRect:
        """Where a passing message is drawn: from the left edge to the first permanent label."""
        right = self.width()
        for widget in (self.offline_mark, self.model_label, self.speed_label, self.context_label):
            if widget.isVisible():
                right = min(right, widget.geometry().left())
        return QRect(6, 0, max(0, right - 12), self.height())

    def message_shown(self) -> str:
        """The passing message as drawn: cut with "…" to fit (Qt cut it mid-letter at the
        first label); its whole text stays in currentMessage()."""
        return self.fontMetrics().elidedText(self.currentMessage(), Qt.TextElideMode.ElideRight,
                                             self.message_rect().width())

    def paintEvent(self, event) -> None:
        if not self.currentMessage():
            super().paintEvent(event)
            return
        painter = QPainter(self)
        painter.setPen(self.palette().color(self.foregroundRole()))
        painter.drawText(self.message_rect(), Qt.AlignmentFlag.AlignLeading | Qt.AlignmentFlag.AlignVCenter
                         | Qt.TextFlag.TextSingleLine, self.message_shown())

    def show_offline_lock(self, state: Any) -> None:
        """The mark, shown while the lock (engine.network's LockState) is on, saying why."""
        on = bool(getattr(state, "on", False))
        self.offline_mark.setVisible(on)
        if on:
            why = "set by WREN_OFFLINE" if state.source == "environment" else "turned on in Settings → Privacy"
            text = f"Offline lock on ({why}): Wren refuses every connection beyond this computer"
            self.offline_mark.setToolTip(text)
            self.offline_mark.setAccessibleDescription(text)

    def stop_following(self) -> None:
        """The window closed: no more polls (a closed window's timer must not outlive its loop)."""
        self._offline_poll.stop()

    def follow_offline_lock(self, read: Callable[[], Awaitable[Any]], tasks: Any) -> None:
        """Keep the mark true: `read` (engine.network.lock_state) now and every few seconds,
        so a lock turned on by `wren privacy offline on` shows here too."""
        def poll() -> None:
            coro = read()
            try:
                tasks.run(coro, self.show_offline_lock, what="reading the offline lock")
            except RuntimeError:  # the event loop this window ran on is gone: nothing left to ask
                close = getattr(coro, "close", None)  # a coroutine never started: no "never awaited"
                if close is not None:
                    close()
                self._offline_poll.stop()

        self._offline_poll.timeout.connect(poll)
        self._offline_poll.start()
        poll()

    def show_loading(self, text: str) -> None:
        self.model_label.setText(text)
        self.progress.setRange(0, 0)  # busy: loading reports no fractions
        self.progress.show()

    def show_progress(self, done: int, total: int) -> None:
        self.progress.show()
        if total > 0:
            self.progress.setRange(0, 1000)
            self.progress.setValue(int(1000 * min(done, total) / total))
        else:
            self.progress.setRange(0, 0)

    def hide_progress(self) -> None:
        self.progress.hide()

    def show_model(self, name: str | None, backend: str | None, context_length: int) -> None:
        self.hide_progress()
        self.context_length = context_length
        self.model_label.setText(f"{name} · {backend}" if name else "No model loaded")
        if not context_length:
            self.context_label.clear()

    def show_usage(self, usage: Usage) -> None:
        self.show_speed(usage.tokens_per_second, usage.time_to_first_token)
        self.show_context(usage.prompt_tokens + usage.completion_tokens)

    def show_speed(self, tokens_per_second: float | None, ttft: float | None) -> None:
        if tokens_per_second is None and ttft is None:
            self.speed_label.clear()
            return
        parts = []
        if tokens_per_second is not None:
            parts.append(f"{tokens_per_second:.1f} tokens/s")
        if ttft is not None:
            parts.append(f"first token {ttft * 1000:.0f} ms")
        self.speed_label.setText(" · ".join(parts))

    def show_context(self, used: int | None) -> None:
        if used is None or not self.context_length:
            self.context_label.clear()
            return
        share = 100 * used / self.context_length
        self.context_label.setText(f"context {used:,} / {self.context_length:,} ({share:.0f}%)")
