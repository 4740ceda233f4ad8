"""What the model saw (the context inspector), temporary chats, and a message too big to fit."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from wren.engine.errors import NotFound


def test_the_inspector_shows_every_part_and_the_exact_prompt(open_window, send, qtbot, arun):
    window = open_window("Use metric units.")
    arun(window.engine.settings.set_instructions("I am a nurse in Porto.", "Be brief."))
    arun(window.engine.memories.add("I prefer metric units"))
    send(window, "Which units should the recipe use?")
    answer = window.chat.message_widgets()[1]
    assert answer.inspect_button.isVisible()

    answer.inspect_button.click()
    qtbot.waitUntil(lambda: window.context.inspector is not None and window.context.inspector.isVisible())
    inspector = window.context.inspector
    rows = inspector.rows()
    by_part = {row[0]: row for row in rows}
    assert by_part["Your new message"][1] == "included"
    assert by_part["About you"][1] == "included" and "nurse in Porto" in by_part["About you"][4]
    assert by_part["How to respond"][1] == "included"
    assert by_part["Memory"][1:2] == ("included",) and "metric units" in by_part["Memory"][4]
    assert all(int(row[2].replace(",", "")) > 0 for row in rows)
    report = arun(window.engine.conversations.context_report(answer.message_id))
    assert len(rows) == len(report.parts)
    prompt = inspector.prompt_view.toPlainText()
    assert prompt == report.rendered_prompt and "Which units should the recipe use?" in prompt
    assert f"{report.prompt_tokens:,}" in inspector.summary_label.text()
    assert "4,096" in inspector.summary_label.text()


def test_older_turns_show_as_summarized_in_the_inspector(open_window, send, qtbot, arun):
    def reply(prompt: str) -> str:
        return "They talked about numbers." if "running summary" in prompt else "Fine, noted and understood."

    window = open_window(reply, context_length=1024)
    for i in range(14):
        arun(_turn(window, f"Here is fact number {i}: the value is {i * 7} and it matters a great deal."))
    send(window, "And the last one?")
    answer = window.chat.message_widgets()[-1]
    inspector = arun(window.context.inspect(answer.message_id))
    states = {(row[0].split(" (")[0], row[1]) for row in inspector.rows()}
    assert ("Summary of older turns", "included") in states
    assert any(state == "summarized" for _, state in states)


async def _turn(window, text: str) -> None:
    conversation_id = window.conversations.current_id
    if conversation_id is None:
        conversation_id = (await window.engine.conversations.create()).id
        await window.conversations.open(conversation_id)
    async for _ in window.engine.chat.send(conversation_id, text):
        pass


def test_a_temporary_chat_is_marked_and_leaves_nothing_behind(open_window, send, qtbot, arun, wren_home):
    window = open_window("Sure.")
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)
    qtbot.keyClick(window.composer.edit, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    assert window.conversations.temporary
    assert window.temporary_banner.isVisible() and "not saved" in window.temporary_banner.text()
    assert window.header.property("temporary") is True
    assert window.title_label.text() == "Temporary chat" and window.windowTitle() == "Temporary chat — Wren"
    assert window.temporary_button.isChecked()

    send(window, "Remember that my secret hobby is falconry")
    temp_id = window.conversations.current_id
    user, answer = window.chat.message_widgets()
    assert answer.text() == "Sure."
    # Nothing is remembered, and the chat says why instead of staying silent.
    notes = " ".join(answer.notes.texts()).lower()
    assert "memory saved" not in notes and "temporary" in notes
    assert not user.remember_button.isVisibleTo(user)
    assert window.title_label.text() == "Temporary chat"  # no generated title replaces the mark
    assert window.sidebar.conversation_ids() == []
    # Temporary ids are beyond 32 bits: every action must still reach the right message.
    inspector = arun(window.context.inspect(answer.message_id))
    assert "falconry" in inspector.prompt_view.toPlainText()
    inspector.close()
    with qtbot.waitSignal(window.conversations.turn_finished, timeout=15000):
        answer.action_button.click()  # Regenerate
    assert window.chat.message_widgets()[1].version_label.text() == "2/2"

    window.activateWindow()  # back from the inspector: shortcuts go to the active window
    qtbot.waitUntil(window.isActiveWindow)
    with qtbot.waitSignal(window.conversations.temporary_left, timeout=5000) as left:
        qtbot.keyClick(window.composer.edit, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    assert left.args == [temp_id]
    assert not window.temporary_banner.isVisible() and window.header.property("temporary") is False
    assert window.title_label.text() == "New chat" and not window.temporary_button.isChecked()
    with pytest.raises(NotFound):
        arun(window.engine.conversations.get(temp_id))
    assert arun(window.engine.memories.list()) == []
    assert arun(window.engine.conversations.list()) == []
    files = list(wren_home.glob("wren.sqlite3*"))
    assert files
    for path in files:
        assert b"falconry" not in path.read_bytes(), path

    # The button starts one too, and a normal chat afterwards is saved as usual.
    window.temporary_button.click()
    assert window.conversations.temporary and window.temporary_banner.isVisible()
    window.temporary_button.click()
    assert not window.conversations.temporary
    send(window, "A normal question")
    assert len(arun(window.engine.conversations.list())) == 1


def test_a_message_too_big_for_the_window_is_refused_before_sending(open_window, send, arun):
    window = open_window(context_length=512)
    send(window, " ".join(f"word{i}" for i in range(900)))
    assert window.chat.message_widgets() == []
    assert window.chat.notice_label.text().startswith("Your message is about")
    assert "nothing was sent" in window.chat.notice_label.text()
    assert window.composer.text().startswith("word0 word1")
    assert window.conversations.current_id is None  # no chat was made for it
    assert arun(window.engine.conversations.list()) == []
