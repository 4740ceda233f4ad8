"""Which memories one answer used, each openable, editable and forgettable from there.

The answer's stored report keeps a copy of each memory's text, so a memory forgotten since
still shows what it said, and the answer itself stays as it was."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from wren.engine.api import Engine
from wren.engine.context.report import ContextReport, PartKind, PartState
from wren.engine.memory.records import MemoryInfo

from ..window.seams import TaskRunner
from .editor import MemoryEditor
from .notes import quoted, tool_button


class UsedMemoryRow(QFrame):
    def __init__(self, memory_id: int, text_then: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("usedMemory")
        self.memory_id = memory_id
        self.text_then = text_then
        self.info: MemoryInfo | None = None
        self.label = QLabel(quoted(text_then))
        self.label.setObjectName("usedMemoryText")
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.open_button = tool_button("Open", "openUsedMemoryButton", "Open the memory in settings")
        self.edit_button = tool_button("Edit…", "editUsedMemoryButton", "Edit the memory")
        self.forget_button = tool_button("Forget", "forgetUsedMemoryButton", "Forget the memory")
        self.undo_button = tool_button("Undo", "undoForgetButton", "Bring the memory back")
        self.undo_button.hide()
        row = QHBoxLayout(self)
        row.setContentsMargins(6, 4, 6, 4)
        row.addWidget(self.label, 1)
        for button in (self.open_button, self.edit_button, self.forget_button, self.undo_button):
            row.addWidget(button, 0, Qt.AlignmentFlag.AlignTop)

    @property
    def exists(self) -> bool:
        return self.info is not None

    def show_memory(self, info: MemoryInfo | None) -> None:
        self.info = info
        if info is None:
            self.label.setText(f"Deleted since. It said: {quoted(self.text_then)}" if self.text_then
                               else "Deleted since. Its text was erased from this answer too.")
        elif info.text != self.text_then:
            self.label.setText(f"{quoted(info.text)}  (edited since; the answer saw {quoted(self.text_then)})")
        else:
            self.label.setText(quoted(info.text))
        self.setProperty("deleted", info is None)
        self.style().polish(self)
        for button in (self.open_button, self.edit_button, self.forget_button):
            button.setVisible(info is not None)


class ProvenanceDialog(QDialog):
    open_requested = Signal(int)  # memory id: show it in Settings → Memory
    changed = Signal()  # a memory was edited, forgotten or brought back

    def __init__(self, engine: Engine, tasks: TaskRunner, report: ContextReport, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("memoryProvenance")
        self.setWindowTitle("Memories this answer used")
        self.setAccessibleName("Memories this answer used")
        self.engine = engine
        self.tasks = tasks
        self.editor: MemoryEditor | None = None
        self.rows: dict[int, UsedMemoryRow] = {}
        self._forgotten: dict[int, MemoryInfo] = {}
        intro = QLabel("Wren put these memories into the prompt for this answer.")
        intro.setWordWrap(True)
        column = QWidget()
        self._column = QVBoxLayout(column)
        self._column.setContentsMargins(0, 0, 0, 0)
        for part in report.parts:
            if part.kind is not PartKind.MEMORY or part.state is not PartState.INCLUDED:
                continue
            for memory_id in part.source_ids:
                self._add_row(memory_id, part.text)
        self._column.addStretch(1)
        scroll = QScrollArea()
        scroll.setObjectName("usedMemories")
        scroll.setAccessibleName("Memories used")
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidget(column)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addWidget(scroll, 1)
        layout.addWidget(buttons)
        self.resize(560, 320)

    def _add_row(self, memory_id: int, text: str) -> None:
        row = UsedMemoryRow(memory_id, text)
        row.open_button.clicked.connect(lambda: self.open_requested.emit(memory_id))
        row.edit_button.clicked.connect(lambda: self.edit(memory_id))
        row.forget_button.clicked.connect(lambda: self.tasks.run(self.forget(memory_id), what="forgetting the memory"))
        row.undo_button.clicked.connect(lambda: self.tasks.run(self.undo(memory_id), what="restoring the memory"))
        self.rows[memory_id] = row
        self._column.addWidget(row)

    async def load(self) -> None:
        found = await self.engine.memories.by_id(list(self.rows))
        for memory_id, row in self.rows.items():
            row.show_memory(found.get(memory_id))

    def edit(self, memory_id: int) -> MemoryEditor | None:
        row = self.rows[memory_id]
        if row.info is None:
            return None
        self.editor = MemoryEditor(
            "Edit memory", row.info.text, lambda text: self.engine.memories.edit(memory_id, text), self.tasks, parent=self
        )
        def saved(info) -> None:
            row.show_memory(info)
            self.changed.emit()

        self.editor.saved.connect(saved)
        self.editor.open()
        return self.editor

    async def forget(self, memory_id: int) -> None:
        row = self.rows[memory_id]
        self._forgotten[memory_id] = await self.engine.memories.delete(memory_id)
        row.show_memory(None)
        row.undo_button.show()
        self.changed.emit()

    async def undo(self, memory_id: int) -> None:
        info = self._forgotten.pop(memory_id, None)
        if info is None:
            return
        row = self.rows[memory_id]
        row.show_memory(await self.engine.memories.restore(info))
        row.undo_button.hide()
        self.changed.emit()
