"""Focus and keyboard polish (issue 34): typed text always reaches the composer, actions give
focus back to it, chat switching and composer shortcuts, the shortcuts list, the memory
editor's keys, Send's focus ring and the mouse wheel on unfocused spin and combo boxes.
Keys only, no mouse clicks, on the real window over a scripted engine."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QWidget

from wren.desktop.settings.dialog import SettingsDialog


def _ready(window, qtbot) -> None:
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)


def _focus(widget: QWidget, qtbot, reason=Qt.FocusReason.TabFocusReason) -> None:
    widget.setFocus(reason)
    qtbot.waitUntil(widget.hasFocus)


def _type(qtbot, text: str) -> None:
    """Type where the focus is now, as a user would (the focus may move while typing)."""
    for ch in text:
        qtbot.keyClicks(QApplication.focusWidget(), ch)


# -- the memory editor ------------------------------------------------------------------


def _memory_editor(open_window, arun, qtbot):
    window = open_window()
    dialog = SettingsDialog(window.engine, window.tasks, parent=window)
    arun(dialog.load(hotkey_default="Ctrl+Alt+Space"))
    editor = dialog.memory_page.add()
    qtbot.waitUntil(editor.isVisible)
    editor.activateWindow()
    _focus(editor.edit, qtbot)
    return window, editor


def test_tab_leaves_the_memory_text_without_inserting_a_tab(open_window, arun, qtbot):
    _window, editor = _memory_editor(open_window, arun, qtbot)
    qtbot.keyClicks(editor.edit, "I like tea")
    qtbot.keyClick(editor.edit, Qt.Key.Key_Tab)
    assert editor.edit.toPlainText() == "I like tea"
    assert not editor.edit.hasFocus() and editor.isAncestorOf(QApplication.focusWidget())


def test_ctrl_enter_saves_the_memory(open_window, arun, qtbot):
    window, editor = _memory_editor(open_window, arun, qtbot)
    qtbot.keyClicks(editor.edit, "I like green tea")
    with qtbot.waitSignal(editor.saved, timeout=5000):
        qtbot.keyClick(editor.edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert [m.text for m in arun(window.engine.memories.list())] == ["I like green tea"]
    assert not editor.isVisible()


def test_alt_s_saves_the_memory(open_window, arun, qtbot):
    window, editor = _memory_editor(open_window, arun, qtbot)
    qtbot.keyClicks(editor.edit, "I cycle to work")
    with qtbot.waitSignal(editor.saved, timeout=5000):
        qtbot.keyClick(editor.edit, Qt.Key.Key_S, Qt.KeyboardModifier.AltModifier)
    assert [m.text for m in arun(window.engine.memories.list())] == ["I cycle to work"]
