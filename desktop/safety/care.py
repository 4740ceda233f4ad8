"""Care instead of a gate: when a message suggests the writer may hurt themselves, the
window sends it as usual and shows supportive words and where to find help. No rule ids,
no "Send anyway": the words come from the engine's care resource, in the user's language."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from wren.engine.safety.care import CareMessage


class CarePanel(QFrame):
    closed = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("carePanel")
        self.setAccessibleName("Support")
        self.title = QLabel()
        self.title.setObjectName("careTitle")
        self.title.setWordWrap(True)
        self.message = QLabel()
        self.message.setObjectName("careMessage")
        self.message.setWordWrap(True)
        self.help = QLabel()
        self.help.setObjectName("careHelp")
        self.help.setWordWrap(True)
        self.help.setTextFormat(Qt.TextFormat.RichText)
        self.help.setOpenExternalLinks(True)
        self.help.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
        self.close_button = QPushButton("Close")
        self.close_button.setObjectName("closeCareButton")
        self.close_button.setAccessibleName("Close this message")
        self.close_button.clicked.connect(self.dismiss)
        top = QHBoxLayout()
        top.addWidget(self.title, 1)
        top.addWidget(self.close_button, 0, Qt.AlignmentFlag.AlignTop)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 8, 12, 8)
        layout.addLayout(top)
        layout.addWidget(self.message)
        layout.addWidget(self.help)
        self.hide()

    def show_care(self, care: CareMessage) -> None:
        self.title.setText(care.title)
        self.message.setText(care.message)
        items = []
        for line in care.help:
            text = html.escape(line.text)
            if line.url:
                text = f'{text}: <a href="{html.escape(line.url, quote=True)}">{html.escape(line.url)}</a>'
            items.append(f"<li>{text}</li>")
        self.help.setText(f"<ul style='margin-left: 0; -qt-list-indent: 1;'>{''.join(items)}</ul>")
        self.setAccessibleDescription(" ".join([care.title, care.message, *(h.text for h in care.help)]))
        self.show()

    def visible_text(self) -> str:
        """Everything the panel says, as a person reads it."""
        return f"{self.title.text()}\n{self.message.text()}\n{self.help.text()}\n{self.close_button.text()}"

    def dismiss(self) -> None:
        self.hide()
        self.closed.emit()
