"""The tray icon and its menu: Quick prompt, Show Wren, Quit."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction, QIcon
from PySide6.QtWidgets import QMenu, QSystemTrayIcon


class Tray(QObject):
    quick_requested = Signal()
    show_requested = Signal()
    quit_requested = Signal()

    def __init__(self, icon: QIcon, parent: QObject | None = None, *, available: bool | None = None):
        super().__init__(parent)
        self.available = QSystemTrayIcon.isSystemTrayAvailable() if available is None else available
        self.menu = QMenu()
        self.menu.setObjectName("trayMenu")
        self.quick_action = QAction("Quick prompt", self.menu)
        self.show_action = QAction("Show Wren", self.menu)
        self.quit_action = QAction("Quit", self.menu)
        self.quick_action.triggered.connect(self.quick_requested)
        self.show_action.triggered.connect(self.show_requested)
        self.quit_action.triggered.connect(self.quit_requested)
        self.menu.addAction(self.quick_action)
        self.menu.addAction(self.show_action)
        self.menu.addSeparator()
        self.menu.addAction(self.quit_action)
        self.icon: QSystemTrayIcon | None = None
        if self.available:
            self.icon = QSystemTrayIcon(icon, self)
            self.icon.setToolTip("Wren")
            self.icon.setContextMenu(self.menu)
            self.icon.activated.connect(self._activated)
            self.icon.show()

    def _activated(self, reason: QSystemTrayIcon.ActivationReason) -> None:
        if reason in (QSystemTrayIcon.ActivationReason.Trigger, QSystemTrayIcon.ActivationReason.DoubleClick):
            self.show_requested.emit()

    def say(self, title: str, text: str) -> None:
        if self.icon is not None:
            self.icon.showMessage(title, text, QSystemTrayIcon.MessageIcon.Information, 6000)

    def hide(self) -> None:
        if self.icon is not None:
            self.icon.hide()
