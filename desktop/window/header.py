"""The bar above the chat: its title, the model picker, and the Temporary, Models, Chat
settings and Settings buttons (the window's signals and menus drive them).

In a narrow window the buttons after the model picker would leave the title a few letters
("A Gi…" at 800 px): then they fold into one "⋯" button whose menu holds each of them, so
the title keeps its room and every action stays one key press away."""

from __future__ import annotations

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QMenu, QToolButton, QWidget

from .. import a11y
from .elided import ElidedLabel

MODEL_PICKER_WIDTH = (120, 240)  # pixels: the least and the most the model picker takes
TITLE_ROOM = 240  # pixels the title keeps before the buttons fold away (a short title needs less)
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
        a11y.say_what_it_is(self.model_picker, "Model")  # Linux reads a combo box by its choice ("tiny") alone
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
        self.more_button = _header_button("⋯", "headerMoreButton", "Temporary chat, Models, Settings and more")
        self.more_button.setAccessibleName("More")
        self.more_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.more_button.setStyleSheet("QToolButton::menu-indicator { image: none; }")
        more_menu = QMenu(self.more_button)
        more_menu.aboutToShow.connect(lambda: self._fill_more(more_menu))
        self.more_button.setMenu(more_menu)
        self.more_button.hide()
        self.folded = False
        self.row = row = QHBoxLayout(self)
        row.setContentsMargins(16, 8, 12, 8)
        row.addWidget(self.title_label, 1)
        for widget in (self.model_picker, self.temporary_button, self.models_button, self.chat_settings_button,
                       self.settings_button, self.more_button):
            row.addWidget(widget)
        self.temporary_banner = QLabel(TEMPORARY_NOTE)
        self.temporary_banner.setObjectName("temporaryBanner")
        self.temporary_banner.setAccessibleName("This is a temporary chat")
        self.temporary_banner.setWordWrap(True)
        self.temporary_banner.hide()

    def foldable(self) -> list[QToolButton]:
        """The buttons after the model picker, in their order (others, like the library's, are
        added to the row later)."""
        items = (self.row.itemAt(i) for i in range(self.row.count()))
        widgets = (item.widget() for item in items if item is not None)
        return [w for w in widgets if isinstance(w, QToolButton) and w is not self.more_button]

    def title_room(self) -> int:
        """The room the title wants: its whole text, up to TITLE_ROOM."""
        title = self.title_label
        return min(TITLE_ROOM, title.fontMetrics().horizontalAdvance(title.text()) + 8)

    def fit(self) -> None:
        """Fold the buttons into "⋯" when, shown, they would leave the title less than it wants."""
        margins = self.row.contentsMargins()
        spacing = max(0, self.row.spacing())
        picker = max(self.model_picker.minimumWidth(), min(self.model_picker.sizeHint().width(),
                                                             self.model_picker.maximumWidth()))
        buttons = sum(b.sizeHint().width() + spacing for b in self.foldable())
        room = self.width() - margins.left() - margins.right() - picker - spacing - buttons
        self.set_folded(room < self.title_room())

    def set_folded(self, folded: bool) -> None:
        if folded == self.folded:
            return
        self.folded = folded
        focused = self.focusWidget()
        for button in self.foldable():
            button.setVisible(not folded)
        self.more_button.setVisible(folded)
        if focused is not None and not focused.isVisible():  # focus never lands on a hidden button
            (self.more_button if folded else self.settings_button).setFocus()

    def _fill_more(self, menu: QMenu) -> None:
        """The folded buttons as the menu's actions, each doing what a click on it does."""
        menu.clear()
        for button in self.foldable():
            action = QAction(button.accessibleName() or button.text(), menu)
            action.setToolTip(button.toolTip())
            action.setCheckable(button.isCheckable())
            action.setChecked(button.isChecked())
            action.setEnabled(button.isEnabled())
            action.triggered.connect(button.click)
            menu.addAction(action)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self.fit()
