"""Wren's conversation endpoint's pieces: a POST /api/conversation body checked into a
ConversationAsk, the refusal of an answer that ended before it started, and AnswerRun, which
writes a stored answer's events into its AnswerLog (app.py's WrenApp.conversation puts them together)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidRequest, WrenError
from ..events import (
    Delta,
    Failed,
    FailureKind,
    Finished,
    FinishReason,
    SafetyNotice,
    Started,
    TitleUpdate,
    Usage,
    event_to_dict,
)
from ..logs import log_event
from .body import body_id, check_length
from .gate import ApiError
from .streams import AnswerLog
from .wire import question_text, send_options

TITLE_WAIT_SECONDS = 60.0  # how long a finished answer's stream waits for its title
CONVERSATION_ACTIONS = ("next", "variant", "edit", "continue")
# what an answer that goes on keeps from before (engine.chat.continue_answer): none of these may be given
NOT_WITH_CONTINUE = ("content", "messages", "sampling", "system_prompt", "tools", "tool_choice", "response_format")


@dataclass(frozen=True)
class ConversationAsk:
    """A checked POST /api/conversation body."""

    action: str  # one of CONVERSATION_ACTIONS
    text: str | None  # the question (next, edit); None for variant and continue
    options: Any  # SendOptions
    conversation_id: int | None
    message_id: int | None  # the message to answer again, edit or continue (every action but next)
    temporary: bool


def conversation_action(body: dict) -> str:
    action = body.get("action", "next")
    if action not in CONVERSATION_ACTIONS:
        raise ApiError(400, f"action must be next, variant, edit or continue, got {action!r}", param="action")
    if action == "continue":
        # The answer goes on with its own model settings and seed (engine.chat.continue_answer).
        given = [name for name in NOT_WITH_CONTINUE if body.get(name) is not None]
        if given:
            raise ApiError(400, f"action continue takes only message_id (the answer to go on with); "
                                f"{', '.join(given)} cannot be given", param=given[0])
    return action


def conversation_ask(body: dict, window: int | None) -> ConversationAsk:
    """The body's checks, in order, before any work; `window` is the loaded model's context."""
    action = conversation_action(body)
    text = question_text(body) if action not in ("variant", "continue") else None
    options = send_options(body)
    conv_id = body.get("conversation_id")
    message_id = body.get("message_id")
    if action != "next":
        message_id = body_id(message_id, "message_id",
                             f"action {action} needs message_id (the message to answer again, edit or continue)")
    if conv_id is not None:
        conv_id = body_id(conv_id, "conversation_id", "conversation_id must be a whole number")
    if text is not None:
        check_length(len(text), window, "content")
    temporary = body.get("temporary", False)
    if not isinstance(temporary, bool):
        raise ApiError(400, "temporary must be true or false", param="temporary")
    return ConversationAsk(action, text, options, conv_id, message_id, temporary)


def refusal(outcome: BaseException | list) -> BaseException:
    """What an answer that ended before it started raises: its error, or (a list of its early
    events) its failure or the safety rule that blocked the message."""
    if isinstance(outcome, BaseException):
        return outcome
    failed = next((e for e in outcome if isinstance(e, Failed)), None)
    if failed is not None:
        status = 400 if failed.kind is FailureKind.INVALID_REQUEST else 500
        return ApiError(status, failed.error, kind="invalid_request_error" if status == 400 else "server_error",
                        code=failed.kind.value)
    return ApiError(400, "a safety rule blocked this message; it was not stored or sent", code="content_blocked",
                    extra={"safety": [event_to_dict(n) for n in outcome if isinstance(n, SafetyNotice)]})


class AnswerRun:
    """One stored answer on its way into its AnswerLog: what `WrenApp._produce` keeps between events.

    Events before Started (safety and memory notices) are held until it comes, then written
    first; `started` resolves to Started, to those events when the answer ended before it
    started, or to the error that ended it."""

    def __init__(self, engine, log: AnswerLog, started: asyncio.Future, new: bool):
        self.engine = engine
        self.log = log
        self.started = started
        self.new = new  # the conversation was made for this answer: it gets a title beside it
        self.before: list = []
        self.title_task: asyncio.Task | None = None
        self.titled = False
        self.usage: Usage | None = None
        self.error: str | None = None
        self.reason: FinishReason | None = None

    def early(self, event) -> bool:
        """An event before Started; whether the answer ended there."""
        if isinstance(event, Started):
            self.log.message_id = event.assistant_message_id
            for early in self.before:
                self.log.typed(event_to_dict(early))
            self.started.set_result(event)
            return False
        self.before.append(event)
        if isinstance(event, Finished):
            self.started.set_result(self.before)
            return True
        return False

    def take(self, event) -> None:
        """An event after Started, written to the log or kept for the end."""
        log = self.log
        if isinstance(event, Delta):
            log.delta(event.text)
            if self.new and self.title_task is None:
                self._name_chat()
        elif isinstance(event, TitleUpdate):
            self.emit_title(event.title)
        elif isinstance(event, Usage):
            self.usage = event
        elif isinstance(event, Failed):
            self.error = event.error
            log.typed({"type": "error", "kind": event.kind.value, "error": event.error})
        elif isinstance(event, Finished):
            self.reason = event.reason
        else:  # prefill progress, safety and memory notices, tool calls and results
            log.typed(event_to_dict(event))

    def failed(self, exc: BaseException) -> None:
        """The events ended with `exc` after Started."""
        self.error = self.error or (str(exc) if isinstance(exc, WrenError) else "the answer failed")
        self.reason = FinishReason.ERROR

    def emit_title(self, title: str) -> None:
        if not self.titled and not self.log.done:
            self.titled = True
            self.log.typed({"type": "title_generation", "title": title, "conversation_id": self.log.conversation_id})

    def _name_chat(self) -> None:
        """The first words are out: name the chat beside the answer."""
        self.title_task = asyncio.ensure_future(self.engine.chat.generate_title(self.log.conversation_id))
        self.title_task.add_done_callback(self._title_done)

    def _title_done(self, task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is None:
            self.emit_title(task.result())

    def _metadata(self) -> dict[str, Any]:
        metadata: dict[str, Any] = {"message_id": self.log.message_id}
        if self.usage is not None:
            metadata["usage"] = {"prompt_tokens": self.usage.prompt_tokens,
                                 "completion_tokens": self.usage.completion_tokens,
                                 "cached_tokens": self.usage.cached_tokens}
        if self.error:
            metadata["error"] = self.error
        return metadata

    async def end(self, request_id: str) -> None:
        """The log's last chunks (the finish, the title if it comes in time) and its close."""
        log, started = self.log, self.started
        if not started.done():
            started.set_result(InvalidRequest("the answer ended before it started"))
        if log.done or not isinstance(started.result(), Started):
            log.close()
            return
        reason = self.reason or FinishReason.CANCELLED
        log.finish(reason, self._metadata())
        if self.title_task is not None and not self.title_task.done():
            await asyncio.wait({self.title_task}, timeout=TITLE_WAIT_SECONDS)
            self.title_task.cancel()  # past the wait: the stream ends without a title
        log.typed({"type": "message_stream_complete", "conversation_id": log.conversation_id})
        log.close()
        log_event("server.answer", request_id=request_id, conversation_id=log.conversation_id,
                  message_id=log.message_id, reason=reason.value, chunks=len(log.chunks))
