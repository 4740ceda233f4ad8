"""Where a Ctrl+C at the prompt goes, by what readline has done with the line: before Enter it
drops the line; once readline has taken Enter (the terminal back in line mode) it stops the
answer that line asks for. Raised there, it dropped a line already on the screen
(test_chat_pty.py::test_ctrl_c_right_after_enter_stops_the_answer_it_asked_for, one press in
about 50 on two busy cores). The press is given to the router as its thread would, without
sending signals (its thread is not started here)."""

from __future__ import annotations

import asyncio

import pytest

from wren.engine.terminal import sigint
from wren.engine.terminal.sigint import SigintRouter


@pytest.fixture
def router() -> SigintRouter:
    r = SigintRouter()
    r._active = True  # as start() leaves it, without blocking signals or starting its thread
    return r


def _press_at_prompt(r: SigintRouter) -> None:
    """What the router's thread and its nudge do with a press at the prompt."""
    with r._lock:
        r._wanted = r._prompts
    r._nudged(0, None)


def _answer(r: SigintRouter) -> list[str]:
    """An answer that starts after the prompt: what its Ctrl+C callback heard."""
    heard: list[str] = []

    async def answer() -> None:
        with r.on_interrupt(lambda: heard.append("stop")) as routed:
            assert routed
            await asyncio.sleep(0.01)

    asyncio.run(answer())
    return heard


def test_a_press_after_readline_took_enter_stops_the_answer(router, monkeypatch):
    monkeypatch.setattr(sigint, "_terminal_cooked", lambda: True)  # readline gave the terminal back
    with router.busy():
        with router.prompt():
            router.before_read()
            router.line_begun()
            _press_at_prompt(router)  # no KeyboardInterrupt: the line stands
        assert _answer(router) == ["stop"]


def test_a_press_while_readline_reads_drops_the_line(router, monkeypatch):
    monkeypatch.setattr(sigint, "_terminal_cooked", lambda: False)  # readline's raw mode
    with router.busy():
        with pytest.raises(KeyboardInterrupt), router.prompt():
            router.before_read()
            router.line_begun()
            _press_at_prompt(router)
        assert _answer(router) == []  # nothing kept for the next answer


def test_a_press_before_readline_began_drops_the_line(router, monkeypatch):
    monkeypatch.setattr(sigint, "_terminal_cooked", lambda: True)  # line mode, but no line begun yet
    with router.busy():
        with pytest.raises(KeyboardInterrupt), router.prompt():
            router.before_read()
            _press_at_prompt(router)
        assert _answer(router) == []


def test_a_press_between_the_lines_of_one_message_drops_the_message(router, monkeypatch):
    monkeypatch.setattr(sigint, "_terminal_cooked", lambda: True)
    with router.busy():
        with pytest.raises(KeyboardInterrupt), router.prompt():
            router.before_read()
            router.line_begun()
            _press_at_prompt(router)  # after the first line's Enter: carried
            router.before_read()  # the message goes on: the press drops it
        assert _answer(router) == []


def test_a_carried_press_is_not_kept_past_its_prompt(router, monkeypatch):
    monkeypatch.setattr(sigint, "_terminal_cooked", lambda: True)
    with router.busy(), router.prompt():
        router.before_read()
        router.line_begun()
        _press_at_prompt(router)
    # a command answered without an answer to stop: the press ends with the busy spell
    with router.busy():
        with router.prompt():
            router.before_read()
            router.line_begun()
        assert _answer(router) == []
