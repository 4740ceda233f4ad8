"""The composer: where the user types, sends, stops, and edits a message again."""

from __future__ import annotations

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QKeyEvent, QTextCursor
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QTextEdit,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from .ghost import next_word, paint_ghost
from .tools import AttachmentBar, ToolsButton

MAX_VISIBLE_LINES = 8
# Qt lays a paragraph out as a whole: one pasted megabyte without line breaks costs over a
# second to insert and most of a second per keystroke after it. Pastes this big become an
# attachment shown as a chip and sent with the message, so the editor stays light.
LARGE_PASTE_CHARS = 20_000


class ComposerEdit(QPlainTextEdit):
    """Enter sends, Shift+Enter breaks the line, Up in an empty box edits the last message."""

    submit = Signal()
    up_on_empty = Signal()
    large_paste = Signal(str)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("composer")
        self.setAccessibleName("Message")
        self.setAccessibleDescription("Type a message. Enter sends it, Shift+Enter starts a new line.")
        self.setTabChangesFocus(True)
        self.document().documentLayout().documentSizeChanged.connect(self._fit)
        self._fit()
        # Ghost text (desktop.composer.ghost): a suggestion shown after the cursor, valid
        # only while the text is still exactly the draft it was made for.
        self.ghost_text = ""
        self.ghost_for: str | None = None

    # -- ghost text ------------------------------------------------------------------

    def cursor_at_end(self) -> bool:
        cursor = self.textCursor()
        return not cursor.hasSelection() and cursor.atEnd()

    def ghost_visible(self) -> bool:
        return bool(self.ghost_text) and self.cursor_at_end() and self.ghost_for == self.toPlainText()

    def set_ghost(self, text: str, draft: str) -> bool:
        """Show `text` after the cursor, only if the text is still `draft` (else it is
        stale and dropped). Returns whether it is shown."""
        if not text or draft != self.toPlainText() or not self.cursor_at_end() or not self.isEnabled():
            return False
        self.ghost_text, self.ghost_for = text, draft
        self.viewport().update()
        return True

    def clear_ghost(self) -> None:
        if self.ghost_text or self.ghost_for is not None:
            self.ghost_text, self.ghost_for = "", None
            self.viewport().update()

    def accept_ghost(self, whole: bool = True) -> str:
        """Insert the suggestion (or its next word) at the cursor; returns what was taken."""
        if not self.ghost_visible():
            return ""
        taken = self.ghost_text if whole else next_word(self.ghost_text)
        rest = self.ghost_text[len(taken):]
        # Set first: inserting emits contentsChanged, and the controller must see that
        # the text is still the suggestion's, so the rest stays on screen.
        self.ghost_text, self.ghost_for = rest, (self.ghost_for or "") + taken
        cursor = self.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertText(taken)
        self.setTextCursor(cursor)
        if not rest:
            self.clear_ghost()
        self.viewport().update()
        return taken

    def event(self, event) -> bool:
        # Tab always moves focus (setTabChangesFocus), a suggestion on screen or not: a
        # keyboard user leaving the box must never get text inserted. Right or End takes it.
        if event.type() == QEvent.Type.KeyPress and event.key() in (Qt.Key.Key_Tab, Qt.Key.Key_Backtab):
            self.clear_ghost()
        if (event.type() == QEvent.Type.ShortcutOverride and event.key() == Qt.Key.Key_Escape
                and self.ghost_visible()):
            event.accept()  # Esc dismisses the suggestion first, before it stops anything
            return True
        return super().event(event)

    def paintEvent(self, event) -> None:
        super().paintEvent(event)
        if self.ghost_visible():
            paint_ghost(self, self.ghost_text)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        key, mods = event.key(), event.modifiers()
        if self.ghost_text:
            if key in (Qt.Key.Key_Right, Qt.Key.Key_End) and self.ghost_visible():
                # At the end of the text these keys would move nothing: they take the
                # suggestion instead, Right and End all of it, Ctrl+Right a word.
                if not mods & ~Qt.KeyboardModifier.KeypadModifier:
                    self.accept_ghost(whole=True)
                    return
                if key == Qt.Key.Key_Right and mods == Qt.KeyboardModifier.ControlModifier:
                    self.accept_ghost(whole=False)
                    return
            if key not in _MODIFIER_KEYS:
                self.clear_ghost()  # any other key dismisses it
        if key in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            if mods & Qt.KeyboardModifier.ShiftModifier:
                # A real newline; Qt's default Shift+Enter inserts U+2028 instead.
                self.insertPlainText("\n")
            elif not mods & (Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.AltModifier):
                self.submit.emit()
            else:
                super().keyPressEvent(event)
            return
        if key == Qt.Key.Key_Up and not mods and self.document().isEmpty():
            self.up_on_empty.emit()
            return
        super().keyPressEvent(event)

    def insertFromMimeData(self, source) -> None:
        if source.hasText() and len(text := source.text()) > LARGE_PASTE_CHARS:
            self.large_paste.emit(text)
            return
        super().insertFromMimeData(source)

    def _fit(self, *_args) -> None:
        # QPlainTextEdit's document size is counted in lines, so this stays cheap for 1 MB.
        total = int(self.document().size().height())
        lines = max(1, min(MAX_VISIBLE_LINES, total))
        # Below the cap every line is visible; a bar would only flicker in and out.
        self.setVerticalScrollBarPolicy(
            Qt.ScrollBarPolicy.ScrollBarAsNeeded if total > MAX_VISIBLE_LINES else Qt.ScrollBarPolicy.ScrollBarAlwaysOff
        )
        # Frame, style-sheet padding and margins: whatever the viewport does not get.
        chrome = max(0, self.height() - self.viewport().height())
        text = lines * self.fontMetrics().lineSpacing() + 2 * int(self.document().documentMargin())
        height = text + chrome
        if height != self.height():
            self.setFixedHeight(height)

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self._fit()

    def changeEvent(self, event) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.StyleChange, QEvent.Type.FontChange):
            self._fit()


_MODIFIER_KEYS = {Qt.Key.Key_Control, Qt.Key.Key_Shift, Qt.Key.Key_Alt, Qt.Key.Key_Meta, Qt.Key.Key_AltGr}


class PastedChip(QFrame):
    """A large paste, kept out of the editor; its × removes it."""

    removed = Signal(object)

    def __init__(self, text: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("pastedChip")
        self.text = text
        lines = text.count("\n") + 1
        self.label = QLabel(f"Pasted text · {len(text):,} characters · {lines:,} lines")
        self.label.setToolTip(text[:500])
        self.remove_button = QToolButton()
        self.remove_button.setText("×")
        self.remove_button.setObjectName("removePastedButton")
        self.remove_button.setAccessibleName("Remove pasted text")
        self.remove_button.setToolTip("Remove this pasted text")
        self.remove_button.setAutoRaise(True)
        self.remove_button.clicked.connect(lambda: self.removed.emit(self))
        row = QHBoxLayout(self)
        row.setContentsMargins(8, 2, 2, 2)
        row.addWidget(self.label, 1)
        row.addWidget(self.remove_button)


class Composer(QWidget):
    submitted = Signal(str)  # a new message
    edit_submitted = Signal(object, str)  # message id (may exceed 32 bits), new text
    stop_requested = Signal()
    edit_last_requested = Signal()
    changed = Signal()  # the text to send changed (typed or pasted)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("composerPanel")
        self.edit = ComposerEdit()
        self.edit.setPlaceholderText("Message Wren")
        self.send_button = QPushButton("Send")
        self.send_button.setObjectName("sendButton")
        self.send_button.setAccessibleName("Send message")
        self.send_button.setToolTip("Send (Enter)")
        self.send_button.setDefault(False)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setObjectName("stopButton")
        self.stop_button.setAccessibleName("Stop answering")
        self.stop_button.setToolTip("Stop the answer and keep what was written (Esc)")
        self.stop_button.hide()
        self.stop_button.setEnabled(False)

        self.reason_label = QLabel()
        self.reason_label.setObjectName("composerReason")
        self.reason_label.setAccessibleName("Why the composer is not ready")
        self.reason_label.setWordWrap(True)
        self.reason_label.hide()
        self.edit_banner = QLabel("Editing your message — Enter sends it as a new branch, Esc cancels.")
        self.edit_banner.setObjectName("editBanner")
        self.edit_banner.hide()
        self.token_label = QLabel()
        self.token_label.setObjectName("tokenCount")
        self.token_label.setAccessibleName("Token count")

        row = QHBoxLayout()
        row.setSpacing(8)
        row.addWidget(self.edit, 1)
        row.addWidget(self.send_button, 0, Qt.AlignmentFlag.AlignBottom)
        row.addWidget(self.stop_button, 0, Qt.AlignmentFlag.AlignBottom)
        self._row = row
        self.tools_button = ToolsButton()  # which tools this chat may use (SendOptions.tools)
        self.attachment_bar = AttachmentBar()  # files for read_attachment (SendOptions.attachments)
        # The draft as tokens, a developer's tool, is Chat ▸ Show the draft as tokens (Ctrl+Shift+K):
        # not a button in this row, which is for writing and sending.
        foot = QHBoxLayout()
        foot.addWidget(self.tools_button)
        foot.addWidget(self.attachment_bar)
        foot.addWidget(self.reason_label, 1)
        foot.addStretch(0)
        foot.addWidget(self.token_label)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(16, 6, 16, 8)
        layout.setSpacing(4)
        self._panels = QVBoxLayout()
        layout.addLayout(self._panels)
        layout.addWidget(self.edit_banner)
        self._chips = QVBoxLayout()
        self._chips.setSpacing(2)
        layout.addLayout(self._chips)
        layout.addLayout(row)
        layout.addLayout(foot)

        self.editing_id: int | None = None
        self._sent: tuple[str, tuple[str, ...]] | None = None  # the last message sent, as written
        self._ready = False
        self._streaming = False
        self._checking = False
        self.edit.submit.connect(self._submit)
        self.send_button.clicked.connect(self._submit)
        self.stop_button.clicked.connect(self.stop_requested)
        self.edit.up_on_empty.connect(self.edit_last_requested)
        self.edit.large_paste.connect(self.attach)
        self.edit.document().contentsChanged.connect(self.changed)
        self.set_ready(False, "Loading the model…")

    @property
    def ready(self) -> bool:
        return self._ready

    def text(self) -> str:
        """What Send would send: the typed text, then any large pastes."""
        return "\n\n".join(t for t in (self.edit.toPlainText(), *self.attachments()) if t)

    def set_text(self, text: str) -> None:
        """`text` in the box. The message last sent from it, given back (refused: too long,
        say), comes back as it was written: its typed text editable, its large pastes folded
        apart (joined, the question typed under a paste disappeared into it)."""
        sent = self._sent
        if sent is not None and text == "\n\n".join(t for t in (sent[0], *sent[1]) if t):
            self.put_draft(*sent)
            return
        self.clear()
        if len(text) > LARGE_PASTE_CHARS:
            self.attach(text)
        else:
            self.edit.setPlainText(text)

    def clear(self) -> None:
        self.edit.clear()
        for chip in self._chip_widgets():
            self._remove(chip)

    def attachments(self) -> list[str]:
        return [chip.text for chip in self._chip_widgets()]

    def take_draft(self) -> tuple[str, tuple[str, ...]]:
        """What is being written, apart (the typed text, the large pastes); the box is emptied."""
        draft = self.edit.toPlainText(), tuple(self.attachments())
        self.clear()
        return draft

    def put_draft(self, typed: str, pastes: tuple[str, ...]) -> None:
        """A draft taken earlier, back as it was: its typed text editable, its pastes folded."""
        self.clear()
        self.edit.setPlainText(typed)
        for text in pastes:
            self.attach(text)
        self.edit.moveCursor(self.edit.textCursor().MoveOperation.End)

    def attach(self, text: str) -> None:
        chip = PastedChip(text)
        chip.removed.connect(self._remove)
        self._chips.addWidget(chip)
        self.changed.emit()
        self.edit.setFocus()

    def _chip_widgets(self) -> list[PastedChip]:
        items = (item.widget() for i in range(self._chips.count()) if (item := self._chips.itemAt(i)) is not None)
        return [w for w in items if isinstance(w, PastedChip)]

    def _remove(self, chip: PastedChip) -> None:
        self._chips.removeWidget(chip)
        chip.hide()
        chip.deleteLater()
        self.changed.emit()

    def set_ready(self, ready: bool, reason: str = "") -> None:
        """Whether a model is there to answer; when not, say why instead of failing on Send."""
        self._ready = ready
        self.edit.setEnabled(ready)
        self.reason_label.setText(reason)
        self.reason_label.setVisible(not ready and bool(reason))
        # the reason is in its own line: the empty box does not say it a second time
        self.edit.setPlaceholderText("Message Wren" if ready else ("" if reason else "Not ready"))
        self._update_buttons()
        if ready and self.isVisible():
            window = self.window()
            focus = window.focusWidget()
            # In a window behind another (the welcome), the box is made its focus for when it
            # comes back, unless the user is typing in another field there.
            if window.isActiveWindow() or not isinstance(focus, (QLineEdit, QPlainTextEdit, QTextEdit)):
                self.edit.setFocus()

    def add_row_widget(self, widget: QWidget) -> None:
        """A control beside Send (the microphone), before it in the tab order."""
        self._row.insertWidget(self._row.indexOf(self.send_button), widget, 0, Qt.AlignmentFlag.AlignBottom)
        QWidget.setTabOrder(self.edit, widget)
        QWidget.setTabOrder(widget, self.send_button)

    def add_panel(self, widget: QWidget) -> None:
        """A panel above the editor that belongs to the draft (the safety check)."""
        self._panels.addWidget(widget)

    def set_checking(self, checking: bool) -> None:
        """While the draft is being checked before sending, a second Enter does nothing."""
        self._checking = checking

    def set_streaming(self, streaming: bool) -> None:
        self._streaming = streaming
        self._update_buttons()

    def begin_edit(self, message_id: int, text: str) -> None:
        self.editing_id = message_id
        self.edit_banner.show()
        self.set_text(text)
        self.edit.moveCursor(self.edit.textCursor().MoveOperation.End)
        self.edit.setFocus()

    def cancel_edit(self) -> bool:
        if self.editing_id is None:
            return False
        self.editing_id = None
        self.edit_banner.hide()
        self.clear()
        return True

    def set_token_text(self, text: str, *, over: bool = False) -> None:
        self.token_label.setText(text)
        self.token_label.setProperty("over", over)
        self.token_label.style().polish(self.token_label)

    def _update_buttons(self) -> None:
        # Send and Stop swap places: focus on the one going away goes back to the text box,
        # not to wherever Qt's focus chain leads (the sidebar's first button).
        focused = self.send_button.hasFocus() or self.stop_button.hasFocus()
        self.send_button.setVisible(not self._streaming)
        self.send_button.setEnabled(self._ready and not self._streaming)
        self.stop_button.setVisible(self._streaming)
        self.stop_button.setEnabled(self._streaming)
        if focused and not (self.send_button.hasFocus() or self.stop_button.hasFocus()) and self.edit.isEnabled():
            self.edit.setFocus(Qt.FocusReason.OtherFocusReason)

    def _submit(self) -> None:
        text = self.text()
        if not self._ready or self._streaming or self._checking or not text.strip():
            return
        editing, self.editing_id = self.editing_id, None
        self.edit_banner.hide()
        self._sent = self.edit.toPlainText(), tuple(self.attachments())
        self.clear()
        if editing is not None:
            self.edit_submitted.emit(editing, text)
        else:
            self.submitted.emit(text)
