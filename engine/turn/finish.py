"""A stored answer's last write: its text, status, notices, tool log, log-probabilities
and usage, from what the stream gathered."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..events import FinishReason, SafetyNotice, event_to_dict
from ..records import KEPT_TOKENS_KEY, MessageStatus

if TYPE_CHECKING:
    from ..records import MessageInfo
    from .state import AnswerState

_STATUS_FOR = {
    FinishReason.STOP: MessageStatus.COMPLETE,
    FinishReason.LENGTH: MessageStatus.COMPLETE,
    FinishReason.CANCELLED: MessageStatus.STOPPED,
    FinishReason.ERROR: MessageStatus.FAILED,
    FinishReason.BLOCKED: MessageStatus.BLOCKED,
}


def notice_fields(notices: list[SafetyNotice]) -> list[dict]:
    """Category, action, span and rule of each notice: never the matched text."""
    return [{k: v for k, v in event_to_dict(n).items() if k != "type"} for n in notices]


def final_fields(answer: MessageInfo, state: AnswerState) -> dict[str, Any]:
    """The fields `Store.update_message` gets for the finished answer."""
    reason = state.reason
    blocked = reason is FinishReason.BLOCKED
    status = MessageStatus.INTERRUPTED if state.interrupted and reason is FinishReason.ERROR else _STATUS_FOR[reason]
    fields: dict[str, Any] = {
        "content": "" if blocked else state.text,  # a blocked answer keeps its notices, never its text
        "status": status,
        "error": state.error,
    }
    if state.thinking:  # kept apart from the answer's text, never shown as it
        fields["reasoning"] = "" if blocked else state.reasoning
        if state.thought_seconds is not None:
            fields["reasoning_seconds"] = state.thought_seconds
    meta = dict(answer.meta)
    if state.notices:
        meta["safety"] = notice_fields(state.notices)
    if state.tool_log:
        meta["tools"] = state.tool_log
    if state.kept_tokens:  # continued: completion_tokens counts these too (records.cut_at_limit)
        meta[KEPT_TOKENS_KEY] = state.kept_tokens
    state.probs.store(meta)
    if meta != answer.meta:
        fields["meta"] = meta
    usage = state.usage()
    if usage is not None:
        fields.update(completion_tokens=usage.completion_tokens + state.kept_tokens, time_to_first_token=usage.time_to_first_token,
                      tokens_per_second=usage.tokens_per_second)
    return fields


def finished_log(answer: MessageInfo, state: AnswerState, prompt_tokens: int) -> dict[str, Any]:
    """The fields of the log's `answer.finished` line."""
    usage = state.usage()
    return dict(
        conversation_id=answer.conversation_id, message_id=answer.id, model=answer.model, backend=answer.backend,
        reason=state.reason.value, prompt_tokens=prompt_tokens,
        completion_tokens=usage.completion_tokens if usage else None,
        reasoning_tokens=usage.reasoning_tokens if usage else None,
        time_to_first_token=usage.time_to_first_token if usage else None,
        tokens_per_second=usage.tokens_per_second if usage else None,
        safety=notice_fields(state.notices), error=state.error,
        tool_calls=sum(1 for t in state.tool_log if t["type"] == "tool_call"),
    )
