"""The status bar: model and backend, speed of the last answer, context used, load progress."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QProgressBar, QStatusBar, QWidget

from wren.engine.events import Usage

from .elided import ElidedLabel


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
        self.addWidget(self.progress)
        for label in (self.model_label, self.speed_label, self.context_label):
            label.setContentsMargins(6, 0, 6, 0)  # apart from each other, not run together
            self.addPermanentWidget(label)
        self.context_length = 0

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
