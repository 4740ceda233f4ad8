"""The pieces a message body is made of: prose documents and highlighted code blocks."""

from __future__ import annotations

import math

from PySide6.QtCore import QEvent, Qt, QTimer, Signal
from PySide6.QtGui import (
    QFontDatabase,
    QGuiApplication,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextDocumentFragment,
)
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QSizePolicy, QTextBrowser, QToolButton, QVBoxLayout, QWidget

from ..theme import is_dark
from .blocks import hard_breaks
from .highlight import code_colors, code_html
from .quotes import paint_quote_bars


class AutoHeightBrowser(QTextBrowser):
    """A read-only document exactly as tall as its content, so the chat scrolls as one page."""

    def __init__(self, parent: QWidget | None = None, *, wrap: bool = True):
        super().__init__(parent)
        self._wrap = wrap
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(
            Qt.ScrollBarPolicy.ScrollBarAlwaysOff if wrap else Qt.ScrollBarPolicy.ScrollBarAsNeeded
        )
        self.setLineWrapMode(
            QTextBrowser.LineWrapMode.WidgetWidth if wrap else QTextBrowser.LineWrapMode.NoWrap
        )
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setOpenExternalLinks(True)
        # Tabbing through every paragraph of a long chat would bury the real controls.
        self.setFocusPolicy(Qt.FocusPolicy.ClickFocus)
        self.document().setDocumentMargin(2)
        self.document().documentLayout().documentSizeChanged.connect(self._fit)
        self._fit()

    def _fit(self, *_args) -> None:
        doc = self.document()
        height = math.ceil(doc.size().height()) + 2 * self.frameWidth()
        if not self._wrap and doc.idealWidth() > self.viewport().width():
            height += self.horizontalScrollBar().sizeHint().height()
        if height != self.height():
            self.setFixedHeight(height)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit()


class ProseSegment(AutoHeightBrowser):
    """Rendered Markdown followed by the line still arriving, as plain text.

    Every append goes through one QTextCursor kept at the end, so a token costs the same at
    the end of a long answer as at the start; only the current paragraph is ever re-rendered.
    """

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setAccessibleName("Message text")
        self._cursor = QTextCursor(self.document())
        self._plain = QTextCharFormat()
        # Where the paragraph being streamed begins: the end of the rendered text before it,
        # or None while it is the answer's first. Not 0 for "first": a finished paragraph
        # that is one empty block (a rule) also ends at 0.
        self._paragraph_start: int | None = None
        self._needs_block = False  # the next raw text starts below rendered text

    def paintEvent(self, event) -> None:
        super().paintEvent(event)
        paint_quote_bars(self)  # a block quote's bar (desktop/chat/quotes.py)

    def append_live(self, text: str) -> None:
        cursor = self._cursor
        cursor.movePosition(QTextCursor.MoveOperation.End)
        if self._needs_block:
            cursor.insertBlock(QTextBlockFormat(), self._plain)
            self._needs_block = False
        cursor.insertText(text, self._plain)

    def render_markdown(self, markdown: str, final: bool) -> None:
        """Replace the current paragraph's text with `markdown`, rendered."""
        doc, cursor = self.document(), self._cursor
        after = self._paragraph_start
        cursor.setPosition(after or 0)
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        if after is None:
            cursor.removeSelectedText()
        else:
            # Removing the separator after an empty block (a rule) gives that block the format
            # of the block merged into it, so the rule would turn into a plain empty line.
            before = QTextCursor(doc.findBlock(after))
            kept = before.blockFormat()
            cursor.removeSelectedText()
            before.setBlockFormat(kept)
            cursor.insertBlock(QTextBlockFormat(), self._plain)
        start, blocks = cursor.position(), doc.blockCount()
        rendered = QTextDocument()
        rendered.setMarkdown(hard_breaks(markdown))
        cursor.insertFragment(QTextDocumentFragment(rendered))
        # A fragment that begins with a list or quote opens a block of its own and leaves
        # the one it was inserted into empty; drop that, or keep the first block's format.
        # Not a list item's format: it names its list by an index into `rendered`, so the
        # block would leave the list (the first item of an answer lost its number). Qt moves
        # the list over itself: into a block of its own, or, at the document's start, into
        # the first block.
        first = doc.findBlock(start)
        if first.length() == 1 and first.next().isValid() and doc.blockCount() > blocks:
            fix = QTextCursor(doc)
            fix.setPosition(start)
            fix.deletePreviousChar() if start > 0 else fix.deleteChar()
        elif rendered.begin().textList() is None:
            QTextCursor(first).setBlockFormat(rendered.begin().blockFormat())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        if final:
            self._paragraph_start = cursor.position()
        self._needs_block = True


class PlainSegment(AutoHeightBrowser):
    """A user's message exactly as typed; huge pastes are shown in part so layout stays fast,
    and a long one (a paste) is folded to its first lines until opened (`set_folded`)."""

    SHOWN_CHARS = 20_000
    FOLD_LINES = 15  # a message longer than this (or FOLD_CHARS) is folded
    FOLD_CHARS = 3_000
    PREVIEW_LINES = 3

    fold_changed = Signal()

    def __init__(self, text: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.setAccessibleName("Message text")
        self.folded = True
        self._full = ""
        self.set_text(text)

    @property
    def lines(self) -> int:
        return self._full.count("\n") + 1

    @property
    def foldable(self) -> bool:
        return self.lines > self.FOLD_LINES or len(self._full) > self.FOLD_CHARS

    def set_folded(self, folded: bool) -> None:
        self.folded = folded
        self.set_text(self._full)

    def set_text(self, text: str) -> None:
        self._full = text
        if self.foldable and self.folded:
            head = [line[:200] for line in text.split("\n")[: self.PREVIEW_LINES]]
            self.setPlainText("\n".join(head) + "\n…")
            self.fold_changed.emit()
            return
        if len(text) > self.SHOWN_CHARS:
            hidden = len(text) - self.SHOWN_CHARS
            text = text[: self.SHOWN_CHARS] + f"\n\n[… {hidden:,} more characters; Copy takes the whole message]"
        self.setPlainText(text)
        self.fold_changed.emit()


class CodeSegment(QFrame):
    """A fenced code block: language, a Copy button, and the code (highlighted once closed)."""

    copied = Signal(str)

    def __init__(self, language: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("codeBlock")
        self.language = language
        self._code: str | None = None  # set when the block is closed
        self._dark: bool | None = None

        self._label = QLabel(language or "code")
        self._label.setObjectName("codeLanguage")
        self.copy_button = QToolButton()
        self.copy_button.setText("Copy")
        self.copy_button.setObjectName("copyCodeButton")
        self.copy_button.setAccessibleName(f"Copy {language or 'code'} block")
        self.copy_button.setToolTip("Copy this code block")
        self.copy_button.clicked.connect(self.copy)
        header = QHBoxLayout()
        header.setContentsMargins(8, 2, 4, 0)
        header.addWidget(self._label)
        header.addStretch(1)
        header.addWidget(self.copy_button)

        self.body = AutoHeightBrowser(wrap=False)
        self.body.setObjectName("codeBody")
        self.body.setAccessibleName(f"{language or 'Code'} code")
        self.body.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.body.document().setDocumentMargin(8)
        self._cursor = QTextCursor(self.body.document())
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 6)
        layout.setSpacing(0)
        layout.addLayout(header)
        layout.addWidget(self.body)
        self._apply_colors()

    @property
    def code(self) -> str:
        return self._code if self._code is not None else self.body.toPlainText()

    def append(self, text: str) -> None:
        self._cursor.movePosition(QTextCursor.MoveOperation.End)
        self._cursor.insertText(text)

    def finish(self, code: str) -> None:
        self._code = code
        self._render()

    def copy(self) -> None:
        QGuiApplication.clipboard().setText(self.code)
        self.copy_button.setText("Copied")
        QTimer.singleShot(1500, self.copy_button, lambda: self.copy_button.setText("Copy"))
        self.copied.emit(self.code)

    def _render(self) -> None:
        self.body.setHtml(code_html(self._code or "", self.language, dark=is_dark()))

    def _apply_colors(self) -> None:
        # The application's palette: this frame's own is coloured by its style sheet.
        dark = is_dark()
        if dark == self._dark:
            return
        self._dark = dark
        colors = code_colors(dark)
        # A style sheet of its own: the frame must match the highlighting style, not the app.
        self.setStyleSheet(
            f"#codeBlock {{ background: {colors.background}; border-radius: 6px; }}"
            f"#codeBody {{ background: {colors.background}; color: {colors.text}; }}"
            f"#codeLanguage {{ color: {colors.text}; }}"
        )
        if self._code is not None:
            self._render()

    def changeEvent(self, event) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            self._apply_colors()
