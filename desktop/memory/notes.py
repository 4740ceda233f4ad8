"""The small memory notices above an answer: "Memory saved", "Forgot …", refusals, the
"forget everything" confirmation, and suggested memories to accept."""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QToolButton, QVBoxLayout, QWidget

from wren.engine.events import MemoryNotice, MemoryRef

PREVIEW_CHARS = 160


QUOTE_MARKS = "\"'“”‘’«»„"


def quoted(text: str, limit: int = PREVIEW_CHARS) -> str:
    """`text` on one line in curly quotes, cut at `limit`; quotes it already has around it are
    dropped first, so it never reads “"…"”."""
    text = " ".join(text.split()).strip(QUOTE_MARKS).strip()
    if len(text) > limit:
        return f"“{text[:limit]}…”"
    return f"“{text}”"


def notice_from_meta(data: dict | None) -> MemoryNotice | None:
    """The notice an answer stored in `meta["memory"]`, so it shows again after a reload."""
    if not data:
        return None
    return MemoryNotice(
        saved=tuple(MemoryRef(int(m["id"]), m["text"]) for m in data.get("saved", ())),
        forgotten=tuple(MemoryRef(int(m["id"]), m["text"]) for m in data.get("forgotten", ())),
        refused=tuple(r.get("reason", "") for r in data.get("refused", ())),
        unmatched_forgets=tuple(data.get("unmatched_forgets", ())),
        suggestions=tuple(s["text"] for s in data.get("suggestions", ())),
        confirm_clear_all=bool(data.get("confirm_clear_all")),
        skipped=str(data.get("skipped", "")),
    )


def tool_button(text: str, name: str, accessible: str) -> QToolButton:
    button = QToolButton()
    button.setText(text)
    button.setObjectName(name)
    button.setAccessibleName(accessible)
    button.setAutoRaise(True)
    return button


class NoteRow(QFrame):
    """One line: what happened, and what the user can do about it."""

    def __init__(self, text: str, kind: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("memoryNote")
        self.setProperty("kind", kind)
        self.label = QLabel(text)
        self.label.setObjectName("memoryNoteText")
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.buttons: list[QToolButton] = []
        self._row = QHBoxLayout(self)
        self._row.setContentsMargins(8, 2, 4, 2)
        self._row.setSpacing(4)
        self._row.addWidget(self.label, 1)

    def add(self, button: QToolButton) -> QToolButton:
        self.buttons.append(button)
        self._row.addWidget(button)
        return button

    def settle(self, text: str, kind: str = "done") -> None:
        """The row's question is answered: say how, and take its buttons away."""
        self.label.setText(text)
        self.setProperty("kind", kind)
        self.style().polish(self)
        for button in self.buttons:
            button.hide()


class MemoryNotes(QWidget):
    open_requested = Signal(int)  # memory id: show it in Settings → Memory
    undo_requested = Signal(int)  # memory id: a memory saved by mistake
    clear_all_requested = Signal()  # "forget everything": confirm, then clear
    accept_requested = Signal(str)  # a suggested memory the user wants kept

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("memoryNotes")
        self.setAccessibleName("Memory notices")
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(2)
        self._facts: MemoryNotice | None = None
        self.saved_rows: dict[int, NoteRow] = {}
        self.offer_rows: dict[str, NoteRow] = {}
        self.clear_row: NoteRow | None = None
        self.hide()

    def rows(self) -> list[NoteRow]:
        items = (item.widget() for i in range(self._layout.count()) if (item := self._layout.itemAt(i)) is not None)
        return [w for w in items if isinstance(w, NoteRow)]

    def texts(self) -> list[str]:
        return [row.label.text() for row in self.rows()]

    def show_notice(self, notice: MemoryNotice | None, *, offers: bool = False) -> None:
        """What memory did with the question. Suggestions are offered only when `offers`:
        right after the turn, not again on every reload of an old chat."""
        facts = replace(notice, suggestions=()) if notice is not None else None
        if facts != self._facts:
            self._facts = facts
            self._build_facts(facts)
        if offers and notice is not None and notice.suggestions:
            self._build_offers(notice.suggestions)
        self.setVisible(bool(self.rows()))

    # -- after the user acted ---------------------------------------------------------

    def mark_removed(self, memory_id: int) -> None:
        row = self.saved_rows.get(memory_id)
        if row is not None:
            row.settle(f"Memory removed: {quoted(row.property('memoryText'))}")

    def mark_accepted(self, text: str, memory_id: int) -> None:
        row = self.offer_rows.pop(text, None)
        if row is None:
            return
        row.settle(f"Memory saved: {quoted(text)}", "saved")
        self._saved_row_actions(row, memory_id, text, undo=True)
        self.saved_rows[memory_id] = row

    def mark_cleared(self, count: int) -> None:
        if self.clear_row is not None:
            self.clear_row.settle(f"Forgot all memories ({count:,}).")

    # -- building ---------------------------------------------------------------------

    def _build_facts(self, notice: MemoryNotice | None) -> None:
        for row in self.rows():
            if row.property("role") == "fact":
                self._remove(row)
        self.saved_rows = {k: v for k, v in self.saved_rows.items() if v.property("role") != "fact"}
        self.clear_row = None
        if notice is None:
            return
        for ref in notice.saved:
            row = self._row(f"Memory saved: {quoted(ref.text)}", "saved", "fact")
            self._saved_row_actions(row, ref.id, ref.text, undo=True)
            self.saved_rows[ref.id] = row
        for ref in notice.forgotten:
            self._row(f"Forgot: {quoted(ref.text)}", "forgotten", "fact")
        for reason in notice.refused:
            self._row(f"Not saved as a memory: {reason}", "refused", "fact")
        for topic in notice.unmatched_forgets:
            self._row(f"No memory matched {quoted(topic)}; nothing was forgotten.", "refused", "fact")
        if notice.skipped and not (notice.saved or notice.forgotten or notice.refused):
            self._row(f"Memory did nothing with this message: {notice.skipped}", "refused", "fact")
        if notice.confirm_clear_all:
            row = self._row("You asked Wren to forget everything it remembers about you.", "confirm", "fact")
            button = row.add(tool_button("Forget all memories…", "forgetAllButton", "Forget all memories"))
            button.clicked.connect(self.clear_all_requested)
            self.clear_row = row

    def _build_offers(self, suggestions: tuple[str, ...]) -> None:
        for text in suggestions:
            if text in self.offer_rows:
                continue
            row = self._row(f"Remember this? {quoted(text)}", "offer", "offer")
            keep = row.add(tool_button("Remember", "acceptSuggestionButton", f"Remember {text}"))
            dismiss = row.add(tool_button("Dismiss", "dismissSuggestionButton", "Dismiss the suggestion"))
            keep.clicked.connect(lambda _=False, t=text: self.accept_requested.emit(t))
            dismiss.clicked.connect(lambda _=False, t=text, r=row: self._dismiss(t, r))
            self.offer_rows[text] = row

    def _saved_row_actions(self, row: NoteRow, memory_id: int, text: str, *, undo: bool) -> None:
        row.setProperty("memoryText", text)
        show = row.add(tool_button("Open", "openMemoryButton", "Open the memory"))
        show.setToolTip("See and edit it in Settings → Memory")
        show.clicked.connect(lambda: self.open_requested.emit(memory_id))
        if undo:
            remove = row.add(tool_button("Undo", "undoMemoryButton", "Remove the memory"))
            remove.setToolTip("Wren forgets it again")
            remove.clicked.connect(lambda: self.undo_requested.emit(memory_id))

    def _row(self, text: str, kind: str, role: str) -> NoteRow:
        row = NoteRow(text, kind, self)
        row.setProperty("role", role)
        self._layout.addWidget(row)
        return row

    def _dismiss(self, text: str, row: NoteRow) -> None:
        self.offer_rows.pop(text, None)
        self._remove(row)
        self.setVisible(bool(self.rows()))

    def _remove(self, row: NoteRow) -> None:
        self._layout.removeWidget(row)
        row.hide()
        row.deleteLater()
