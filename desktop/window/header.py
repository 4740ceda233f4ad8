"""The bar above the chat: its title, the model picker, and the Temporary, Models, Chat
settings and Settings buttons (the window's signals and menus drive them)."""

from __future__ import annotations

from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QToolButton, QWidget

from .elided import ElidedLabel

MODEL_PICKER_WIDTH = (120, 240)  # pixels: the least and the most the model picker takes
TEMPORARY_NOTE = (
    "Temporary chat — not saved, not in your chat list, and no memories are used or saved. "
    "It is gone when you leave it."
)


def _header_button(text: str, name: str, tip: str, *, checkable: bool = False) -> QToolButton:
    button = QToolButton()
    button.setText(text)
    button.setObjectName(name)
    button.setAccessibleName(text if name != "temporaryChatButton" else "Temporary chat")
    button.setToolTip(tip)
    button.setCheckable(checkable)
    button.setAutoRaise(True)
    return button


class ChatHeader(QWidget):
    """The title takes what room is left; a long one is cut with "…", whole in its tooltip."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("chatHeader")
        self.title_label = ElidedLabel("New chat")
        self.title_label.setObjectName("conversationTitle")
        self.title_label.setAccessibleName("Conversation title")
        self.model_picker = QComboBox()
        self.model_picker.setObjectName("modelPicker")
        self.model_picker.setAccessibleName("Model")
        self.model_picker.setToolTip("The model that answers")
        # As wide as the names, up to a limit: a longer one is cut, never widening the header.
        self.model_picker.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.model_picker.setMinimumWidth(MODEL_PICKER_WIDTH[0])
        self.model_picker.setMaximumWidth(MODEL_PICKER_WIDTH[1])
        self.temporary_button = _header_button(
            "Temporary", "temporaryChatButton", "A chat that is not saved and uses no memories (Ctrl+Shift+N)",
            checkable=True)
        self.models_button = _header_button(
            "Models", "modelsButton", "Download, import, delete models and choose the default (Ctrl+Shift+M)")
        self.chat_settings_button = _header_button(
            "Chat settings", "chatSettingsButton", "This chat's system prompt, sampling, tools and memory")
        self.settings_button = _header_button("Settings", "settingsButton", "Settings (Ctrl+,)")
        row = QHBoxLayout(self)
        row.setContentsMargins(16, 8, 12, 8)
        row.addWidget(self.title_label, 1)
        for widget in (self.model_picker, self.temporary_button, self.models_button, self.chat_settings_button,
                       self.settings_button):
            row.addWidget(widget)
        self.temporary_banner = QLabel(TEMPORARY_NOTE)
        self.temporary_banner.setObjectName("temporaryBanner")
        self.temporary_banner.setAccessibleName("This is a temporary chat")
        self.temporary_banner.setWordWrap(True)
        self.temporary_banner.hide()
