"""What an answer was built from, and what Wren remembers: the context inspector, memory
provenance, "Remember this", and the actions on memory notices in the chat."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QMessageBox, QWidget

from wren.engine.api import Engine
from wren.engine.memory.records import MAX_MEMORY_CHARS, MemoryInfo, MemoryRefused

from ..chat.inspector import ContextInspector
from ..confirm import ask_first
from ..memory.editor import MemoryEditor
from ..memory.notes import quoted
from ..memory.provenance import ProvenanceDialog
from .seams import MemoryView, StatusLine, TaskRunner


def _sentence(text: str) -> str:
    text = text.strip().rstrip(".")
    return f"{text[:1].upper()}{text[1:]}."


class ContextController(QObject):
    remembered = Signal(object)  # MemoryInfo saved by "Remember this" or an accepted suggestion
    cleared = Signal(int)  # every memory was forgotten; how many

    memory_requested = Signal(int)  # show this memory in Settings → Memory

    def __init__(self, engine: Engine, *, chat: MemoryView, status: StatusLine, tasks: TaskRunner,
                 current_chat: Callable[[], int | None], parent: QWidget):
        """Given the chat view's memory requests and notes, the status bar, the task runner and
        the open chat's id (desktop/window/seams.py); its dialogs open over `parent`."""
        super().__init__(parent)
        self._over = parent
        self.engine = engine
        self.chat = chat
        self.status = status
        self.tasks = tasks
        self.current_chat = current_chat
        self.inspector: ContextInspector | None = None
        self.provenance: ProvenanceDialog | None = None
        self.editor: MemoryEditor | None = None
        self.confirm_box: QMessageBox | None = None
        chat.inspect_requested.connect(lambda mid: tasks.run(self.inspect(mid), what="opening the context inspector"))
        chat.provenance_requested.connect(lambda mid: tasks.run(self.show_provenance(mid), what="listing the memories used"))
        chat.remember_requested.connect(lambda mid: tasks.run(self.remember(mid), what="remembering the message"))
        chat.memory_open_requested.connect(self.memory_requested)
        chat.memory_undo_requested.connect(lambda aid, mid: tasks.run(self.undo_saved(aid, mid), what="removing the memory"))
        chat.suggestion_accepted.connect(lambda aid, text: tasks.run(self.accept(aid, text), what="saving the memory"))
        chat.clear_memories_requested.connect(self.confirm_clear)

    def _dialog_parent(self) -> QWidget:
        """The widget its dialogs open over (the window that made it)."""
        return self._over

    # -- what the model saw -------------------------------------------------------------

    async def inspect(self, message_id: int) -> ContextInspector:
        report = await self.engine.conversations.context_report(message_id)
        if self.inspector is not None:
            self.inspector.close()
        self.inspector = ContextInspector(report, self._dialog_parent())
        self.inspector.open()
        self.tasks.run(self.inspector.load_tokens(self.engine, message_id), what="showing the message's tokens")
        return self.inspector

    async def show_provenance(self, message_id: int) -> ProvenanceDialog | None:
        report = await self.engine.conversations.context_report(message_id)
        if report is None:
            return None
        if self.provenance is not None:
            self.provenance.close()
        dialog = ProvenanceDialog(self.engine, self.tasks, report, self._dialog_parent())
        dialog.open_requested.connect(self.memory_requested)
        await dialog.load()
        self.provenance = dialog
        dialog.open()
        return dialog

    async def mark_gone(self) -> None:
        """A reopened chat's "Memory saved" notices: say which memories were removed since."""
        rows = [(notes, memory_id) for w in self.chat.message_widgets() if (notes := w.notes) is not None
                for memory_id in notes.saved_rows]
        if not rows:
            return
        found = await self.engine.memories.by_id(sorted({memory_id for _, memory_id in rows}))
        for notes, memory_id in rows:
            if memory_id not in found:
                notes.mark_removed(memory_id)

    # -- remembering --------------------------------------------------------------------

    async def remember(self, message_id: int) -> MemoryInfo | None:
        try:
            info = await self.engine.memories.remember_message(message_id)
        except MemoryRefused as exc:
            # Too long to be a memory: let the user cut it down to the fact worth keeping.
            widget = self.chat.widget_for(message_id)
            text = widget.text() if widget is not None else ""
            self.editor = MemoryEditor(
                "Remember this", text[:MAX_MEMORY_CHARS], lambda t: self.engine.memories.remember_message(message_id, t),
                self.tasks, note=f"{_sentence(str(exc))} Keep the part worth remembering:", parent=self._dialog_parent(),
            )
            self.editor.saved.connect(self._saved)
            self.editor.open()
            return None
        self._saved(info)
        return info

    def _saved(self, info: MemoryInfo) -> None:
        self.status.showMessage(f"Memory saved: {quoted(info.text)}", 8000)
        self.remembered.emit(info)

    async def accept(self, answer_id: int, text: str) -> MemoryInfo:
        widget = self.chat.widget_for(answer_id)
        question = widget.info.parent_id if widget is not None and widget.info is not None else None
        info = await self.engine.memories.accept_suggestion(text, question, self.current_chat())
        if widget is not None and widget.notes is not None:
            widget.notes.mark_accepted(text, info.id)
        self._saved(info)
        return info

    async def undo_saved(self, answer_id: int, memory_id: int) -> None:
        info = await self.engine.memories.delete(memory_id)
        widget = self.chat.widget_for(answer_id)
        if widget is not None and widget.notes is not None:
            widget.notes.mark_removed(memory_id)
        self.status.showMessage(f"Memory removed: {quoted(info.text)}", 8000)

    # -- "forget everything" ---------------------------------------------------------------

    def confirm_clear(self, answer_id: int) -> QMessageBox:
        self.confirm_box = ask_first(
            self._dialog_parent(), "Forget everything?",
            "Wren will delete every memory it has about you. This cannot be undone.",
            yes="Forget everything", name="forgetEverythingConfirm",
            on_yes=lambda: self.tasks.run(self.clear(answer_id), what="forgetting everything"))
        return self.confirm_box

    async def clear(self, answer_id: int) -> int:
        count = await self.engine.memories.clear()
        widget = self.chat.widget_for(answer_id)
        if widget is not None and widget.notes is not None:
            widget.notes.mark_cleared(count)
        self.status.showMessage(f"Forgot all memories ({count:,}).", 8000)
        self.cleared.emit(count)
        return count
