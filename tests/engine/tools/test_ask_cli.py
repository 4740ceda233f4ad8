"""`wren ask --tools/--tool-choice/--approve` against a scripted model: JSON tool events,
the terminal's lines, approvals, and bad names refused before anything runs."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from tests.engine.tools.conftest import by_round, call
from wren.engine.inference.backends.scripted import ScriptedBackend
from wren.engine.terminal import ask_tools as tool_ask
from wren.engine.terminal.main import main
from wren.engine.tools import builtin


@pytest.fixture
def scripted(wren_home, tiny_model_dir, monkeypatch):
    from wren.engine.inference import select
    from wren.engine.modelhub.registry import ModelRegistry

    ModelRegistry(wren_home / "models").register_folder(tiny_model_dir, name="tiny")
    backend = ScriptedBackend(by_round("Computing. " + call("calculator", expression="6*7"), "It is 42."))
    monkeypatch.setattr(select, "resolve_backend", lambda name: backend)
    return backend


def test_ask_json_has_tool_events_in_order(scripted, capsys):
    code = main(["ask", "--model", "tiny", "--tools", "calculator", "--json", "what is 6*7"])
    assert code == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    types = [line["type"] for line in lines if line["type"] not in ("delta", "prefill_progress")]
    assert types == ["started", "tool_call", "tool_result", "usage", "finished"]
    call_line = next(line for line in lines if line["type"] == "tool_call")
    result = next(line for line in lines if line["type"] == "tool_result")
    assert call_line["name"] == "calculator" and call_line["arguments"] == {"expression": "6*7"}
    assert result["id"] == call_line["id"] and result["content"] == "42" and result["is_error"] is False
    assert "".join(line["text"] for line in lines if line["type"] == "delta") == "Computing. It is 42."


def test_ask_shows_calls_on_stderr_and_the_answer_on_stdout(scripted, capsys):
    assert main(["ask", "--model", "tiny", "--tools", "all", "what is 6*7"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == "Computing. It is 42."
    assert '[tool] calculator {"expression": "6*7"}' in err and "[result] 42" in err


def test_approval_on_the_command_line(scripted, capsys, monkeypatch):
    monkeypatch.setattr(builtin, "CALCULATOR", replace(builtin.CALCULATOR, needs_approval=True))
    asked = []
    monkeypatch.setattr(tool_ask, "_ask_terminal", lambda event: asked.append(event.name) or "deny")
    assert main(["ask", "--model", "tiny", "--tools", "calculator", "--json", "q"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    types = [line["type"] for line in lines]
    assert "tool_approval_needed" in types and asked == ["calculator"]
    assert next(line for line in lines if line["type"] == "tool_result")["content"] == "the user declined"

    asked.clear()
    assert main(["ask", "--model", "tiny", "--tools", "calculator", "--approve", "--json", "q"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert asked == [] and next(line for line in lines if line["type"] == "tool_result")["content"] == "42"


@pytest.mark.parametrize("flags, message", [
    (["--tools", "calculator,nope"], "--tools names nope, which is not a tool"),
    (["--tool-choice", "nope"], "--tool-choice nope is not auto, none or a tool"),
])
def test_bad_tool_names_are_refused_first(scripted, capsys, flags, message):
    assert main(["ask", "--model", "tiny", *flags, "q"]) != 0
    assert message in capsys.readouterr().err
    assert scripted.loaded == []  # the model was never loaded


def test_tool_choice_none_sends_no_tools(scripted, capsys):
    assert main(["ask", "--model", "tiny", "--tools", "calculator", "--tool-choice", "none", "q"]) == 0
    assert "<tool_call>" in capsys.readouterr().out
    assert "<tools>" not in scripted.loaded[0].prompts[0]


@pytest.mark.skipif(not hasattr(__import__("os"), "openpty"), reason="no pseudo-terminals here")
@pytest.mark.parametrize("typed, decision", [("x\no\n", "once"), ("always\n", "always"), ("n\n", "deny")])
def test_approval_is_asked_on_a_real_terminal(monkeypatch, typed, decision):
    """The terminal is not seekable: opening it "r+" in text mode failed, and every call was
    declined as if there were no terminal. A pseudo-terminal stands in for /dev/tty."""
    import os

    from wren.engine.events import ToolApprovalNeeded

    master, slave = os.openpty()
    try:
        monkeypatch.setattr(tool_ask, "TTY", os.ttyname(slave))
        os.write(master, typed.encode())
        event = ToolApprovalNeeded("call_1_1", "calc__add", {"a": 2, "b": 3})
        assert tool_ask._ask_terminal(event) == decision
        import select

        shown = ""
        while "Allow?" not in shown and select.select([master], [], [], 5)[0]:
            shown += os.read(master, 65536).decode()
        assert "The model wants to run calc__add" in shown and '"a": 2' in shown and "Allow?" in shown
    finally:
        os.close(master)
        os.close(slave)
