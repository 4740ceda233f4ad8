"""A small dialog to write or change one memory; the engine decides whether it is acceptable."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QPlainTextEdit, QVBoxLayout, QWidget

from wren.engine.errors import WrenError
from wren.engine.memory.records import MAX_MEMORY_CHARS

from ..window.seams import TaskRunner

Save = Callable[[str], Awaitable[Any]]


class MemoryEditor(QDialog):
    """Opened with `open()`, never `exec()`: a nested loop would hold up every coroutine.

    `save` is awaited with the text; a refusal (too long, empty) is shown here and the
    dialog stays open so nothing the user typed is lost."""

    saved = Signal(object)  # whatever `save` returned (a MemoryInfo)

    def __init__(self, title: str, text: str, save: Save, tasks: TaskRunner, *, note: str = "",
                 parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("memoryEditor")
        self.setWindowTitle(title)
        self.setAccessibleName(title)
        self._save = save
        self._tasks = tasks
        self.note_label = QLabel(note)
        self.note_label.setObjectName("memoryEditorNote")
        self.note_label.setWordWrap(True)
        self.note_label.setVisible(bool(note))
        self.edit = QPlainTextEdit(text)
        self.edit.setObjectName("memoryEditorText")
        self.edit.setAccessibleName("Memory text")
        self.edit.setPlaceholderText("A short fact, e.g. “I prefer metric units”")
        self.edit.setTabChangesFocus(True)  # a memory is one short fact: Tab goes on to the buttons
        self.count_label = QLabel()
        self.count_label.setObjectName("memoryEditorCount")
        self.error_label = QLabel()
        self.error_label.setObjectName("memoryEditorError")
        self.error_label.setWordWrap(True)
        self.error_label.hide()
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self.submit)
        self.buttons.rejected.connect(self.reject)
        save_button = self.buttons.button(QDialogButtonBox.StandardButton.Save)
        save_button.setToolTip("Save (Ctrl+Enter or Alt+S)")
        # Ctrl+Enter saves from the text, as in most editors; Alt+S is the button's own key,
        # set as a shortcut (not a mnemonic) so it works where mnemonics are off (macOS).
        for keys in ("Ctrl+Return", "Ctrl+Enter", "Alt+S"):
            shortcut = QShortcut(QKeySequence(keys), self, context=Qt.ShortcutContext.WindowShortcut)
            shortcut.activated.connect(self._save_by_key)
        layout = QVBoxLayout(self)
        layout.addWidget(self.note_label)
        layout.addWidget(self.edit, 1)
        layout.addWidget(self.count_label)
        layout.addWidget(self.error_label)
        layout.addWidget(self.buttons)
        self.edit.textChanged.connect(self._count)
        self._count()
        self.resize(460, 220)

    def text(self) -> str:
        return self.edit.toPlainText().strip()

    def _count(self) -> None:
        n = len(self.text())
        self.count_label.setText(f"{n:,} / {MAX_MEMORY_CHARS:,} characters")
        self.count_label.setProperty("over", n > MAX_MEMORY_CHARS)
        self.count_label.style().polish(self.count_label)

    def _save_by_key(self) -> None:
        if self.buttons.isEnabled():  # not while a save is under way
            self.submit()

    def submit(self) -> None:
        self._tasks.run(self._submit(), what="saving the memory")

    async def _submit(self) -> None:
        self.buttons.setEnabled(False)
        try:
            result = await self._save(self.text())
        except WrenError as exc:
            self.error_label.setText(str(exc))
            self.error_label.show()
            return
        finally:
            self.buttons.setEnabled(True)
        self.saved.emit(result)
        self.accept()
