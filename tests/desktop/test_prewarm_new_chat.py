"""The first message of a new chat is pre-warmed and checked for overflow while typing."""

from __future__ import annotations


def test_a_new_chats_draft_is_prewarmed(open_window, qtbot, arun, send):
    window = open_window("An answer.")
    assert window.conversations.current_id is None
    engine = window.engine
    with qtbot.waitSignal(window.prewarm.warming, timeout=5000):
        window.composer.edit.setPlainText("a first question for a new chat")
    cached = arun(engine.chat.prepared())
    send(window, "a first question for a new chat")
    answer = arun(engine.conversations.messages(window.conversations.current_id))[-1]
    assert cached == answer.prompt_tokens > 0


def test_a_new_chats_oversized_draft_is_flagged_while_typing(open_window, qtbot):
    window = open_window("ok", context_length=64)
    assert window.conversations.current_id is None
    with qtbot.waitSignal(window.prewarm.overflow, timeout=5000) as blocker:
        window.composer.edit.setPlainText("word " * 400)
    assert "nothing was sent" in blocker.args[0]
