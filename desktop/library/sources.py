"""An answer's sources: the library passages it cited ([1], [2] in its text), listed under
it by file name and place; clicking one (or Enter on it) opens the passage in a viewer.

The engine sends a `Citation` per cited passage after the answer's text and keeps them with
the message: an answer read back (another chat, a later start) carries them in its
MessageInfo.citations; those of an answer just given are kept here by message id until its
chat is read again.

A passage Wren tied to the answer itself (the answer quoted it, or matched it by meaning:
Citation.cited_by) carries a quiet "matched" tag after its button, with a tooltip and the
same words as the button's accessible description: the model did not cite it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

from PySide6.QtCore import QObject, Qt, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QPalette
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from wren.engine.events import Citation, CitedBy, Event, Finished

MAX_CITED_ANSWERS = 500  # answers whose sources this window remembers
MATCHED_TAG = "matched"
MATCHED_NOTE = "Wren matched this passage to the answer; the model did not cite it"


async def watch_citations(events: AsyncIterator[Event],
                          on_cited: Callable[[int, tuple[Citation, ...]], None]) -> AsyncIterator[Event]:
    """`events` unchanged; an answer's Citations are handed to `on_cited` with its message id
    when its Finished arrives (the Citations come just before it)."""
    cited: list[Citation] = []
    async for event in events:
        if isinstance(event, Citation):
            cited.append(event)
        elif isinstance(event, Finished):
            if cited and event.message_id is not None:
                on_cited(event.message_id, tuple(cited))
            cited = []
        yield event


def matched_by_wren(citation: Citation) -> bool:
    """Whether Wren tied this passage to the answer (by a quote or by meaning) rather than
    the model citing it by its [n]."""
    return citation.cited_by is not CitedBy.MARKER


def source_text(citation: Citation) -> str:
    name = Path(citation.path).name or citation.path
    return f"[{citation.number}] {name} — {citation.where}" if citation.where else f"[{citation.number}] {name}"


class SourceButton(QPushButton):
    """One source: a flat button; Enter and Return open it as Space and a click do."""

    def keyPressEvent(self, event) -> None:
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            self.click()
        else:
            super().keyPressEvent(event)


class SourcesList(QFrame):
    """"Sources" and one button per cited passage, under an answer's text."""

    opened = Signal(object)  # Citation

    def __init__(self, citations: tuple[Citation, ...], parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("answerSources")
        self.setAccessibleName("Sources")
        self.citations = citations
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 4, 0, 0)
        layout.setSpacing(2)
        heading = QLabel("Sources")
        heading.setObjectName("answerSourcesHeading")
        layout.addWidget(heading)
        self.buttons: list[SourceButton] = []
        self.tags: dict[int, QLabel] = {}  # by the index of its button: the "matched" tags
        for citation in citations:
            button = self._button(citation)
            if matched_by_wren(citation):
                layout.addWidget(self._matched_row(button, citation), 0, Qt.AlignmentFlag.AlignLeft)
            else:
                layout.addWidget(button, 0, Qt.AlignmentFlag.AlignLeft)
            self.buttons.append(button)

    def _button(self, citation: Citation) -> SourceButton:
        button = SourceButton(source_text(citation))
        button.setObjectName("answerSourceButton")
        button.setFlat(True)
        button.setCursor(Qt.CursorShape.PointingHandCursor)
        button.setAccessibleName(f"Source {source_text(citation)}")
        button.setToolTip(f"{citation.path}\nOpen the passage")
        button.setStyleSheet("text-align: left; padding: 2px 4px;")
        button.clicked.connect(lambda _=False, c=citation: self.opened.emit(c))
        return button

    def _matched_row(self, button: SourceButton, citation: Citation) -> QWidget:
        """The source's button and a quiet "matched" tag after it: the model wrote no [n]
        for this passage. A screen reader hears the same on the button itself."""
        button.setAccessibleDescription(MATCHED_NOTE)
        button.setToolTip(f"{citation.path}\nOpen the passage\n{MATCHED_NOTE}")
        tag = QLabel(MATCHED_TAG)
        tag.setObjectName("answerSourceMatched")
        tag.setToolTip(MATCHED_NOTE)
        tag.setAccessibleName(f"{MATCHED_TAG}: {MATCHED_NOTE}")
        tag.setAccessibleDescription(MATCHED_NOTE)
        tag.setForegroundRole(QPalette.ColorRole.PlaceholderText)  # quiet, and readable in each theme
        font = tag.font()
        font.setPointSizeF(max(font.pointSizeF() * 0.85, 7.0))
        tag.setFont(font)
        row = QWidget()
        row.setObjectName("answerSourceRow")
        line = QHBoxLayout(row)
        line.setContentsMargins(0, 0, 0, 0)
        line.setSpacing(4)
        line.addWidget(button)
        line.addWidget(tag, 0, Qt.AlignmentFlag.AlignVCenter)
        self.tags[len(self.buttons)] = tag
        return row


class PassageViewer(QDialog):
    """The passage an answer cited, with its file and place, and "Open file" for the file
    itself. The file opens in the system's app for it: a PDF's page or a text file's line
    cannot be asked for portably (each viewer takes its own arguments, if any), so the place
    is shown here to find."""

    def __init__(self, citation: Citation, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("passageViewer")
        self.citation = citation
        name = Path(citation.path).name or citation.path
        self.setWindowTitle(f"{name} — Wren")
        self.setAccessibleName(f"Passage from {name}")
        layout = QVBoxLayout(self)
        title = QLabel(f"<b>[{citation.number}] {name}</b>")
        title.setObjectName("passageFile")
        self.where_label = QLabel(citation.where or "")
        self.where_label.setObjectName("passageWhere")
        self.path_label = QLabel(citation.path)
        self.path_label.setObjectName("passagePath")
        self.path_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.path_label.setWordWrap(True)
        self.text = QPlainTextEdit(citation.passage)
        self.text.setObjectName("passageText")
        self.text.setAccessibleName("Passage")
        self.text.setReadOnly(True)
        exists = Path(citation.path).exists()
        self.missing = QLabel("" if exists else "The file is no longer there; this is the text the answer read.")
        self.missing.setObjectName("passageMissing")
        self.missing.setVisible(not exists)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.open_button = buttons.addButton("Open file", QDialogButtonBox.ButtonRole.ActionRole)
        self.open_button.setObjectName("openFileButton")
        self.open_button.setToolTip("Open the file in its usual app (find the place shown above)")
        self.open_button.setEnabled(exists)
        self.open_button.clicked.connect(self.open_file)
        buttons.rejected.connect(self.reject)
        for w in (title, self.where_label, self.path_label, self.text, self.missing, buttons):
            layout.addWidget(w)
        self.resize(560, 420)

    def open_file(self) -> bool:
        return QDesktopServices.openUrl(QUrl.fromLocalFile(self.citation.path))


class AnswerSources(QObject):
    """Keeps each answer's citations by message id and puts a SourcesList under the answer
    wherever the chat view shows it."""

    def __init__(self, chat, parent: QObject | None = None):
        super().__init__(parent)
        self.chat = chat
        self.cited: dict[int, tuple[Citation, ...]] = {}
        self.viewer: PassageViewer | None = None
        chat.messages_changed.connect(self.show)

    def add(self, message_id: int, citations: tuple[Citation, ...]) -> None:
        self.cited[message_id] = citations
        while len(self.cited) > MAX_CITED_ANSWERS:
            self.cited.pop(next(iter(self.cited)))
        self.show()

    def show(self) -> None:
        for widget in self.chat.message_widgets():
            citations = self.cited_by(widget)
            if citations and getattr(widget, "sources", None) is None:
                panel = SourcesList(citations)
                panel.opened.connect(self.open)
                widget.set_sources(panel)

    def cited_by(self, widget) -> tuple[Citation, ...]:
        """What the answer shown by `widget` cited: as stored with it, else as it streamed."""
        info = getattr(widget, "info", None)
        if info is not None and info.citations:
            return tuple(info.citations)
        return self.cited.get(widget.message_id, ()) if widget.message_id is not None else ()

    def open(self, citation: Citation) -> PassageViewer:
        if self.viewer is not None:  # one passage open at a time
            self.viewer.close()
            self.viewer.deleteLater()
        self.viewer = PassageViewer(citation, self.chat.window())
        self.viewer.open()
        return self.viewer
