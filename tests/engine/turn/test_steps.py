"""The small steps a stored answer is stacked from: checkpoints, the calls' log entries and
the round limit, the last write, the usage across rounds."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from wren.engine.events import FinishReason, SafetyAction, SafetyNotice, ToolCall, ToolResult, Usage
from wren.engine.inference.sampling import SamplingParams
from wren.engine.logprobs import AnswerLogprobs
from wren.engine.records import MessageInfo, MessageStatus, Role
from wren.engine.turn.checkpoint import Checkpoints
from wren.engine.turn.finish import final_fields, finished_log
from wren.engine.turn.state import AnswerState
from wren.engine.turn.tool_round import log_entry, round_limit_note


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_checkpoints_save_at_most_every_interval_and_only_text_that_grew():
    saved: list[str] = []

    async def save(text: str) -> None:
        saved.append(text)

    async def main():
        clock = Clock()
        points = Checkpoints(save, every=0.25, clock=clock)
        parts = ["Hello"]
        results = [await points.maybe(parts)]  # too soon
        clock.now = 0.3
        results.append(await points.maybe(parts))  # saved
        clock.now = 0.4
        parts.append(" there")
        results.append(await points.maybe(parts))  # too soon again
        clock.now = 0.7
        results.append(await points.maybe(parts))  # saved
        clock.now = 1.0
        results.append(await points.maybe(parts))  # nothing new
        return results, points.saved

    results, length = asyncio.run(main())
    assert results == [False, True, False, True, False]
    assert saved == ["Hello", "Hello there"] and length == len("Hello there")


def test_a_continued_answer_does_not_save_the_text_it_already_had():
    saved: list[str] = []

    async def save(text: str) -> None:
        saved.append(text)

    async def main():
        clock = Clock()
        points = Checkpoints(save, saved=len("Earlier"), every=0.25, clock=clock)
        clock.now = 1.0
        return await points.maybe(["Earlier"])

    assert asyncio.run(main()) is False and saved == []


def test_calls_and_results_are_logged_at_their_offset_and_other_events_are_not():
    call = log_entry(ToolCall("call_1", "calculator", {"expression": "2+2"}), 12)
    result = log_entry(ToolResult("call_1", "4", False, 0.123456), 12)
    assert call == {"type": "tool_call", "id": "call_1", "name": "calculator",
                    "arguments": {"expression": "2+2"}, "offset": 12}
    assert result == {"type": "tool_result", "id": "call_1", "content": "4", "is_error": False,
                      "duration": 0.1235, "offset": 12}
    assert log_entry(Usage(1, 2, 0.1, 3.0), 0) is None


def test_the_round_limit_refuses_calls_once_reached():
    assert round_limit_note(0, 3) is None and round_limit_note(2, 3) is None
    note = round_limit_note(3, 3)
    assert note is not None and "limit of 3 tool rounds" in note


def answer(meta: dict | None = None) -> MessageInfo:
    return MessageInfo(7, 1, 6, Role.ASSISTANT, "", MessageStatus.STREAMING, datetime.now(UTC),
                       model="tiny", backend="scripted", meta=dict(meta or {"context": {"v": 1}}))


def state(parts: list[str], **fields) -> AnswerState:
    saved: list[str] = []

    async def save(text: str) -> None:
        saved.append(text)

    out = AnswerState(parts, AnswerLogprobs(SamplingParams(), {}), Checkpoints(save))
    for name, value in fields.items():
        setattr(out, name, value)
    return out


def test_a_finished_answer_keeps_its_text_usage_notices_and_tool_log():
    notice = SafetyNotice("secret.openai_key", SafetyAction.WARN, (3, 9), "openai-api-key", "output")
    log = [{"type": "tool_call", "id": "c", "name": "calculator", "arguments": {}, "offset": 0}]
    s = state(["Hello", " there"], reason=FinishReason.STOP, notices=[notice], tool_log=log,
              usages=[Usage(10, 4, 0.05, 40.0), Usage(30, 6, 0.5, 60.0, 8)])
    fields = final_fields(answer(), s)
    assert fields["content"] == "Hello there" and fields["status"] is MessageStatus.COMPLETE
    assert fields["meta"]["context"] == {"v": 1} and fields["meta"]["tools"] == log
    assert fields["meta"]["safety"] == [{"category": "secret.openai_key", "action": "warn", "span": [3, 9],
                                         "rule": "openai-api-key", "stage": "output"}]
    # both rounds' tokens; the first round's time to first token; tokens over the rounds' time
    assert fields["completion_tokens"] == 10 and fields["time_to_first_token"] == 0.05
    assert abs(fields["tokens_per_second"] - 10 / (4 / 40.0 + 6 / 60.0)) < 1e-9
    assert finished_log(answer(), s, 30)["tool_calls"] == 1


def test_a_blocked_answer_keeps_its_notices_never_its_text():
    s = state(["partial text"], reason=FinishReason.BLOCKED)
    fields = final_fields(answer(), s)
    assert fields["content"] == "" and fields["status"] is MessageStatus.BLOCKED


def test_a_broken_stream_is_interrupted_a_stopped_answer_stopped():
    broken = final_fields(answer(), state(["So far"], reason=FinishReason.ERROR, interrupted=True, error="lost"))
    assert broken["status"] is MessageStatus.INTERRUPTED and broken["error"] == "lost"
    stopped = final_fields(answer(), state(["So far"], reason=FinishReason.CANCELLED))
    assert stopped["status"] is MessageStatus.STOPPED and "meta" not in stopped  # meta unchanged: not rewritten
