"""Answers while they stream: which widget each chat's answer in flight goes to (kept while
the user is in another chat, shown live again on coming back), and what is said of it — to a
screen reader (answering, thinking, a tool asking leave, how it ended) and to read-aloud (each
piece of its text, `text_out`)."""

from __future__ import annotations

from collections.abc import Callable

from wren.engine.events import (
    Finished,
    FinishReason,
    MemoryNotice,
    PrefillProgress,
    SafetyNotice,
    ToolApprovalNeeded,
    Usage,
)

from ..bridge import TurnStream, describe_notices
from ..chat.message import MessageWidget
from ..safety.labels import shown_notices
from .seams import AnswerView, StatusLine


class LiveAnswers:
    def __init__(self, *, chat: AnswerView, status: StatusLine, current: Callable[[], int | None],
                 announce: Callable[[str, bool], None], text_out: Callable[[int, str], None]) -> None:
        """`current`: the chat shown; `announce(text, at_once)`: for a screen reader;
        `text_out(conversation id, text)`: each piece of an answer as it streams."""
        self.chat = chat
        self.status = status
        self._current = current
        self._announce = announce
        self._text_out = text_out
        self.widgets: dict[int, MessageWidget] = {}  # conversation id → widget receiving text
        self._thought: set[int] = set()  # conversations whose answer in flight said it is thinking

    def follow(self, stream: TurnStream, answer: MessageWidget) -> None:
        """`stream`'s text, thinking, notices and tool events go to `answer` (while shown)."""
        cid = stream.conversation_id
        self._thought.discard(cid)
        self.widgets[cid] = answer
        stream.prefill.connect(lambda ev: self._prefill(cid, ev))
        stream.text.connect(lambda text: self._text(cid, text))
        stream.reasoning.connect(lambda text: self._thinking(cid, text))
        stream.usage.connect(lambda usage: self._usage(cid, usage))
        stream.notice.connect(lambda n: self._safety_notice(cid, n))
        stream.memory.connect(lambda n: self._memory_notice(cid, n))
        stream.tool.connect(lambda event: self._tool_event(cid, event))

    def started(self, conversation_id: int) -> None:
        if conversation_id == self._current():
            self._announce("Wren is answering.", False)

    def detach(self, conversation_id: int | None) -> None:
        """The chat is no longer shown: its answer's widget is gone with it."""
        if conversation_id is not None:
            self.widgets.pop(conversation_id, None)

    def drop(self, conversation_id: int) -> MessageWidget | None:
        """The answer finished: the widget that showed it live, if still shown."""
        return self.widgets.pop(conversation_id, None)

    def reattach(self, stream: TurnStream | None) -> None:
        """Coming back to a chat whose answer is still streaming: keep showing it live."""
        if stream is None or stream.done or stream.assistant_id is None:
            return
        widget = self.chat.widget_for(stream.assistant_id)
        if widget is None:
            return
        if stream.thinking:  # what it thought so far, still folded
            widget.show_thinking("".join(stream.thinking))
            if stream.received():
                widget.end_thinking()
        widget.replay_stream(stream.received(), stream.tool_events)
        if stream.prefill_event is not None:  # still reading the prompt: say how far
            widget.show_prefill(stream.prefill_event.done, stream.prefill_event.total)
        self.widgets[stream.conversation_id] = widget

    def announce_end(self, stream: TurnStream, finished: Finished, text: str) -> None:
        """The finished answer once (not token by token), or why there is none."""
        if stream.started_event is None and (stream.failure is not None or finished.reason is FinishReason.BLOCKED):
            return  # refused before it began: the controller said why
        if stream.failure is not None:
            self._announce(f"The answer failed: {stream.failure.error}", True)
        else:
            text = text.strip()
            stopped = " (stopped)" if finished.reason is FinishReason.CANCELLED else ""
            self._announce(f"Wren answered{stopped}: {text}" if text else f"Wren's answer is empty{stopped}.", False)

    def _safety_notice(self, conversation_id: int, notice: SafetyNotice) -> None:
        if not shown_notices([notice]):
            return  # met with care (the composer's care panel), not with a safety line
        where = {"output": "the answer", "outgoing": "what was sent to the remote model"}.get(notice.stage, "your message")
        self.status.showMessage(f"Safety, in {where}: {describe_notices([notice])}", 10000)
        widget = self.widgets.get(conversation_id)
        if widget is not None and notice.stage == "output":
            widget.show_live_notice(notice)

    def _memory_notice(self, conversation_id: int, notice: MemoryNotice) -> None:
        widget = self.widgets.get(conversation_id)
        if widget is not None:
            widget.show_memory_notice(notice)

    def _tool_event(self, conversation_id: int, event) -> None:
        widget = self.widgets.get(conversation_id)
        if widget is not None:
            widget.show_tool_event(event)
        if isinstance(event, ToolApprovalNeeded) and conversation_id == self._current():
            self.status.showMessage(f"Wren wants to run the tool {event.name}: allow or deny it in the answer", 10000)
            self._announce(f"Wren wants to run the tool {event.name}. Allow or deny it in the answer.", True)

    def _prefill(self, conversation_id: int, event: PrefillProgress) -> None:
        widget = self.widgets.get(conversation_id)
        if widget is not None:
            widget.show_prefill(event.done, event.total)

    def _text(self, conversation_id: int, text: str) -> None:
        self._text_out(conversation_id, text)
        widget = self.widgets.get(conversation_id)
        if widget is not None:
            widget.end_prefill()
            widget.body.append(text)

    def _thinking(self, conversation_id: int, text: str) -> None:
        widget = self.widgets.get(conversation_id)
        if widget is not None:
            if conversation_id == self._current() and conversation_id not in self._thought:
                self._thought.add(conversation_id)
                self._announce("Wren is thinking.", False)
            widget.show_thinking(text)

    def _usage(self, conversation_id: int, usage: Usage) -> None:
        if conversation_id == self._current():  # its context: the record's, once it finishes
            self.status.show_speed(usage.tokens_per_second, usage.time_to_first_token)
