"""Tools on, a question that plainly wants one, and a model that answers without calling it:
the user is told (an AnswerNotice before Finished, kept with the answer). Real Engine, scripted
backend; the questions are the ones a new user tried."""

from __future__ import annotations

import asyncio

import pytest

from tests.engine.tools.conftest import by_round, call, collect
from wren.engine.events import AnswerNotice, Finished, NoticeKind, event_from_dict, event_to_dict
from wren.engine.records import SendOptions
from wren.engine.tools.capability import expected_tool

TOOLS = ("calculator", "current_datetime")


def run(coro):
    return asyncio.run(coro)


async def _ask(engine, question, tools=TOOLS):
    conv = await engine.conversations.create()
    events = await collect(engine.chat.send(conv.id, question, SendOptions(tools=tools)))
    stored = (await engine.conversations.messages(conv.id))[-1]
    return events, stored


def test_an_arithmetic_answer_without_the_calculator_is_flagged(make_engine):
    async def main():
        engine = make_engine("= 690.5")
        out = await _ask(engine, "What is 1234.5 × 87 / 3?")
        await engine.close()
        return out

    events, stored = run(main())
    notices = [e for e in events if isinstance(e, AnswerNotice)]
    assert len(notices) == 1 and notices[0].about is NoticeKind.TOOL_NOT_CALLED
    assert "without calling the calculator tool" in notices[0].text and "may be wrong" in notices[0].text
    assert isinstance(events[-1], Finished) and events.index(notices[0]) < len(events) - 1  # before Finished
    assert stored.content == "= 690.5"
    assert stored.meta["notices"] == [{"about": "tool_not_called", "text": notices[0].text}]
    # it crosses a socket as itself (wren ask's resident engine, --json)
    assert event_from_dict(event_to_dict(notices[0])) == notices[0]


def test_todays_date_without_the_date_tool_is_flagged(make_engine):
    async def main():
        engine = make_engine("Today is 2023-12-31.")
        out = await _ask(engine, "What is today's date?")
        await engine.close()
        return out

    events, _ = run(main())
    notices = [e for e in events if isinstance(e, AnswerNotice)]
    assert len(notices) == 1 and "current_datetime" in notices[0].text


def test_no_notice_when_the_tool_was_called_or_not_wanted_or_not_offered(make_engine):
    async def main():
        engine = make_engine(by_round(call("calculator", expression="1234.5 * 87 / 3"), "It is 35,800.5."))
        called, _ = await _ask(engine, "What is 1234.5 × 87 / 3?")
        await engine.close()
        engine = make_engine("Paris.")
        plain, _ = await _ask(engine, "What is the capital of France?")
        off, stored = await _ask(engine, "What is 1234.5 × 87 / 3?", tools=())
        await engine.close()
        return called, plain, off, stored

    called, plain, off, stored = run(main())
    for events in (called, plain, off):
        assert not [e for e in events if isinstance(e, AnswerNotice)]
    assert "notices" not in stored.meta


@pytest.mark.parametrize(("question", "tool"), [
    ("What is 1234.5 × 87 / 3?", "calculator"),
    ("what's 17*23", "calculator"),
    ("Calculate 15% of 2,400", "calculator"),
    ("12 - 5 = ?", "calculator"),
    ("What is today's date?", "current_datetime"),
    ("what day is it", "current_datetime"),
    ("What time is it now?", "current_datetime"),
    ("What happened in 1990-2000?", None),
    ("Call me on 555-1234 tomorrow", None),
    ("My birthday is 12/05/1990, remember it", None),
    ("Write a poem about the sea", None),
])
def test_which_questions_count_as_wanting_a_tool(question, tool):
    assert expected_tool(question, TOOLS) == tool
    assert expected_tool(question, ()) is None
