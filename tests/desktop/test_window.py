"""Keyboard shortcuts, object names, accessible names, the light/dark palette, close-to-tray."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QPalette
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractItemView,
    QComboBox,
    QLineEdit,
    QPlainTextEdit,
    QScrollArea,
    QWidget,
)

from wren.desktop import theme

OBJECT_NAMES = (
    "conversationList", "searchBox", "newChatButton", "chatView", "composer", "sendButton",
    "stopButton", "modelPicker", "statusBar",
)


def test_stable_object_names(open_window):
    window = open_window()
    for name in OBJECT_NAMES:
        assert window.findChild(QWidget, name) is not None, name


def test_every_control_has_an_accessible_name(open_window, send):
    window = open_window("Text and code:\n\n```sh\nls\n```")
    send(window, "hello")
    kinds = (QAbstractButton, QLineEdit, QPlainTextEdit, QComboBox, QAbstractItemView, QScrollArea)
    unnamed = []
    for widget in window.findChildren(QWidget):
        if not isinstance(widget, kinds) or not widget.isVisibleTo(window):
            continue
        name = widget.accessibleName() or (widget.text() if isinstance(widget, QAbstractButton) else "")
        if not name.strip():
            unnamed.append(f"{type(widget).__name__}#{widget.objectName()}")
    assert not unnamed, unnamed


def test_keyboard_shortcuts(open_window, send, qtbot):
    window = open_window("The answer.")
    send(window, "first question")
    assert window.conversations.current_id is not None
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)
    edit, ctrl, shift = window.composer.edit, Qt.KeyboardModifier.ControlModifier, Qt.KeyboardModifier.ShiftModifier
    edit.setFocus()

    QGuiApplication.clipboard().clear()
    qtbot.keyClick(edit, Qt.Key.Key_C, ctrl | shift)  # copy the last answer
    assert QGuiApplication.clipboard().text() == "The answer."

    qtbot.keyClick(edit, Qt.Key.Key_Up)  # in an empty composer: edit the last message
    assert window.composer.editing_id is not None and window.composer.text() == "first question"
    qtbot.keyClick(edit, Qt.Key.Key_Escape)  # nothing streams: Esc cancels the edit
    assert window.composer.editing_id is None and window.composer.text() == ""

    qtbot.keyClick(edit, Qt.Key.Key_K, ctrl)
    assert window.sidebar.search_box.hasFocus()
    qtbot.keyClick(window.sidebar.search_box, Qt.Key.Key_N, ctrl)
    assert window.conversations.current_id is None and window.chat.message_widgets() == []
    assert edit.hasFocus()
    with qtbot.waitSignal(window.settings_requested):
        qtbot.keyClick(edit, Qt.Key.Key_Comma, ctrl)


def test_the_palette_follows_dark_and_light(qapp, qtbot):
    from wren.desktop.chat.body import MarkdownBody

    before = qapp.palette()
    try:
        qapp.setPalette(theme._dark_palette())
        assert theme.is_dark()
        body = MarkdownBody("```python\nx = 1\n```")
        qtbot.addWidget(body)
        (block,) = body.code_blocks()
        assert "#272822" in block.styleSheet()  # the dark highlighting style's background
        qapp.setPalette(QPalette(qapp.style().standardPalette()))
        qtbot.waitUntil(lambda: "#272822" not in block.styleSheet())
        assert not theme.is_dark()
    finally:
        qapp.setPalette(before)


def test_close_quits_without_a_tray_and_hides_with_one(open_window, qtbot):
    window = open_window()
    window.keep_running_in_tray = True
    with qtbot.waitSignal(window.hidden_to_tray):
        window.close()
    assert not window.isVisible()
    window.show()
    window.keep_running_in_tray = False
    with qtbot.waitSignal(window.quit_requested):
        window.close()
