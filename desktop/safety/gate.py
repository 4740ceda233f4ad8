"""The check before sending: the draft is scanned with the engine's policy; a warning asks
"Send anyway" or "Edit", a block keeps the draft and says why, a redaction goes through and
says what was masked. The engine applies the same policy again when the message is sent.

A message that suggests the writer may hurt themselves is not a privacy question: it is
sent at once and met with care (desktop.safety.care), never with rule ids or "Send anyway"."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QTextCursor
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from wren.engine.api import Engine
from wren.engine.events import SafetyAction
from wren.engine.safety.care import is_care_category
from wren.engine.safety.scanner import Finding, ScanResult

from ..bridge import Tasks
from ..composer.composer import Composer
from .care import CarePanel
from .labels import category_phrase, finding_line

MAX_LINES = 6  # more findings than this are counted, not listed


@dataclass(frozen=True)
class Pending:
    text: str
    edit_id: int | None  # the message being edited and resent, if any
    result: ScanResult


class SafetyPanel(QFrame):
    """Above the composer: what fired, why, and what the user can do."""

    send_anyway = Signal()
    edit = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("safetyPanel")
        self.setAccessibleName("Safety check")
        self.title = QLabel()
        self.title.setObjectName("safetyTitle")
        self.title.setWordWrap(True)
        self.details = QLabel()
        self.details.setObjectName("safetyDetails")
        self.details.setWordWrap(True)
        self.send_button = QPushButton("Send anyway")
        self.send_button.setObjectName("sendAnywayButton")
        self.send_button.setAccessibleName("Send anyway")
        self.edit_button = QPushButton("Edit")
        self.edit_button.setObjectName("editDraftButton")
        self.edit_button.setAccessibleName("Edit the message")
        self.send_button.clicked.connect(self.send_anyway)
        self.edit_button.clicked.connect(self.edit)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.edit_button)
        buttons.addWidget(self.send_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        layout.addWidget(self.title)
        layout.addWidget(self.details)
        layout.addLayout(buttons)
        self.hide()

    def show_findings(self, result: ScanResult) -> None:
        blocked = result.blocked
        shown = [f for f in result.findings if f.action is not SafetyAction.ALLOW]
        if blocked:
            stops = sorted({category_phrase(f.category) for f in shown if f.action is SafetyAction.BLOCK})
            self.title.setText(f"Not sent: a safety rule blocks messages with {', '.join(stops)}. "
                               "Your text is still here to change.")
        else:
            self.title.setText("Before this is sent: Wren found something you may not want to share.")
        lines = [f"• {finding_line(f)}" for f in shown[:MAX_LINES]]
        if len(shown) > MAX_LINES:
            lines.append(f"• and {len(shown) - MAX_LINES} more")
        self.details.setText("\n".join(lines))
        self.setProperty("level", "block" if blocked else "warn")
        self.style().polish(self)
        self.send_button.setVisible(not blocked)
        self.edit_button.setText("Change it" if blocked else "Edit")
        self.show()


class SendGate(QObject):
    approved = Signal(str)  # a new message that may go to the engine
    edit_approved = Signal(object, str)  # message id, text: an edited message that may go to the engine
    checked = Signal(object)  # ScanResult of every check, whatever came of it
    said = Signal(str)  # a short line for the status bar

    def __init__(self, engine: Engine, composer: Composer, tasks: Tasks, parent: QObject | None = None):
        super().__init__(parent)
        self.engine = engine
        self.composer = composer
        self.tasks = tasks
        self.care_panel = CarePanel()
        composer.add_panel(self.care_panel)
        self.panel = SafetyPanel()
        composer.add_panel(self.panel)
        self.pending: Pending | None = None
        self.panel.send_anyway.connect(self.send_anyway)
        self.panel.edit.connect(self.edit)

    def submit(self, text: str) -> None:
        self._check(text, None)

    def submit_edit(self, message_id: int, text: str) -> None:
        self._check(text, message_id)

    def _check(self, text: str, edit_id: int | None) -> None:
        self.dismiss()
        self.composer.set_checking(True)
        self.tasks.run(self._scan(text, edit_id), what="checking the message")

    async def _scan(self, text: str, edit_id: int | None) -> None:
        try:
            result = await self.engine.safety.scan(text)
        except Exception:
            self._restore(text, edit_id)
            raise
        finally:
            self.composer.set_checking(False)
        self.checked.emit(result)
        care = [f for f in result.findings if is_care_category(f.category) and f.action is not SafetyAction.ALLOW]
        if care:
            self.show_care()
        if any(f.action is SafetyAction.BLOCK for f in care):
            # The user's own policy holds these back: the draft stays, with care, not rules.
            self._restore(text, edit_id)
            self.said.emit("Not sent: your safety settings hold such messages back. Your text is still here.")
            return
        result = _without_care(result)
        warned = any(f.action is SafetyAction.WARN for f in result.findings)
        if result.blocked or warned:
            self.pending = Pending(text, edit_id, result)
            self._restore(text, edit_id)
            self.panel.show_findings(result)
        else:
            masked = sorted({category_phrase(f.category) for f in result.findings if f.action is SafetyAction.REDACT})
            if masked:
                self.said.emit(f"Masked before sending: {', '.join(masked)}")
            self._approve(text, edit_id)

    def send_anyway(self) -> None:
        pending = self.pending
        if pending is None or pending.result.blocked:
            return
        text = self.composer.text()
        if text != pending.text:
            # Changed since the warning: the new text gets its own check.
            self._clear_draft(pending.edit_id)
            self._check(text, pending.edit_id)
            return
        self.dismiss()
        self._clear_draft(pending.edit_id)
        self._approve(text, pending.edit_id)

    def edit(self) -> None:
        """Back to the draft with the first finding selected, so it can be changed at once."""
        pending = self.pending
        self.dismiss()
        self.composer.edit.setFocus()
        if pending is None:
            return
        first = next((f for f in pending.result.findings if f.action is not SafetyAction.ALLOW), None)
        if first is not None:
            self._select(first)

    def dismiss(self) -> None:
        """The check's question is over (a new check, or the draft was sent)."""
        self.pending = None
        self.panel.hide()

    def reset(self) -> None:
        """Another chat is shown: nothing said about this one stays."""
        self.dismiss()
        self.care_panel.hide()

    def show_care(self) -> None:
        """Supportive words and where to find help, in the user's language."""
        self.care_panel.show_care(self.engine.safety.care_message())

    def _select(self, finding: Finding) -> None:
        edit = self.composer.edit
        start, end = finding.span
        if end <= len(edit.toPlainText()):
            cursor = edit.textCursor()
            cursor.setPosition(start)
            cursor.setPosition(end, QTextCursor.MoveMode.KeepAnchor)
            edit.setTextCursor(cursor)

    def _restore(self, text: str, edit_id: int | None) -> None:
        if self.composer.text():
            return  # the user already typed something new; never overwrite it
        if edit_id is not None:
            self.composer.begin_edit(edit_id, text)
        else:
            self.composer.set_text(text)

    def _clear_draft(self, edit_id: int | None) -> None:
        if edit_id is not None:
            self.composer.cancel_edit()
        else:
            self.composer.clear()

    def _approve(self, text: str, edit_id: int | None) -> None:
        if edit_id is not None:
            self.edit_approved.emit(edit_id, text)
        else:
            self.approved.emit(text)


def _without_care(result: ScanResult) -> ScanResult:
    """The scan as the privacy check sees it: care findings are answered with care instead."""
    findings = tuple(f for f in result.findings if not is_care_category(f.category))
    action = next((a for a in (SafetyAction.BLOCK, SafetyAction.REDACT, SafetyAction.WARN)
                   if any(f.action is a for f in findings)), SafetyAction.ALLOW)
    return ScanResult(findings, action, result.redacted_text)
