"""`wren ask` says an AnswerNotice on standard error: a tool-shaped question answered without
the tool, and a file too long for the window (the answer itself stays on standard output)."""

from __future__ import annotations

import json

from tests.engine.cli.conftest import set_reply
from wren.engine.terminal.main import main


def test_an_arithmetic_answer_without_the_calculator_is_noted(scripted, capsys):
    set_reply(scripted, "= 690.5")
    assert main(["ask", "--tools", "calculator", "What is 1234.5 × 87 / 3?"]) == 0
    out = capsys.readouterr()
    assert out.out == "= 690.5\n"
    assert "wren: note: tiny answered without calling the calculator tool" in out.err


def test_json_carries_the_notice_as_an_event(scripted, capsys):
    set_reply(scripted, "Today is 2023-12-31.")
    assert main(["ask", "--json", "--tools", "current_datetime", "What is today's date?"]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    notices = [e for e in events if e["type"] == "answer_notice"]
    assert [n["about"] for n in notices] == ["tool_not_called"]
    assert events[-1]["type"] == "finished"


def test_no_note_without_tools(scripted, capsys):
    set_reply(scripted, "= 690.5")
    assert main(["ask", "What is 1234.5 × 87 / 3?"]) == 0
    assert "note:" not in capsys.readouterr().err
