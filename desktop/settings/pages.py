"""Settings' pages beside a sidebar list: every page's name visible at once (eleven tabs in
a small dialog hid the last ones behind scroll arrows). Up/Down in the list changes the
page; Tab goes from the list into the page shown."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QHBoxLayout, QListWidget, QListWidgetItem, QStackedWidget, QWidget

SIDEBAR_WIDTH = 150


def first_focusable(page: QWidget) -> QWidget | None:
    """The first widget in `page` that Tab would stop on, in the page's own focus order."""
    widget = page.nextInFocusChain()
    while widget is not None and widget is not page:
        if (page.isAncestorOf(widget) and widget.isVisibleTo(page) and widget.isEnabled()
                and widget.focusPolicy() & Qt.FocusPolicy.TabFocus):
            return widget
        widget = widget.nextInFocusChain()
    return None


class SettingsPages(QWidget):
    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("settingsPages")
        self.sidebar = QListWidget()
        self.sidebar.setObjectName("settingsSidebar")
        self.sidebar.setAccessibleName("Settings pages")
        self.sidebar.setFixedWidth(SIDEBAR_WIDTH)
        self.stack = QStackedWidget()
        self.stack.setObjectName("settingsStack")
        self.sidebar.currentRowChanged.connect(self.stack.setCurrentIndex)
        self.sidebar.installEventFilter(self)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.sidebar)
        layout.addWidget(self.stack, 1)

    def add_page(self, page: QWidget, title: str) -> None:
        self.stack.addWidget(page)
        item = QListWidgetItem(title)
        item.setData(Qt.ItemDataRole.AccessibleTextRole, f"{title} settings")
        self.sidebar.addItem(item)
        if self.sidebar.currentRow() < 0:
            self.sidebar.setCurrentRow(0)

    # -- named as QTabWidget names them (Qt style), for the dialog and its tests ---------

    def count(self) -> int:
        return self.stack.count()

    def title(self, index: int) -> str:
        item = self.sidebar.item(index)
        return item.text() if item is not None else ""

    def widget(self, index: int) -> QWidget | None:
        return self.stack.widget(index)

    def indexOf(self, page: QWidget) -> int:
        return self.stack.indexOf(page)

    def currentWidget(self) -> QWidget | None:
        return self.stack.currentWidget()

    def setCurrentWidget(self, page: QWidget) -> None:
        self.setCurrentIndex(self.stack.indexOf(page))

    def setCurrentIndex(self, index: int) -> None:
        if 0 <= index < self.stack.count():
            self.sidebar.setCurrentRow(index)

    # -- Tab from the list into the page ----------------------------------------------

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if (watched is self.sidebar and event.type() == QEvent.Type.KeyPress and isinstance(event, QKeyEvent)
                and event.key() == Qt.Key.Key_Tab and not event.modifiers() & ~Qt.KeyboardModifier.KeypadModifier):
            page = self.stack.currentWidget()
            target = first_focusable(page) if page is not None else None
            if target is not None:
                target.setFocus(Qt.FocusReason.TabFocusReason)
                return True
        return super().eventFilter(watched, event)
