"""Settings → Memory: every memory, searchable, editable, deletable; memory on/off, "reference
chat history" and "suggest memories".

Changes to memories themselves are saved at once (like deleting a chat); the three switches
are saved with the dialog's Save button like every other setting."""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from wren.engine.api import Engine
from wren.engine.memory.records import MemoryInfo
from wren.engine.memory.settings import MemorySettings

from ..bridge import Tasks
from ..confirm import ask_first
from .editor import MemoryEditor
from .notes import quoted

ID_ROLE = Qt.ItemDataRole.UserRole
SEARCH_DEBOUNCE_MS = 200
_ORIGINS = {"chat": "said in a chat", "action": "“Remember this”", "suggestion": "accepted suggestion", "manual": "added by you"}


def _describe(info: MemoryInfo) -> str:
    when = info.updated_at.strftime("%Y-%m-%d %H:%M")
    used = f"used {info.times_used} time{'s' if info.times_used != 1 else ''}" if info.times_used else "not used yet"
    return f"{_ORIGINS.get(info.origin.value, info.origin.value)} · changed {when} · {used}"


class MemoryPage(QWidget):
    def __init__(self, engine: Engine, tasks: Tasks, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("memoryPage")
        self.engine = engine
        self.tasks = tasks
        self.editor: MemoryEditor | None = None
        self.confirm_box: QMessageBox | None = None
        self._loaded = MemorySettings()
        self._deleted: MemoryInfo | None = None
        self._generation = 0

        self.enabled_box = QCheckBox("Use and save memories")
        self.enabled_box.setObjectName("memoryEnabled")
        self.enabled_box.setToolTip("Off: Wren neither reads nor saves memories; the ones below are kept")
        self.history_box = QCheckBox("Reference chat history (bring in relevant parts of past chats)")
        self.history_box.setObjectName("referenceHistory")
        self.suggest_box = QCheckBox("Suggest memories after a turn (nothing is saved until you accept)")
        self.suggest_box.setObjectName("suggestMemories")
        self.enabled_box.toggled.connect(self._sync_boxes)

        self.search_box = QLineEdit()
        self.search_box.setObjectName("memorySearch")
        self.search_box.setAccessibleName("Search memories")
        self.search_box.setPlaceholderText("Search memories")
        self.search_box.setClearButtonEnabled(True)
        self.list = QListWidget()
        self.list.setObjectName("memoryList")
        self.list.setAccessibleName("Memories")
        self.list.setWordWrap(True)
        self.list.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.count_label = QLabel()
        self.count_label.setObjectName("memoryCount")
        self.add_button = QPushButton("Add…")
        self.add_button.setObjectName("addMemoryButton")
        self.add_button.setAccessibleName("Add a memory")
        self.edit_button = QPushButton("Edit…")
        self.edit_button.setObjectName("editMemoryButton")
        self.edit_button.setAccessibleName("Edit the selected memory")
        self.delete_button = QPushButton("Delete")
        self.delete_button.setObjectName("deleteMemoryButton")
        self.delete_button.setAccessibleName("Delete the selected memory")
        self.clear_button = QPushButton("Clear all…")
        self.clear_button.setObjectName("clearMemoriesButton")
        self.clear_button.setAccessibleName("Delete every memory")

        self.undo_bar = QFrame()
        self.undo_bar.setObjectName("memoryUndoBar")
        self.undo_label = QLabel()
        self.undo_label.setWordWrap(True)
        self.undo_button = QPushButton("Undo")
        self.undo_button.setObjectName("undoMemoryDeleteButton")
        self.undo_button.setAccessibleName("Undo delete")
        bar = QHBoxLayout(self.undo_bar)
        bar.setContentsMargins(8, 2, 8, 2)
        bar.addWidget(self.undo_label, 1)
        bar.addWidget(self.undo_button)
        self.undo_bar.hide()

        buttons = QHBoxLayout()
        for b in (self.add_button, self.edit_button, self.delete_button):
            buttons.addWidget(b)
        buttons.addStretch(1)
        buttons.addWidget(self.clear_button)
        layout = QVBoxLayout(self)
        for box in (self.enabled_box, self.history_box, self.suggest_box):
            layout.addWidget(box)
        layout.addWidget(self.search_box)
        layout.addWidget(self.list, 1)
        layout.addWidget(self.count_label)
        layout.addWidget(self.undo_bar)
        layout.addLayout(buttons)

        self._search_timer = QTimer(self, singleShot=True, interval=SEARCH_DEBOUNCE_MS)
        self._search_timer.timeout.connect(self.refresh)
        self.search_box.textChanged.connect(lambda _t: self._search_timer.start())
        self.list.currentItemChanged.connect(lambda *_: self._sync_buttons())
        self.list.itemActivated.connect(lambda _item: self.edit_selected())
        self.add_button.clicked.connect(self.add)
        self.edit_button.clicked.connect(self.edit_selected)
        self.delete_button.clicked.connect(lambda: self.tasks.run(self.delete_selected(), what="deleting the memory"))
        self.clear_button.clicked.connect(self.confirm_clear)
        self.undo_button.clicked.connect(lambda: self.tasks.run(self.undo_delete(), what="restoring the memory"))
        self._sync_buttons()

    # -- load and save ----------------------------------------------------------------

    async def load(self) -> None:
        self._loaded = await self.engine.memories.settings()
        self.enabled_box.setChecked(self._loaded.enabled)
        self.history_box.setChecked(self._loaded.reference_history)
        self.suggest_box.setChecked(self._loaded.suggest)
        self._sync_boxes()
        await self.reload()

    async def save(self) -> None:
        wanted = {
            "enabled": self.enabled_box.isChecked(),
            "reference_history": self.history_box.isChecked(),
            "suggest": self.suggest_box.isChecked(),
        }
        changed = {k: v for k, v in wanted.items() if getattr(self._loaded, k) != v}
        if changed:
            self._loaded = await self.engine.memories.update_settings(**changed)

    def _sync_boxes(self) -> None:
        for box in (self.history_box, self.suggest_box):
            box.setEnabled(self.enabled_box.isChecked())

    # -- the list ---------------------------------------------------------------------

    def refresh(self) -> None:
        self.tasks.run(self.reload(), what="listing memories")

    async def reload(self, select: int | None = None) -> None:
        self._generation += 1
        generation = self._generation
        query = self.search_box.text().strip()
        memories = await self.engine.memories.list(query or None)
        if generation != self._generation:
            return  # a newer search has overtaken this one
        keep = select if select is not None else self.selected_id()
        self.list.clear()
        for info in memories:
            item = QListWidgetItem(info.text)
            item.setData(ID_ROLE, info.id)
            item.setToolTip(_describe(info))
            self.list.addItem(item)
            if info.id == keep:
                self.list.setCurrentItem(item)
        n = len(memories)
        if query:
            self.count_label.setText(f"{n:,} memor{'y' if n == 1 else 'ies'} match “{query}”.")
        else:
            self.count_label.setText(f"{n:,} memor{'y' if n == 1 else 'ies'}." if n else "No memories yet. Say “remember that …” in a chat, or press Add.")
        self._sync_buttons()

    def memory_texts(self) -> list[str]:
        return [self.list.item(i).text() for i in range(self.list.count())]

    def selected_id(self) -> int | None:
        item = self.list.currentItem()
        return item.data(ID_ROLE) if item is not None else None

    async def show_memory(self, memory_id: int) -> bool:
        """Select one memory (opened from an answer); False if it no longer exists."""
        self.search_box.blockSignals(True)
        self.search_box.clear()
        self.search_box.blockSignals(False)
        await self.reload(select=memory_id)
        found = self.selected_id() == memory_id
        if found:
            self.list.scrollToItem(self.list.currentItem())
        else:
            self.count_label.setText("That memory was deleted since.")
        return found

    def _sync_buttons(self) -> None:
        selected = self.list.currentItem() is not None
        self.edit_button.setEnabled(selected)
        self.delete_button.setEnabled(selected)
        self.clear_button.setEnabled(self.list.count() > 0 or bool(self.search_box.text()))

    # -- changes ----------------------------------------------------------------------

    def add(self) -> MemoryEditor:
        return self._edit("Add a memory", "", self.engine.memories.add)

    def edit_selected(self) -> MemoryEditor | None:
        item = self.list.currentItem()
        if item is None:
            return None
        memory_id = item.data(ID_ROLE)
        return self._edit("Edit memory", item.text(), lambda text: self.engine.memories.edit(memory_id, text))

    def _edit(self, title: str, text: str, save) -> MemoryEditor:
        self.editor = MemoryEditor(title, text, save, self.tasks, parent=self)
        self.editor.saved.connect(lambda info: self.tasks.run(self.reload(select=info.id), what="listing memories"))
        self.editor.open()
        return self.editor

    async def delete_selected(self) -> None:
        memory_id = self.selected_id()
        if memory_id is None:
            return
        self._deleted = await self.engine.memories.delete(memory_id)
        self.undo_label.setText(f"Deleted {quoted(self._deleted.text, 80)}.")
        self.undo_bar.show()
        await self.reload()

    async def undo_delete(self) -> None:
        info, self._deleted = self._deleted, None
        self.undo_bar.hide()
        if info is not None:
            restored = await self.engine.memories.restore(info)
            await self.reload(select=restored.id)

    def confirm_clear(self) -> QMessageBox:
        self.confirm_box = ask_first(
            self, "Delete every memory?",
            "Wren will forget everything it remembers about you. This cannot be undone.",
            yes="Delete all", name="clearMemoriesConfirm",
            on_yes=lambda: self.tasks.run(self.clear(), what="deleting every memory"))
        return self.confirm_box

    async def clear(self) -> int:
        count = await self.engine.memories.clear()
        self._deleted = None
        self.undo_bar.hide()
        await self.reload()
        self.count_label.setText(f"Deleted {count:,} memor{'y' if count == 1 else 'ies'}.")
        return count
