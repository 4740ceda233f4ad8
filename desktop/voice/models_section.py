"""The Models page's voice section: the speech recognizers and reading voices Wren offers
(the starters and the voice catalog), each with its size and licence, which one is in use,
and a button to use it — downloading it first, with the same progress and checks as the
Voice menu's choice (both go through VoiceChoices)."""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from .choices import STT_KIND, VoiceChoices

KIND_HEADINGS = {STT_KIND: "Speech recognizers", "voice": "Reading voices"}


def _size(model: Any) -> str:
    return "comes with Wren" if model.starter else f"{model.size_bytes / 1e6:,.0f} MB"


class VoiceModelsSection(QWidget):
    def __init__(self, choices: VoiceChoices, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("voiceModelsSection")
        self.choices = choices
        self.buttons: dict[str, QPushButton] = {}
        self.column = QVBoxLayout(self)
        self.column.setContentsMargins(0, 8, 0, 0)
        choices.installed.connect(lambda _model: self.refresh())
        choices.notice.connect(lambda _text: self.refresh())

    def in_use(self, model: Any) -> bool:
        voice = self.choices.voice
        current = voice.stt_model if model.kind == STT_KIND else voice.voice_model
        return (current or "") == ("" if model.starter else model.id)

    def refresh(self) -> None:
        while self.column.count():
            item = self.column.takeAt(0)
            widget = item.widget() if item is not None else None
            if widget is not None:
                widget.setParent(None)
                widget.deleteLater()
        self.buttons.clear()
        heading = QLabel("Voice models")
        heading.setObjectName("modelsHeading")
        self.column.addWidget(heading)
        for kind, title in KIND_HEADINGS.items():
            label = QLabel(title)
            label.setObjectName("modelsNote")
            self.column.addWidget(label)
            for model in self.choices.voice.offered(kind):
                self.column.addWidget(self._row(model))

    def _row(self, model: Any) -> QFrame:
        row = QFrame()
        row.setObjectName("catalogModelRow")
        line = QHBoxLayout(row)
        title = QLabel(model.name)
        title.setObjectName("modelRowTitle")
        title.setToolTip(model.notes)
        details = QLabel(f"{_size(model)} · {model.license} · {model.languages}")
        details.setObjectName("modelRowDetails")
        text = QVBoxLayout()
        text.setSpacing(0)
        text.addWidget(title)
        text.addWidget(details)
        line.addLayout(text, 1)
        downloading = self.choices.downloading == model.id
        if self.in_use(model):
            label, enabled = "In use", False
        elif downloading:
            label, enabled = "Downloading…", False
        else:
            label, enabled = ("Use" if model.installed else "Download and use"), True
        button = QPushButton(label)
        button.setObjectName(f"voiceModel_{model.id}")
        button.setAccessibleName(f"{label}: {model.name}")
        button.setEnabled(enabled)
        button.clicked.connect(lambda _on=False, m=model: self._use(m))
        line.addWidget(button)
        self.buttons[model.id] = button
        return row

    def _use(self, model: Any) -> None:
        self.choices.choose_model(model)
        self.refresh()
