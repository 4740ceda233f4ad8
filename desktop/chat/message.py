"""One message in the chat: who said it, its status, `< 2/3 >` versions, actions, body, and
for an answer its memory notices and what it was built from (memories, the whole prompt)."""

from __future__ import annotations

import time
from collections.abc import Iterator

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QBoxLayout, QFrame, QHBoxLayout, QLabel, QToolButton, QVBoxLayout, QWidget

from wren.engine.context.report import report_from_meta
from wren.engine.events import MemoryNotice, SafetyNotice, ToolApprovalNeeded, ToolCall, ToolResult
from wren.engine.records import MessageInfo, MessageStatus, Role, can_continue, cut_at_limit

from ..bridge import describe_notices
from ..memory.notes import MemoryNotes, notice_from_meta
from ..safety.labels import shown_notices
from .answer_notices import NoticesLabel
from .attachments import AttachedFiles, attached_paths
from .body import MarkdownBody
from .found import mark_terms
from .message_menu import MessageMenuButton, replay_state
from .probabilities import META_KEY as LOGPROBS_KEY
from .probabilities import TokenProbabilities
from .reading import ReadingProgress, prefill_status_text
from .segments import PlainSegment
from .thinking import ThinkingSection
from .toolcard import ToolCard

_STATUS_TEXT = {
    MessageStatus.STOPPED: "stopped",
    MessageStatus.INTERRUPTED: "interrupted — Wren closed while it was answering",
    MessageStatus.FAILED: "failed",
    MessageStatus.BLOCKED: "blocked by a safety rule",
    MessageStatus.STREAMING: "answering…",
}


MARK_SLICE_MS = 8  # underlining unsure tokens takes at most this long per event-loop turn


def _tool_button(text: str, name: str, accessible: str, tip: str) -> QToolButton:
    button = QToolButton()
    button.setText(text)
    button.setObjectName(name)
    button.setAccessibleName(accessible)
    button.setToolTip(tip)
    button.setAutoRaise(True)
    return button


class MessageWidget(QFrame):
    # Ids travel as `object`: Qt's int is 32 bits, and temporary chats' ids start at 2**40.
    edit_requested = Signal(object)
    regenerate_requested = Signal(object)
    continue_requested = Signal(object)  # an answer that was stopped, interrupted or cut: go on with it
    replay_requested = Signal(object)  # the same answer again: same model, settings and seed
    sibling_requested = Signal(object, int)  # message id, step (-1 or +1)
    copied = Signal(str)
    remember_requested = Signal(object)  # "Remember this"
    inspect_requested = Signal(object)  # "What the model saw"
    provenance_requested = Signal(object)  # the memories this answer used
    tool_decided = Signal(str, str)  # call id, "once" | "always" | "deny"
    tool_cancel_requested = Signal(str)  # call id
    tools_changed = Signal()  # a tool card was added (its buttons are new Tab stops)

    def __init__(self, role: Role, text: str = "", info: MessageInfo | None = None, parent: QWidget | None = None):
        super().__init__(parent)
        self.role = role
        self.info: MessageInfo | None = None
        self.tool_cards: dict[str, ToolCard] = {}  # call id -> its card, in the body
        self.setObjectName("userMessage" if role is Role.USER else "assistantMessage")
        self.setAccessibleName("Your message" if role is Role.USER else "Wren's answer")

        self._who = QLabel("You" if role is Role.USER else "Wren")
        self._who.setObjectName("messageAuthor")
        self.status_label = QLabel()
        self.status_label.setObjectName("messageStatus")
        self.status_label.setAccessibleName("Message status")
        self.status_label.setWordWrap(True)
        self.status_label.hide()

        self.previous_button = _tool_button("‹", "previousVersionButton", "Previous version", "Show the previous version")
        self.version_label = QLabel()
        self.version_label.setObjectName("versionLabel")
        self.next_button = _tool_button("›", "nextVersionButton", "Next version", "Show the next version")
        self.previous_button.clicked.connect(lambda: self._step(-1))
        self.next_button.clicked.connect(lambda: self._step(+1))

        self.copy_button = _tool_button("Copy", "copyMessageButton", "Copy message", "Copy this message")
        self.copy_button.clicked.connect(self.copy)
        if role is Role.USER:
            self.action_button = _tool_button("Edit", "editMessageButton", "Edit and resend", "Edit this message and send it again (a new branch)")
            self.action_button.clicked.connect(lambda: self._emit_for(self.edit_requested))
        else:
            self.action_button = _tool_button("Regenerate", "regenerateButton", "Regenerate answer", "Write another answer (kept beside this one) (Ctrl+R for the last one)")
            self.action_button.clicked.connect(lambda: self._emit_for(self.regenerate_requested))
        self.remember_button = _tool_button(
            "Remember", "rememberButton", "Remember this", "Save this message as a memory Wren can use in later chats"
        )
        self.remember_button.clicked.connect(lambda: self._emit_for(self.remember_requested))
        self.continue_button = _tool_button(
            "Continue", "continueButton", "Continue answer",
            "Go on with this answer where it ended (it was stopped, interrupted or reached its length limit)")
        self.continue_button.clicked.connect(lambda: self._emit_for(self.continue_requested))
        self.continue_button.hide()
        self.menu_button = MessageMenuButton()  # "⋯": Replay
        self.replay_action = self.menu_button.replay_action
        self.replay_action.triggered.connect(lambda: self._emit_for(self.replay_requested))
        if role is Role.USER:
            self.menu_button.hide()  # (showing it here, before it has a parent, would open a window)

        header = QHBoxLayout()
        header.setContentsMargins(0, 0, 0, 0)
        header.setSpacing(4)
        header.addWidget(self._who)
        header.addWidget(self.status_label, 1)
        header.addStretch(0)
        for w in (self.previous_button, self.version_label, self.next_button, self.copy_button, self.continue_button,
                  self.action_button, self.remember_button, self.menu_button):
            header.addWidget(w)

        if role is Role.USER:
            self.body: MarkdownBody | PlainSegment = PlainSegment(text)
        else:
            self.body = MarkdownBody(text)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 8, 12, 8)
        layout.setSpacing(4)
        layout.addLayout(header)
        self.reading_progress = ReadingProgress()  # a long prompt being read: bar and time left
        if role is Role.ASSISTANT:
            layout.addWidget(self.reading_progress)
        self.notes: MemoryNotes | None = None
        self.memory_ids: tuple[int, ...] = ()
        # Hover a token of a stored answer for its probability (desktop/chat/probabilities.py)
        self.probabilities: TokenProbabilities | None = None
        self._marks = False  # underline the tokens the model was unsure of
        self._marking: Iterator[None] | None = None  # marks being applied, a view per step
        self.thinking: ThinkingSection | None = None  # a thinking model's thinking, folded above the answer
        if role is Role.ASSISTANT:
            self.probabilities = TokenProbabilities(self)
            self.notes = MemoryNotes()
            layout.addWidget(self.notes)
            self.thinking = ThinkingSection()
            layout.addWidget(self.thinking)
        layout.addWidget(self.body)
        self.notices_label: NoticesLabel | None = None  # an answer's notices (meta["notices"]), under its text
        if role is Role.ASSISTANT:
            self.notices_label = NoticesLabel()
            layout.addWidget(self.notices_label)
        self.fold_button: QToolButton | None = None  # a long paste's "Pasted text, N lines" toggle
        if isinstance(self.body, PlainSegment):
            self.fold_button = _tool_button("", "pasteFoldButton", "", "")
            self.fold_button.clicked.connect(self._toggle_fold)
            self.body.fold_changed.connect(self._show_fold)
            layout.addWidget(self.fold_button, 0, Qt.AlignmentFlag.AlignLeft)
            self._show_fold()
        self.attached: AttachedFiles | None = None  # a question's files, under its text
        if role is Role.USER:
            self.attached = AttachedFiles()
            layout.addWidget(self.attached)
        if role is Role.ASSISTANT:
            layout.addWidget(self._build_footer())
        self._text = text
        self._busy = False
        self._temporary = False
        self._assigned_id: int | None = None
        self._live_safety: list[SafetyNotice] = []
        self.sources: QWidget | None = None  # an answer's cited passages (set_sources)
        self.found_marks = 0  # the words a search result opened at, marked in its text
        self.set_info(info)

    def _toggle_fold(self) -> None:
        if isinstance(self.body, PlainSegment):
            self.body.set_folded(not self.body.folded)

    def _show_fold(self) -> None:
        """The toggle under a long paste, as ChatGPT shows one: its size, and open or fold."""
        body, button = self.body, self.fold_button
        if button is None or not isinstance(body, PlainSegment):
            return
        size = f"Pasted text, {body.lines:,} line{'s' if body.lines != 1 else ''}"
        button.setText(f"▸ {size} — show all" if body.folded else f"▾ {size} — fold")
        button.setAccessibleName(f"{size}: {'show all' if body.folded else 'fold'}")
        button.setToolTip("Show the whole message" if body.folded else "Show only its first lines")
        button.setVisible(body.foldable)

    def _build_footer(self) -> QWidget:
        self.provenance_button = _tool_button(
            "", "memoryProvenanceButton", "Memories this answer used", "Which memories Wren used for this answer"
        )
        self.provenance_button.clicked.connect(lambda: self._emit_for(self.provenance_requested))
        self.inspect_button = _tool_button(
            "What the model saw", "contextInspectorButton", "What the model saw",
            "Every part of the prompt for this answer, its tokens, and the exact text the model read",
        )
        self.inspect_button.clicked.connect(lambda: self._emit_for(self.inspect_requested))
        self.footer = QWidget()
        self.footer.setObjectName("messageFooter")
        row = QHBoxLayout(self.footer)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(4)
        row.addWidget(self.provenance_button)
        row.addWidget(self.inspect_button)
        row.addStretch(1)
        self.footer.hide()
        return self.footer

    @property
    def answer_body(self) -> MarkdownBody:
        """An answer's body, Markdown (a user message's is plain text: it has none)."""
        if not isinstance(self.body, MarkdownBody):
            raise TypeError("a user message's body is plain text, not an answer's Markdown")
        return self.body

    @property
    def message_id(self) -> int | None:
        return self.info.id if self.info else self._assigned_id

    def assign_id(self, message_id: int) -> None:
        """The store's id for a message shown before it was committed."""
        self._assigned_id = message_id
        self._refresh_controls()

    def set_sources(self, panel: QWidget) -> None:
        """The library passages the answer cited, under its text (desktop/library/sources.py)."""
        self.sources = panel
        layout = self.layout()
        assert isinstance(layout, QBoxLayout)
        layout.insertWidget(layout.indexOf(self.body) + 1, panel)

    def text(self) -> str:
        return self.body.text() if isinstance(self.body, MarkdownBody) else self._text

    def set_info(self, info: MessageInfo | None) -> None:
        """Show the stored state of the message; the body is replaced only if its text changed."""
        self.info = info
        if info is not None and info.content != self.text() and not self.is_streaming:
            self._text = info.content
            self._render(info)
        elif info is not None and not self.is_streaming and info.meta.get("tools") and not self.tool_cards:
            self._render(info)  # a stored answer's calls and results, inline at their offsets
        if info is not None and info.status is not MessageStatus.STREAMING:
            for card in self.tool_cards.values():
                card.stop_spinning()  # the answer ended: a call with no result never spins on
        count = info.sibling_count if info else 1
        index = info.sibling_index if info else 0
        for w in (self.previous_button, self.version_label, self.next_button):
            w.setVisible(count > 1)
        self.version_label.setText(f"{index + 1}/{count}")
        self.version_label.setAccessibleName(f"Version {index + 1} of {count}")
        self._refresh_controls()
        self.set_status(info.status if info else None, info.error if info else None)
        if self.attached is not None and info is not None:
            self.attached.set_paths(attached_paths(info.meta))
        if self.notices_label is not None:
            self.notices_label.show_meta(info.meta if info is not None else None)
        if self.notes is not None:
            self._show_provenance(info)
            self.notes.show_notice(notice_from_meta(info.meta.get("memory")) if info else None)
        if self.thinking is not None and info is not None and info.status is not MessageStatus.STREAMING:
            self.thinking.show_stored(info.reasoning, info.reasoning_seconds)
        self._show_probabilities(info)
        if info is not None and info.role is Role.ASSISTANT and info.tokens_per_second:
            self._who.setToolTip(
                f"{info.model or 'model'} on {info.backend or '?'} · "
                f"{info.completion_tokens or 0} tokens at {info.tokens_per_second:.1f} tokens/s"
            )

    # -- tool calls (docs/tools.md) ------------------------------------------------------

    def _render(self, info: MessageInfo) -> None:
        """The stored text, with a card for every call in meta["tools"] at its offset."""
        self.tool_cards = {}
        if self.probabilities is not None:
            self.probabilities.detach()  # the text views are replaced: matched again on hover
        body = self.body
        log = info.meta.get("tools") if isinstance(body, MarkdownBody) else None
        if not isinstance(body, MarkdownBody) or not isinstance(log, list) or not log:
            self.body.set_text(info.content)
            return
        inserts: list[tuple[int, QWidget]] = []
        for item in log:
            if not isinstance(item, dict):
                continue
            if item.get("type") == "tool_call":
                args = item.get("arguments")
                card = self._card(str(item.get("id")), str(item.get("name", "?")), args if isinstance(args, dict) else {})
                inserts.append((int(item.get("offset") or 0), card))
            elif item.get("type") == "tool_result" and (done := self.tool_cards.get(str(item.get("id")))):
                done.set_result(str(item.get("content", "")), bool(item.get("is_error")), item.get("duration"))
        if info.status is not MessageStatus.STREAMING:
            for card in self.tool_cards.values():
                card.stop_spinning()
        body.set_text(info.content, inserts)
        self.tools_changed.emit()

    def _card(self, call_id: str, name: str, arguments: dict) -> ToolCard:
        card = ToolCard(call_id, name, arguments)
        card.decided.connect(self.tool_decided)
        card.cancel_requested.connect(self.tool_cancel_requested)
        self.tool_cards[call_id] = card
        return card

    def show_tool_event(self, event: ToolCall | ToolApprovalNeeded | ToolResult) -> ToolCard | None:
        """A tool event from the live stream: a new card, its approval, or its result."""
        if not isinstance(self.body, MarkdownBody):
            return None
        card = self.tool_cards.get(event.id)
        if card is None and isinstance(event, (ToolCall, ToolApprovalNeeded)):
            self.end_prefill()
            card = self._card(event.id, event.name, event.arguments)
            self.body.add_inline(card)
            self.tools_changed.emit()
        if card is None:
            return None
        if isinstance(event, ToolApprovalNeeded):
            card.ask_approval()
        elif isinstance(event, ToolResult):
            card.set_result(event.content, event.is_error, event.duration)
        return card

    def replay_stream(self, text: str, tool_events: list[tuple[int, object]]) -> None:
        """Show a still-streaming answer afresh: its text so far with its cards in place
        (`tool_events`: (offset in `text`, event), as TurnStream keeps them)."""
        self.tool_cards = {}
        self.answer_body.begin_stream()
        at = 0
        for offset, event in tool_events:
            if offset > at:
                self.body.append(text[at:offset])
                at = offset
            self.show_tool_event(event)  # type: ignore[arg-type]
        if text[at:]:
            self.body.append(text[at:])

    # -- token probabilities -----------------------------------------------------------

    def _show_probabilities(self, info: MessageInfo | None) -> None:
        """A stored answer with logprobs gets the hover; nothing is attached while it streams."""
        probabilities = self.probabilities
        if probabilities is None:
            return
        self._marking = None  # a new rendering or new logprobs: marked afresh if at all
        raw = info.meta.get(LOGPROBS_KEY) if info is not None else None
        if raw is None or info is None or self.is_streaming or info.status is MessageStatus.STREAMING:
            if probabilities.attached:
                probabilities.detach()
            return
        probabilities.attach(self.body, raw, info.content)
        if self._marks and not probabilities.marked:
            # after this turn of the event loop: opening a long chat is not held up by it
            QTimer.singleShot(0, self, self._apply_marks)

    def _apply_marks(self) -> None:
        """Mark the unsure tokens a few milliseconds per event-loop turn (a long answer has
        many text views), so neither typing nor another answer's stream waits on it."""
        if not (self._marks and self.probabilities is not None and self.probabilities.attached):
            return
        if self._marking is None:
            self._marking = self.probabilities.marking()
        until = time.perf_counter() + MARK_SLICE_MS / 1000
        for _ in self._marking:
            if time.perf_counter() > until:
                QTimer.singleShot(0, self, self._apply_marks)
                return
        self._marking = None

    def set_probability_marks(self, on: bool) -> None:
        """Underline (or not) the tokens the model was unsure of, in a stored answer with logprobs."""
        if on == self._marks:
            return
        self._marks = on
        probabilities = self.probabilities
        if probabilities is None or not probabilities.attached:
            return
        if on:
            QTimer.singleShot(0, self, self._apply_marks)
        elif (probabilities.marked or self._marking is not None) and self.info is not None:
            self._marking = None
            self._render(self.info)  # the plain rendering again, without the underlines
            self._show_probabilities(self.info)

    def set_status(self, status: MessageStatus | None, error: str | None = None) -> None:
        text = _STATUS_TEXT.get(status, "") if status else ""
        if status is MessageStatus.STREAMING and self.reading_progress.reading is not None:
            text = prefill_status_text(*self.reading_progress.reading)
        elif status is not MessageStatus.STREAMING:
            self.reading_progress.end()  # the answer is over: stored statuses never say "reading"
        if status is MessageStatus.FAILED and error:
            text = f"failed: {error}"
        if status is MessageStatus.COMPLETE and self.info is not None and cut_at_limit(self.info):
            text = "cut at the length limit (Continue goes on)"
        safety = shown_notices((self.info.meta.get("safety") if self.info else None) or self._live_safety)
        if safety:
            text = " · ".join(t for t in (text, f"safety {describe_notices(safety)}") if t)
        self.status_label.setText(text)
        self.status_label.setProperty("problem", status in (MessageStatus.FAILED, MessageStatus.BLOCKED))
        self.status_label.setVisible(bool(text))
        self.status_label.style().polish(self.status_label)

    def show_prefill(self, done: int, total: int) -> None:
        """The model is still reading the prompt: say how far, until the answer's text comes."""
        if self.answer_body.text() or not self.is_streaming:
            return  # text already streams (or the answer ended): the usual status stands
        self.reading_progress.show_progress(done, total)
        self.set_status(MessageStatus.STREAMING)

    def end_prefill(self) -> None:
        """The answer's text has started: back to the plain "answering…" status; thinking
        before it is over."""
        self._end_reading()
        self.end_thinking()

    def _end_reading(self) -> None:
        if self.reading_progress.end():
            self.set_status(self.info.status if self.info else MessageStatus.STREAMING)

    def show_thinking(self, text: str) -> None:
        """A streaming answer's thinking (the section above the text, folded)."""
        if self.thinking is not None:
            self._end_reading()
            self.thinking.append(text)

    def end_thinking(self) -> None:
        """The answer's text began (or it ended): the thinking's title says how long it took."""
        if self.thinking is not None:
            self.thinking.finish()

    def show_live_notice(self, notice: SafetyNotice) -> None:
        """A safety rule fired on the answer while it streams: say so at once."""
        self._live_safety.append(notice)
        self.set_status(self.info.status if self.info else MessageStatus.STREAMING)

    def show_memory_notice(self, notice: MemoryNotice) -> None:
        """Right after the question: what memory did with it, and suggestions to accept."""
        if self.notes is not None:
            self.notes.show_notice(notice, offers=True)

    def set_temporary(self, temporary: bool) -> None:
        """A temporary chat saves no memories, so it offers no "Remember this"."""
        self._temporary = temporary
        self._refresh_controls()

    def _show_provenance(self, info: MessageInfo | None) -> None:
        report = report_from_meta(info.meta) if info is not None else None
        self.memory_ids = report.memory_ids if report is not None else ()
        count = len(self.memory_ids)
        self.provenance_button.setText(f"Used {count} memor{'y' if count == 1 else 'ies'}")
        self.provenance_button.setVisible(count > 0)
        self.footer.setVisible(report is not None)

    @property
    def is_streaming(self) -> bool:
        return isinstance(self.body, MarkdownBody) and self.body.streaming

    def set_busy(self, busy: bool) -> None:
        """While an answer streams in this chat, branching from it would race the stream."""
        self._busy = busy
        self._refresh_controls()

    def _refresh_controls(self) -> None:
        info, idle = self.info, not self._busy
        self.previous_button.setEnabled(idle and info is not None and info.sibling_index > 0)
        self.next_button.setEnabled(idle and info is not None and info.sibling_index < info.sibling_count - 1)
        self.action_button.setEnabled(idle and info is not None)
        self.remember_button.setVisible(not self._temporary)
        self.continue_button.setVisible(info is not None and not self.is_streaming and can_continue(info))
        self.continue_button.setEnabled(idle)
        replayable, why = replay_state(info)
        self.menu_button.set_replay(idle and replayable and not self.is_streaming, why)
        self.remember_button.setEnabled(self.message_id is not None and bool(self.text().strip()))

    def show_found(self, found: bool, terms: tuple[str, ...] = ()) -> None:
        """Highlighted as the message a search result opened at, its matching words marked."""
        self.setProperty("found", found)
        self.style().polish(self)
        self.found_marks = mark_terms(self, terms if found else ())

    def copy(self) -> None:
        QGuiApplication.clipboard().setText(self.text())
        self.copy_button.setText("Copied")
        QTimer.singleShot(1500, self.copy_button, lambda: self.copy_button.setText("Copy"))
        self.copied.emit(self.text())

    def _emit_for(self, signal) -> None:
        if self.message_id is not None:
            signal.emit(self.message_id)

    def _step(self, step: int) -> None:
        if self.message_id is not None:
            self.sibling_requested.emit(self.message_id, step)
