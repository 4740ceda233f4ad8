"""The chat view: the visible branch of a conversation as a scrolling column of messages."""

from __future__ import annotations

import time
from collections.abc import Sequence

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QFrame, QLabel, QScrollArea, QVBoxLayout, QWidget

from wren.engine.records import MessageInfo, MessageStatus, Role

from ..theme import is_dark
from . import highlight
from .body import MarkdownBody
from .message import MessageWidget

_STICK_SLACK = 24  # pixels from the bottom that still count as "following the answer"
# Opening a long chat builds the newest messages at once and older ones in slices of this
# many milliseconds per event-loop turn: 50 rich answers take most of a second to build.
EAGER_MESSAGES = 8
BACKLOG_SLICE_MS = 12


class ChatView(QScrollArea):
    # Message ids travel as `object`: Qt's int is 32 bits, temporary chats' ids start at 2**40.
    edit_requested = Signal(object)
    regenerate_requested = Signal(object)
    continue_requested = Signal(object)
    replay_requested = Signal(object)  # answer id: the same answer again (same model, settings, seed)
    sibling_requested = Signal(object, int)
    copied = Signal(str)
    remember_requested = Signal(object)  # message id
    inspect_requested = Signal(object)  # answer id
    provenance_requested = Signal(object)  # answer id
    memory_open_requested = Signal(int)  # memory id
    memory_undo_requested = Signal(object, int)  # answer id, memory id
    suggestion_accepted = Signal(object, str)  # answer id, suggested text
    clear_memories_requested = Signal(object)  # answer id whose question said "forget everything"
    messages_changed = Signal()  # messages were added or removed (the window re-orders Tab stops)
    tool_decided = Signal(str, str)  # call id, "once" | "always" | "deny" (engine.tools.approve)
    tool_cancel_requested = Signal(str)  # call id (engine.tools.cancel)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("chatView")
        self.setAccessibleName("Conversation")
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        content = QWidget()
        content.setObjectName("chatContent")
        self._column = QVBoxLayout(content)
        self._column.setContentsMargins(16, 12, 16, 12)
        self._column.setSpacing(10)
        self.empty_label = QLabel("Ask Wren anything. Everything stays on this computer.")
        self.empty_label.setObjectName("emptyChatLabel")
        self.empty_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty_label.setWordWrap(True)
        self._column.addWidget(self.empty_label)
        self.notice_label = QLabel()
        self.notice_label.setObjectName("chatNotice")
        self.notice_label.setAccessibleName("Problem")
        self.notice_label.setWordWrap(True)
        self.notice_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.notice_label.hide()
        self._column.addWidget(self.notice_label)
        self._column.addStretch(1)
        self.setWidget(content)
        self._messages: list[MessageWidget] = []
        self._backlog: list[MessageInfo] = []
        self._backlog_at = 0
        self._busy = False
        self._temporary = False
        self._marks = False  # underline the tokens the model was unsure of (token probabilities)
        self._stick = True
        # A message kept in view while the chat re-lays out (the answer whose version was
        # switched), in place of following the bottom; the user scrolling lets go of it.
        self._anchor: MessageWidget | None = None
        self._found: MessageWidget | None = None  # the message a search result was opened at
        bar = self.verticalScrollBar()
        bar.rangeChanged.connect(self._follow)
        bar.actionTriggered.connect(lambda _a: setattr(self, "_anchor", None))
        bar.valueChanged.connect(lambda v: setattr(self, "_stick", v >= bar.maximum() - _STICK_SLACK))

    # -- contents -------------------------------------------------------------------

    def focusInEvent(self, event) -> None:
        super().focusInEvent(event)
        self._show_focus(True)

    def focusOutEvent(self, event) -> None:
        super().focusOutEvent(event)
        self._show_focus(False)

    def _show_focus(self, focused: bool) -> None:
        """A ring while the chat has keyboard focus (arrows and Page keys scroll it)."""
        self.setProperty("focused", focused)
        # Its own style sheet: a scroll area takes a frame from the application's only at polish.
        self.setStyleSheet("#chatView { border: 2px solid palette(highlight); border-radius: 6px; }" if focused else "")

    def message_widgets(self) -> list[MessageWidget]:
        return list(self._messages)

    def last_answer(self) -> MessageWidget | None:
        return next((w for w in reversed(self._messages) if w.role is Role.ASSISTANT), None)

    def widget_for(self, message_id: int) -> MessageWidget | None:
        return next((w for w in self._messages if w.message_id == message_id), None)

    def clear(self) -> None:
        self._anchor = None
        self._found = None
        self._backlog = []
        self._truncate(0)
        self._update_empty()  # an emptied pane (a deleted chat) says what it is for again
        self.show_notice("")
        self._stick = True

    def show_notice(self, text: str) -> None:
        """A problem that belongs to no message (the engine refused the turn)."""
        self.notice_label.setText(text)
        self.notice_label.setVisible(bool(text))

    def show_messages(self, messages: list[MessageInfo]) -> None:
        """Show `messages`, keeping the widgets of the prefix that did not change."""
        self._build_backlog(until=None)
        keep = 0
        for widget, info in zip(self._messages, messages):
            if widget.message_id != info.id:
                break
            keep += 1
        self._truncate(keep)
        for widget, info in zip(self._messages, messages):
            widget.set_info(info)
        rest = messages[keep:]
        split = max(0, len(rest) - EAGER_MESSAGES)
        for info in rest[split:]:
            self._add(MessageWidget(info.role, info.content, info))
        if split:
            self._backlog, self._backlog_at = rest[:split], keep
            QTimer.singleShot(0, self, self._backlog_slice)
        self._update_empty()

    def show_branch(self, messages: list[MessageInfo], switched: int) -> None:
        """Another version of the message `switched` (its id before the switch): the messages
        after it change, the view stays on it (its ‹ n/m › control under the pointer or the
        keyboard), not at the bottom."""
        position = next((i for i, w in enumerate(self._messages) if w.message_id == switched), -1)
        self._stick = False
        self.show_messages(messages)
        if 0 <= position < len(self._messages):
            self._anchor = self._messages[position]
            self._keep_anchor()

    def reveal(self, message_id: int, terms: Sequence[str] = ()) -> bool:
        """A search result opened: scroll to its matching message and highlight it (and the
        words searched for in it) until another chat is shown; False if it is not shown here."""
        self._build_backlog(until=None)
        widget = self.widget_for(message_id)
        if widget is None:
            return False
        self._set_found(widget, tuple(terms))
        self._stick = False
        self._anchor = widget
        self._keep_anchor()
        return True

    def _set_found(self, widget: MessageWidget | None, terms: tuple[str, ...] = ()) -> None:
        if self._found is not None and self._found is not widget:
            self._found.show_found(False)
        self._found = widget
        if widget is not None:
            widget.show_found(True, terms)

    def _keep_anchor(self) -> None:
        anchor = self._anchor
        if anchor is None:
            return
        self._column.activate()  # the new messages' places, before scrolling to one
        self.ensureWidgetVisible(anchor, 0, 24)
        self._stick = False

    @property
    def complete(self) -> bool:
        """Every message is built (older ones of a long chat arrive over a few turns)."""
        return not self._backlog

    def _backlog_slice(self) -> None:
        if self._backlog:
            self._build_backlog(until=time.perf_counter() + BACKLOG_SLICE_MS / 1000)
            if self._backlog:
                QTimer.singleShot(0, self, self._backlog_slice)

    def _build_backlog(self, until: float | None) -> None:
        # Newest first, each inserted above the ones already built, so order is kept.
        while self._backlog and (until is None or time.perf_counter() < until):
            info = self._backlog.pop()
            self._add(MessageWidget(info.role, info.content, info), at=self._backlog_at)

    def add_pending_user(self, text: str, attachments: Sequence[str] = ()) -> MessageWidget:
        """The user's message (and the files sent with it), shown before the store has given it an id."""
        self._anchor, self._stick = None, True
        widget = self._add(MessageWidget(Role.USER, text))
        if widget.attached is not None:
            widget.attached.set_paths(attachments)
        self._update_empty()
        return widget

    def add_streaming_answer(self) -> MessageWidget:
        self._anchor, self._stick = None, True
        widget = self._add(MessageWidget(Role.ASSISTANT))
        widget.answer_body.begin_stream()
        widget.set_status(MessageStatus.STREAMING)
        self._update_empty()
        return widget

    def remove_from(self, message_id: int) -> None:
        """Drop a message and everything after it (a new branch replaces them)."""
        for index, widget in enumerate(self._messages):
            if widget.message_id == message_id:
                self._truncate(index)
                break
        self._update_empty()

    def set_busy(self, busy: bool) -> None:
        self._busy = busy
        for widget in self._messages:
            widget.set_busy(busy)

    def set_temporary(self, temporary: bool) -> None:
        self._temporary = temporary
        for widget in self._messages:
            widget.set_temporary(temporary)

    def set_probability_marks(self, on: bool) -> None:
        """Show or hide the underlines under unsure tokens of answers that kept their logprobs."""
        self._marks = on
        for widget in self._messages:
            widget.set_probability_marks(on)

    def warm_up(self) -> None:
        """Pay first-use costs (fonts, Markdown import, lexers) while idle, one small step per
        event-loop turn, so the first code block of the first answer does not stall."""
        steps = [self._warm_widgets] + [
            (lambda lang=lang: highlight.warm(lang, is_dark())) for lang in highlight.COMMON_LANGUAGES
        ]

        def next_step() -> None:
            if steps:
                steps.pop(0)()
                QTimer.singleShot(0, self, next_step)

        QTimer.singleShot(0, self, next_step)

    def _warm_widgets(self) -> None:
        body = MarkdownBody("*warm* up\n\n```python\nx = 1\n```", self.widget())
        body.hide()
        body.deleteLater()

    def scroll_to_bottom(self) -> None:
        self._anchor = None
        self._stick = True
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())

    # -- internals ------------------------------------------------------------------

    def _add(self, widget: MessageWidget, at: int | None = None) -> MessageWidget:
        widget.edit_requested.connect(self.edit_requested)
        widget.regenerate_requested.connect(self.regenerate_requested)
        widget.continue_requested.connect(self.continue_requested)
        widget.replay_requested.connect(self.replay_requested)
        widget.sibling_requested.connect(self.sibling_requested)
        widget.copied.connect(self.copied)
        widget.remember_requested.connect(self.remember_requested)
        widget.inspect_requested.connect(self.inspect_requested)
        widget.provenance_requested.connect(self.provenance_requested)
        widget.tool_decided.connect(self.tool_decided)
        widget.tool_cancel_requested.connect(self.tool_cancel_requested)
        widget.tools_changed.connect(self.messages_changed)
        if widget.notes is not None:
            notes = widget.notes
            notes.open_requested.connect(self.memory_open_requested)
            notes.undo_requested.connect(lambda mid: self.memory_undo_requested.emit(widget.message_id or 0, mid))
            notes.accept_requested.connect(lambda text: self.suggestion_accepted.emit(widget.message_id or 0, text))
            notes.clear_all_requested.connect(lambda: self.clear_memories_requested.emit(widget.message_id or 0))
        widget.set_busy(self._busy)
        widget.set_temporary(self._temporary)
        widget.set_probability_marks(self._marks)
        if at is None:
            # Before the notice and the trailing stretch, so messages stack from the top.
            self._column.insertWidget(self._column.count() - 2, widget)
            self._messages.append(widget)
        else:
            self._column.insertWidget(1 + at, widget)  # after the empty-chat label
            self._messages.insert(at, widget)
        self.messages_changed.emit()
        return widget

    def _truncate(self, keep: int) -> None:
        gone = self._messages[keep:]
        if self._anchor in gone:
            self._anchor = None
        if self._found in gone:
            self._found = None
        for widget in self._messages[keep:]:
            self._column.removeWidget(widget)
            widget.hide()
            widget.deleteLater()
        del self._messages[keep:]

    def _update_empty(self) -> None:
        self.empty_label.setVisible(not self._messages)

    def _follow(self, _minimum: int, maximum: int) -> None:
        if self._anchor is not None:
            self._keep_anchor()
        elif self._stick:
            self.verticalScrollBar().setValue(maximum)
