"""Spin boxes and combo boxes take the mouse wheel only when they have the focus: a page
scrolled with the wheel passes over them without changing a value (Top k, an MCP server's
kind). Installed once on the application, so every window and dialog is covered."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QAbstractSpinBox, QApplication, QComboBox, QWidget

_GUARDED = (QAbstractSpinBox, QComboBox)


class WheelGuard(QObject):
    """The application's event filter: guarded widgets get Qt.StrongFocus (a wheel no
    longer focuses them), and a wheel over one without focus goes on to its parents, as if
    the widget were not there."""

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:
        kind = event.type()
        if kind == QEvent.Type.Polish and isinstance(obj, _GUARDED):
            strong(obj)
        elif kind == QEvent.Type.Wheel and isinstance(obj, _GUARDED) and not obj.hasFocus():
            pass_on(obj, event)  # type: ignore[arg-type]
            return True
        return False


def strong(widget: QWidget) -> None:
    if widget.focusPolicy() == Qt.FocusPolicy.WheelFocus:
        widget.setFocusPolicy(Qt.FocusPolicy.StrongFocus)


def pass_on(widget: QWidget, event: QWheelEvent) -> None:
    """Hand `event` to `widget`'s parents in turn until one takes it (a scroll area does)."""
    at = event.position().toPoint()
    child, parent = widget, widget.parentWidget()
    while parent is not None:
        at = child.mapToParent(at)
        copy = QWheelEvent(at, event.globalPosition(), event.pixelDelta(), event.angleDelta(), event.buttons(),
                           event.modifiers(), event.phase(), event.inverted(), event.source())
        copy.setAccepted(True)
        QApplication.sendEvent(parent, copy)
        if copy.isAccepted() or parent.isWindow():
            return
        child, parent = parent, parent.parentWidget()


def install_wheel_guard(app: QApplication) -> None:
    """Once per application; widgets made before it are set to StrongFocus here."""
    if app.property("wrenWheelGuard"):
        return
    guard = WheelGuard(app)
    app.installEventFilter(guard)
    app.setProperty("wrenWheelGuard", True)
    for widget in app.allWidgets():
        if isinstance(widget, _GUARDED):
            strong(widget)
