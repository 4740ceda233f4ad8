"""Typing pauses → the engine pre-warms the draft, and Send then reuses the cache."""

from __future__ import annotations


def test_typing_prewarms_the_draft_and_send_reuses_it(open_window, qtbot, arun, send):
    window = open_window("An answer.")
    send(window, "first question")
    engine = window.engine
    with qtbot.waitSignal(window.prewarm.warming, timeout=5000):
        window.composer.edit.setPlainText("what about the second one")
    cached = arun(engine.chat.prepared())
    send(window, "what about the second one")
    answer = arun(engine.conversations.messages(window.conversations.current_id))[-1]
    assert cached == answer.prompt_tokens > 0


def test_an_oversized_draft_is_flagged_while_typing(open_window, qtbot, send):
    window = open_window("ok", context_length=64)
    send(window, "hi")
    with qtbot.waitSignal(window.prewarm.overflow, timeout=5000) as blocker:
        window.composer.edit.setPlainText("word " * 400)
    assert "nothing was sent" in blocker.args[0]
