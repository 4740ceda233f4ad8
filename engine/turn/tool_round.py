"""The calls one round of a stored answer ended with: each runs (or is refused) in order,
its events shown and logged, the answer saved after each (docs/tools.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..events import Event, SafetyNotice, ToolCall, ToolResult
from ..tools.prompt import RoundRecord

if TYPE_CHECKING:
    from ..tools.parse import ParsedCall
    from ..tools.runner import ToolTurn
    from .state import AnswerState


def round_limit_note(number: int, max_rounds: int) -> str | None:
    """The error a call gets instead of running once the answer used its rounds, or None."""
    if number < max_rounds:
        return None
    return f"the limit of {max_rounds} tool rounds for one answer is reached; answer with what you have"


def log_entry(event: Event, offset: int) -> dict | None:
    """meta["tools"]'s entry for a call or a result, at `offset` in the answer's text."""
    if isinstance(event, ToolCall):
        return {"type": "tool_call", "id": event.id, "name": event.name, "arguments": event.arguments,
                "offset": offset}
    if isinstance(event, ToolResult):
        return {"type": "tool_result", "id": event.id, "content": event.content, "is_error": event.is_error,
                "duration": round(event.duration, 4), "offset": offset}
    return None


async def run_calls(runner: ToolTurn, calls: list[ParsedCall], state: AnswerState, round_text: str, *,
                    refuse: str | None, save: Callable[[str, list[dict]], Awaitable[Any]],
                    stopped: Callable[[], bool]) -> AsyncIterator[Event]:
    """Each call's events; the round joins `state.rounds`. `save(text, tool_log)` stores the
    answer after each call; `stopped()` says the user pressed Stop (the rest do not run)."""
    record = RoundRecord(round_text)
    for parsed in calls:
        offset = len(state.text)
        async for event in runner.handle(parsed, refuse=refuse):
            entry = log_entry(event, offset)
            if entry is not None:
                state.tool_log.append(entry)
            elif isinstance(event, SafetyNotice):
                state.notices.append(event)
            yield event
        if runner.record is not None:
            record.calls.append(runner.record)
        await save(state.text, state.tool_log)
        if runner.stopped or stopped():
            break
    state.rounds.append(record)
