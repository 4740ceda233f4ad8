"""The quick prompt: a small always-on-top box that answers in place, then hands over."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QGuiApplication, QKeyEvent
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from wren.engine.api import Engine
from wren.engine.errors import WrenError
from wren.engine.events import Finished, FinishReason
from wren.engine.safety.care import needs_care

from ..a11y import announce
from ..bridge import Tasks, TurnStream, describe_notices
from ..chat.body import MarkdownBody

ANSWER_MAX_HEIGHT = 360


class QuickPrompt(QWidget):
    open_requested = Signal(int)  # continue this conversation in the main window
    conversation_changed = Signal(int)  # a turn was stored; the sidebar may want to know
    turn_finished = Signal(object)  # Finished

    def __init__(self, engine: Engine, tasks: Tasks, parent: QWidget | None = None):
        super().__init__(parent, Qt.WindowType.Tool | Qt.WindowType.FramelessWindowHint | Qt.WindowType.WindowStaysOnTopHint)
        self.setObjectName("quickPrompt")
        self.setAccessibleName("Quick prompt")
        self.setWindowTitle("Wren quick prompt")
        self._spoken: list[str] = []  # the answer's text as it streamed, announced once whole
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self.engine = engine
        self.tasks = tasks
        self.conversation_id: int | None = None
        self.stream: TurnStream | None = None
        self._ready = False
        self._loading = True  # a model is on its way: a question waits for it
        self.queued: str | None = None  # asked while the model loaded; sent once it is ready

        self.input = QLineEdit()
        self.input.setObjectName("quickPromptInput")
        self.input.setAccessibleName("Ask Wren")
        self.input.setPlaceholderText("Ask Wren…")
        self.answer = MarkdownBody()
        self.answer.setObjectName("quickPromptAnswer")
        self.answer.setAccessibleName("Answer")
        self.answer_area = QScrollArea()
        self.answer_area.setWidgetResizable(True)
        self.answer_area.setFrameShape(QFrame.Shape.NoFrame)
        self.answer_area.setAccessibleName("Answer, scrollable")
        self.answer_area.setWidget(self.answer)
        self.answer_area.setMaximumHeight(ANSWER_MAX_HEIGHT)
        self.answer_area.hide()
        self.status = QLabel()
        self.status.setObjectName("quickPromptStatus")
        self.status.setAccessibleName("Quick prompt status")
        self.status.setWordWrap(True)
        self.status.setOpenExternalLinks(True)
        self.open_button = QPushButton("Open in Wren")
        self.open_button.setObjectName("quickOpenButton")
        self.open_button.setAccessibleName("Open in Wren")
        self.open_button.setToolTip("Continue this chat in the main window")
        self.open_button.setEnabled(False)
        row = QHBoxLayout()
        row.addWidget(self.status, 1)
        row.addWidget(self.open_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(14, 14, 14, 12)
        layout.setSpacing(8)
        self.input_row = QHBoxLayout()  # the box, and the microphone (desktop/voice/quick_mic.py) beside it
        self.input_row.addWidget(self.input, 1)
        layout.addLayout(self.input_row)
        layout.addWidget(self.answer_area)
        layout.addLayout(row)
        self.setFixedWidth(620)

        self.input.returnPressed.connect(self.submit)
        self.open_button.clicked.connect(self.open_in_wren)
        self.set_ready(False, "Loading the model…", loading=True)

    def set_ready(self, ready: bool, reason: str = "", *, loading: bool = False) -> None:
        """Ready to answer; or not, because a model is loading (questions wait for it) or
        because none can be loaded (the input is off and `reason` says why)."""
        self._ready = ready
        self._loading = loading and not ready
        self.input.setEnabled(ready or self._loading)
        if ready and self.queued is not None:
            text, self.queued = self.queued, None
            self._send(text)
        elif not ready and not self._loading and self.queued is not None:
            # No model is coming: the question goes back in the box, nothing is lost.
            self.input.setText(self.queued)
            self.queued = None
            self.status.setText(reason)
        elif self.queued is not None:
            self.status.setText(f"{reason} Your question is kept and answered when it is ready.")
        else:
            self.status.setText("" if ready else reason)
        if ready and self.isVisible():
            self.input.setFocus()

    def popup(self) -> None:
        """Show fresh, near the top of the screen the pointer is on, ready to type."""
        if self.stream is None:
            self.reset()
        screen = QGuiApplication.screenAt(self.cursor().pos()) or QGuiApplication.primaryScreen()
        area = screen.availableGeometry()
        self.adjustSize()
        self.move(area.center().x() - self.width() // 2, area.top() + area.height() // 5)
        self.show()
        self.raise_()
        self.activateWindow()
        self.input.setFocus()
        self.input.selectAll()

    def reset(self) -> None:
        if self.queued is not None:
            return  # a question waits for the model: showing the box again keeps it
        self.conversation_id = None
        self.input.clear()
        self.answer.set_text("")
        self.answer_area.setMinimumHeight(0)
        self.answer_area.hide()
        self.open_button.setEnabled(False)
        if self._ready:
            self.status.clear()

    def submit(self) -> None:
        text = self.input.text()
        if self.stream is not None or self.queued is not None or not text.strip():
            return
        if not self._ready:
            if self._loading:  # answered as soon as the model is loaded
                self.queued = text
                self.input.clear()
                self.input.setPlaceholderText("Waiting for the model…")
                self._show_question(text)
                self.status.setText("Wren is loading the model… Your question is kept and answered when it is ready.")
            return
        self._send(text)

    def _show_question(self, text: str) -> None:
        self.answer.set_text(f"**You asked:** {text}")
        self.answer_area.show()
        self._fit_answer()

    def _fit_answer(self) -> None:
        """The answer area as tall as its text, up to ANSWER_MAX_HEIGHT (then it scrolls): a
        scroll area's own size hint is a few lines, whatever it holds."""
        width = self.answer_area.viewport().width() or self.answer_area.width()
        wanted = self.answer.heightForWidth(width) if self.answer.hasHeightForWidth() else -1
        if wanted < 0:
            wanted = self.answer.sizeHint().height()
        self.answer_area.setMinimumHeight(min(wanted + 2 * self.answer_area.frameWidth(), ANSWER_MAX_HEIGHT))
        self.adjustSize()

    def _send(self, text: str) -> None:
        self.input.clear()
        self.input.setPlaceholderText("Ask a follow-up…")
        self.tasks.run(self._ask(text), what="quick prompt")

    async def _ask(self, text: str) -> None:
        if self.conversation_id is None:
            try:  # refused before any chat exists: no empty chat, the question comes back
                await self.engine.chat.check_question(text)
            except WrenError as exc:
                self.input.setText(text)
                self.status.setText(str(exc))
                return
            self.conversation_id = (await self.engine.conversations.create()).id
        self.status.setText("Answering…  Esc stops")
        announce(self, "Wren is answering.")
        self._spoken.clear()
        self.answer.begin_stream()
        self.answer_area.show()
        # handed to the window only once whole: "Open in Wren" mid-answer left this answer
        # running here, and the next hotkey brought back that chat instead of a fresh box
        self.open_button.setEnabled(False)
        self._fit_answer()
        stream = TurnStream(self.engine.chat.send(self.conversation_id, text), self.conversation_id, self)
        self.stream = stream
        stream.text.connect(self._append)
        stream.finished.connect(lambda fin: self.tasks.run(self._finished(stream, fin), what="quick prompt"))
        stream.start()

    def _append(self, text: str) -> None:
        self._spoken.append(text)
        self.answer.append(text)
        self._fit_answer()
        bar = self.answer_area.verticalScrollBar()
        bar.setValue(bar.maximum())

    async def _finished(self, stream: TurnStream, finished: Finished) -> None:
        self.stream = None
        self.answer.finish()
        self._fit_answer()
        self.open_button.setEnabled(True)
        if stream.failure is not None:
            self.status.setText(f"Failed: {stream.failure.error}")
        elif finished.reason is FinishReason.BLOCKED:
            self.status.setText(f"Blocked by a safety rule ({describe_notices(stream.notices)}).")
        elif finished.reason is FinishReason.CANCELLED:
            self.status.setText("Stopped.")
        elif needs_care(stream.notices):
            care = self.engine.safety.care_message()
            lines = "; ".join(h.text + (f" {h.url}" if h.url else "") for h in care.help)
            self.status.setText(f"{care.title}. {care.message} {lines}")
        else:
            self.status.setText("Enter asks a follow-up.")
        text = "".join(self._spoken).strip()
        if stream.failure is not None or finished.reason is FinishReason.BLOCKED:
            announce(self, self.status.text(), assertive=True)
        else:  # the answer once it is whole, then what Enter does next
            announce(self, f"Wren answered: {text}. {self.status.text()}" if text else self.status.text())
        self.conversation_changed.emit(stream.conversation_id)
        self.turn_finished.emit(finished)  # the engine named a new chat beside its answer (TitleUpdate)

    def open_in_wren(self) -> None:
        if self.conversation_id is not None:
            self.open_requested.emit(self.conversation_id)
            self.hide()

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() == Qt.Key.Key_Escape:
            if self.stream is not None and self.conversation_id is not None:
                self.engine.chat.stop(self.conversation_id)
            else:
                self.hide()
            return
        super().keyPressEvent(event)
