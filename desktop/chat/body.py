"""An assistant message's body: streamed text split into prose and code segments."""

from __future__ import annotations

from PySide6.QtWidgets import QVBoxLayout, QWidget

from .blocks import (
    AppendCode,
    AppendProse,
    BlockOp,
    BlockSplitter,
    CloseCode,
    OpenCode,
    RenderProse,
    split_blocks,
)
from .segments import CodeSegment, ProseSegment


class MarkdownBody(QWidget):
    """Shows Markdown as it streams; `append` is cheap however long the message already is."""

    def __init__(self, text: str = "", parent: QWidget | None = None):
        super().__init__(parent)
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(6)
        self._parts: list[str] = []
        self._splitter = BlockSplitter()
        self._prose: ProseSegment | None = None
        self._code: CodeSegment | None = None
        self.streaming = False
        if text:
            self.set_text(text)

    def text(self) -> str:
        return "".join(self._parts)

    def segments(self) -> list[QWidget]:
        """The pieces, top to bottom: prose, code and the widgets placed between them (tool cards)."""
        items = (item.widget() for i in range(self._layout.count()) if (item := self._layout.itemAt(i)) is not None)
        return [w for w in items if w is not None]

    def code_blocks(self) -> list[CodeSegment]:
        return [w for w in self.segments() if isinstance(w, CodeSegment)]

    def set_text(self, text: str, inserts: list[tuple[int, QWidget]] | None = None) -> None:
        """Render a finished message in one go; `inserts` (offset in `text`, widget), such
        as tool-call cards, are placed between the text before and after their offset."""
        self._clear()
        self._parts = [text]
        self.streaming = False
        at = 0
        for offset, widget in sorted(inserts or (), key=lambda item: item[0]):
            offset = max(at, min(offset, len(text)))
            for op in split_blocks(text[at:offset]):
                self._apply(op)
            self._place(widget)
            at = offset
        for op in split_blocks(text[at:]):
            self._apply(op)

    def add_inline(self, widget: QWidget) -> None:
        """A widget (a tool call's card) after the text so far: the open paragraph or code
        block ends here, and text that streams in after it starts a new one."""
        if self.streaming:
            for op in self._splitter.finish():
                self._apply(op)
            self._splitter = BlockSplitter()
        self._place(widget)

    def _place(self, widget: QWidget) -> None:
        self._prose = self._code = None
        self._layout.addWidget(widget)

    def begin_stream(self) -> None:
        self._clear()
        self._splitter = BlockSplitter()
        self.streaming = True

    def append(self, text: str) -> None:
        self._parts.append(text)
        for op in self._splitter.feed(text):
            self._apply(op)

    def finish(self) -> None:
        for op in self._splitter.finish():
            self._apply(op)
        self.streaming = False
        if len(self._parts) > 1:
            self._parts = ["".join(self._parts)]

    def _clear(self) -> None:
        while (item := self._layout.takeAt(0)) is not None:
            if (widget := item.widget()) is not None:
                widget.deleteLater()
        self._parts = []
        self._prose = self._code = None

    def _prose_segment(self) -> ProseSegment:
        if self._prose is None:
            self._prose = ProseSegment(self)
            self._layout.addWidget(self._prose)
        return self._prose

    def _apply(self, op: BlockOp) -> None:
        match op:
            case AppendProse(text=text):
                self._prose_segment().append_live(text)
            case RenderProse(markdown=markdown, final=final):
                self._prose_segment().render_markdown(markdown, final)
            case OpenCode(language=language):
                self._prose = None
                self._code = CodeSegment(language, self)
                self._layout.addWidget(self._code)
            case AppendCode(text=text):
                if self._code is not None:
                    self._code.append(text)
            case CloseCode(code=code, language=language):
                if self._code is None:
                    self._prose = None
                    self._code = CodeSegment(language, self)
                    self._layout.addWidget(self._code)
                self._code.finish(code)
                self._code = None
