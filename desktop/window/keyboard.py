"""The window's keyboard habits: typed text always reaches the composer, focus that only
drifted onto a button goes back to it, and the list of every shortcut the window has."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt, QTimer
from PySide6.QtGui import QAction, QKeyEvent, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractItemView,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QKeySequenceEdit,
    QLineEdit,
    QPlainTextEdit,
    QTableWidget,
    QTableWidgetItem,
    QTextEdit,
    QVBoxLayout,
    QWidget,
)

# Keys the composer handles itself (desktop/composer/composer.py, ComposerEdit): no QAction
# carries them, so the shortcuts list names them from here.
COMPOSER_KEYS: tuple[tuple[str, str], ...] = (
    ("Send the message", "Enter"),
    ("New line", "Shift+Enter"),
    ("Edit the last message (empty box)", "Up"),
    ("Take the grey suggestion", "Right or End"),
    ("Take the suggestion's next word", "Ctrl+Right"),
    ("Leave the message box", "Tab"),
)
_CHORD = Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.AltModifier | Qt.KeyboardModifier.MetaModifier
_TAB_KEYS = (Qt.Key.Key_Tab, Qt.Key.Key_Backtab)
_TAB_REASONS = (Qt.FocusReason.TabFocusReason, Qt.FocusReason.BacktabFocusReason)
# focus given back when the window is activated or a popup closes: it only landed there
_LANDED = (Qt.FocusReason.ActiveWindowFocusReason, Qt.FocusReason.PopupFocusReason)


def takes_text(widget: QWidget) -> bool:
    """Whether typing into `widget` edits something of its own (it keeps its keys)."""
    if isinstance(widget, (QLineEdit, QPlainTextEdit, QTextEdit)):
        return not widget.isReadOnly()
    if isinstance(widget, QComboBox):
        return widget.isEditable()
    if isinstance(widget, QAbstractItemView):  # a list's cell being renamed in place
        return widget.state() == QAbstractItemView.State.EditingState
    return isinstance(widget, (QAbstractSpinBox, QKeySequenceEdit))


class ComposerKeys(QObject):
    """An application-wide event filter for one window.

    - A printable key pressed anywhere in the window outside a text field goes to the
      composer, character included, as in desktop chat apps: focus left on a button, the chat
      list or a message's button never swallows typing. Space is the exception on a control
      the user went to (Tab, a click): there it presses it, as keyboard users expect. On one
      where focus only landed (the window came back to the front, a popup closed, the focused
      button vanished) Space goes to the composer too.
    - Focus that Qt moved onto a button by itself (the focused button was hidden or disabled,
      as Continue and Remember are once used) goes back to the composer, so a space typed next
      presses nothing.
    """

    def __init__(self, window: QWidget, edit: QPlainTextEdit):
        super().__init__(window)
        self._window = window
        self._edit = edit
        self._tab_down = False  # a Tab key is being handled: focus moving now is the user's
        self._landed_on: QWidget | None = None  # focus came here by itself, not by the user
        app = QApplication.instance()
        assert isinstance(app, QApplication)
        self.app = app
        app.installEventFilter(self)  # a deleted filter is dropped by Qt itself

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:
        kind = event.type()
        if kind == QEvent.Type.KeyPress:
            return self._key(obj, event)  # type: ignore[arg-type]
        if kind == QEvent.Type.KeyRelease and event.key() in _TAB_KEYS:  # type: ignore[attr-defined]
            self._tab_down = False
        elif kind == QEvent.Type.FocusIn and isinstance(obj, QWidget) and self._mine(obj):
            self._focused(obj, event.reason())  # type: ignore[attr-defined]
        return False

    def _mine(self, widget: QWidget) -> bool:
        return widget.window() is self._window

    def _focused(self, widget: QWidget, reason: Qt.FocusReason) -> None:
        # Qt moved the focus on by itself because the focused widget went away: not the user's choice.
        drifted = reason in _TAB_REASONS and not self._tab_down
        self._landed_on = widget if drifted or reason in _LANDED else None
        if drifted and isinstance(widget, QAbstractButton):
            QTimer.singleShot(0, self._back_to_composer)

    def _back_to_composer(self) -> None:
        focused = QApplication.focusWidget()
        if isinstance(focused, QAbstractButton) and focused is self._landed_on:
            self.focus_composer()

    def focus_composer(self) -> bool:
        if not (self._edit.isEnabled() and self._edit.isVisible()):
            return False
        self._edit.setFocus(Qt.FocusReason.OtherFocusReason)
        return True

    def _key(self, obj: QObject, event: QKeyEvent) -> bool:
        if event.key() in _TAB_KEYS:
            self._tab_down = True
            return False
        focused = QApplication.focusWidget() or self._window
        if obj is not focused or not isinstance(obj, QWidget) or not self._mine(obj):
            return False  # a parent seeing the key again, or another window
        text = event.text()
        if (obj is self._edit or not text or not text.isprintable() or event.modifiers() & _CHORD
                or takes_text(obj)):
            return False
        if text == " " and obj is not self._landed_on:
            return False  # Space presses what the user went to (Tab, a click, the app's own choice)
        if not self.focus_composer():
            return False
        QApplication.sendEvent(self._edit, QKeyEvent(
            QEvent.Type.KeyPress, event.key(), event.modifiers(), text, event.isAutoRepeat(), event.count()))
        return True


# -- the shortcuts list ---------------------------------------------------------------------


def _plain(text: str) -> str:
    return text.replace("&&", "\0").replace("&", "").replace("\0", "&").rstrip("…").rstrip(".")


def _keys(sequences: list[QKeySequence]) -> str:
    return ", ".join(s.toString(QKeySequence.SequenceFormat.NativeText) for s in sequences if not s.isEmpty())


def chat_after(ids: list[int], current: int | None, step: int) -> int | None:
    """The chat `step` places down the list from `current` (up when negative), or None past
    either end (no wrapping). A new, unsaved chat sits above the list."""
    at = ids.index(current) + step if current in ids else (0 if step > 0 else -1)
    return ids[at] if 0 <= at < len(ids) else None


def shortcut_rows(window: QWidget) -> list[tuple[str, str]]:
    """(what, keys) for every action and shortcut of `window` that has keys, read from the
    QActions and QShortcuts themselves, then the composer's own keys."""
    rows: list[tuple[str, str]] = []
    seen: set[str] = set()
    for action in window.findChildren(QAction):
        keys = _keys(action.shortcuts())
        what = _plain(action.text())
        if keys and what and what not in seen:
            seen.add(what)
            rows.append((what, keys))
    for shortcut in window.findChildren(QShortcut):
        keys = _keys([shortcut.key()])
        what = shortcut.whatsThis() or shortcut.objectName()
        if keys and what and what not in seen:
            seen.add(what)
            rows.append((what, keys))
    return rows + [row for row in COMPOSER_KEYS if row[0] not in seen]


class ShortcutsDialog(QDialog):
    """Help → Keyboard shortcuts: built when opened, from what the window has then."""

    def __init__(self, window: QWidget):
        super().__init__(window)
        self.setObjectName("shortcutsDialog")
        self.setWindowTitle("Keyboard shortcuts")
        self.setAccessibleName("Keyboard shortcuts")
        self._rows = rows = shortcut_rows(window)
        self.table = QTableWidget(len(rows), 2)
        self.table.setObjectName("shortcutsTable")
        self.table.setAccessibleName("Keyboard shortcuts")
        self.table.setHorizontalHeaderLabels(["Action", "Keys"])
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        for row, (what, keys) in enumerate(rows):
            self.table.setItem(row, 0, QTableWidgetItem(what))
            self.table.setItem(row, 1, QTableWidgetItem(keys))
        self.table.resizeColumnsToContents()
        self.table.horizontalHeader().setStretchLastSection(True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.table, 1)
        layout.addWidget(buttons)
        self.resize(480, 520)

    def rows(self) -> list[tuple[str, str]]:
        return list(self._rows)
