"""`wren ask` with a thinking model (scripted backend, the real Qwen3 template): thinking
dimmed before the answer on a terminal, never in piped output, left out with
--hide-thinking, and reasoning events with --json."""

from __future__ import annotations

import json
import sys

import pytest

from tests.engine.cli.conftest import FakeTerminal
from wren.engine.terminal.main import main
from wren.engine.terminal.output import DIM, NORMAL

from .conftest import QWEN3, thinking_model_dir

REPLY = "<think>\nThe user greets me.\x1b[31m\n</think>\n\nHello!"


@pytest.fixture
def thinker(wren_home, tmp_path, monkeypatch):
    """`wren` in this process answers with a Qwen3-template model through the scripted backend."""
    from wren.engine.api import Engine
    from wren.engine.inference.backends.scripted import ScriptedBackend
    from wren.engine.modelhub.registry import ModelRegistry
    from wren.engine.store import Store

    ModelRegistry(wren_home / "models").register_folder(thinking_model_dir(tmp_path, QWEN3, "qwen3"), name="thinker")
    store = Store(wren_home / "wren.sqlite3")
    store.set_setting("model", "thinker")
    store.close()
    backend = ScriptedBackend(REPLY)
    original = Engine.open.__func__

    def open_(cls, home=None, **kwargs):
        kwargs["backend_factory"] = lambda name: backend
        return original(cls, home, **kwargs)

    monkeypatch.setattr(Engine, "open", classmethod(open_))
    return backend


def test_on_a_terminal_thinking_is_dimmed_before_the_answer(thinker, monkeypatch):
    tty = FakeTerminal()
    monkeypatch.setattr(sys, "stdout", tty)
    assert main(["ask", "hi"]) == 0
    # the thinking's own escape is filtered out; Wren's dimming is the only one
    assert tty.getvalue() == f"{DIM}The user greets me.\n{NORMAL}\n\nHello!\n"


def test_hide_thinking_leaves_the_answer_alone(thinker, monkeypatch):
    tty = FakeTerminal()
    monkeypatch.setattr(sys, "stdout", tty)
    assert main(["ask", "--hide-thinking", "hi"]) == 0
    assert tty.getvalue() == "Hello!\n"


def test_piped_output_is_the_answer_alone(thinker, capsys):
    assert main(["ask", "hi"]) == 0
    assert capsys.readouterr().out == "Hello!\n"


def test_json_gives_reasoning_events_apart_from_deltas(thinker, capsys):
    assert main(["ask", "--json", "hi"]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    reasoning = "".join(e["text"] for e in events if e["type"] == "reasoning")
    assert reasoning == "The user greets me.\x1b[31m\n"  # data whole: JSON escapes it
    assert "".join(e["text"] for e in events if e["type"] == "delta") == "Hello!"
    first_delta = next(i for i, e in enumerate(events) if e["type"] == "delta")
    assert max(i for i, e in enumerate(events) if e["type"] == "reasoning") < first_delta
    usage = next(e for e in events if e["type"] == "usage")
    assert usage["reasoning_tokens"] > 0


def test_json_with_hide_thinking_has_no_reasoning_events(thinker, capsys):
    assert main(["ask", "--json", "--hide-thinking", "hi"]) == 0
    types = {json.loads(line)["type"] for line in capsys.readouterr().out.splitlines()}
    assert "reasoning" not in types and "delta" in types


def test_wren_chat_prints_thinking_dimmed_on_a_terminal_and_not_in_a_pipe(thinking_engine):
    import asyncio
    import io

    from wren.engine.terminal.chat import Chat
    from wren.engine.terminal.output import Output

    engine = thinking_engine(REPLY)

    async def scenario() -> tuple[str, str]:
        await engine.models.load()
        sampling = await engine.settings.default_sampling()
        tty, pipe = FakeTerminal(), io.StringIO()
        await Chat(engine, sampling, out=Output(tty), err=io.StringIO()).handle("hi")
        await Chat(engine, sampling, out=Output(pipe), err=io.StringIO()).handle("hi")
        await engine.close()
        return tty.getvalue(), pipe.getvalue()

    on_tty, piped = asyncio.run(scenario())
    assert on_tty == f"{DIM}The user greets me.\n{NORMAL}\n\nHello!\n"
    assert piped == "Hello!\n"


def test_thinking_off_reaches_the_template_and_a_bad_choice_is_refused(thinker, capsys):
    thinker.reply = lambda prompt: "Hello!"
    assert main(["ask", "--thinking", "off", "hi"]) == 0
    assert capsys.readouterr().out == "Hello!\n"
    assert thinker.loaded[-1].prompts[-1].endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    with pytest.raises(SystemExit):
        main(["ask", "--thinking", "loud", "hi"])
    assert "invalid choice: 'loud'" in capsys.readouterr().err
