"""A thinking model in the window (scripted backend, the real Qwen3 template): the answer's
thinking streams into a folded "Thinking…" section above its text, then says "Thought for
N s" and opens by click or keyboard; the chat settings offer thinking on/off where the model
takes it; the context inspector shows an earlier answer's thinking as left out."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt, QTimer

from tests.engine.reasoning.conftest import QWEN3, R1_DISTILL, thinking_model_dir

THOUGHT = "The user greets me; I should greet back."
REPLY = f"<think>\n{THOUGHT}\n</think>\n\nHello there, nice to meet you today."


@pytest.fixture
def thinking_window(open_window, wren_home, tmp_path):
    from tests.fixtures.tiny import tiny_engine
    from wren.engine.inference.backends.scripted import ScriptedBackend

    def make(reply=REPLY, delay: float = 0.0):
        scripted = ScriptedBackend(reply, delay=delay)
        engine = tiny_engine(wren_home, thinking_model_dir(tmp_path, QWEN3, "qwen3"),
                             backend_factory=lambda name: scripted)
        engine.scripted = scripted
        return open_window(engine=engine)

    return make


def test_thinking_streams_folded_above_the_answer_then_says_how_long(thinking_window, send, qtbot):
    window = thinking_window(delay=0.01)
    seen_live: list[str] = []

    def watch() -> None:  # what the answer's section says while the answer streams
        widgets = window.chat.message_widgets()
        answer = widgets[-1] if len(widgets) > 1 else None
        if answer is not None and answer.thinking is not None and answer.thinking.isVisible():
            seen_live.append(answer.thinking.header.text())

    timer = QTimer()
    timer.setInterval(5)
    timer.timeout.connect(watch)
    timer.start()
    send(window, "hello")
    timer.stop()
    answer = window.chat.message_widgets()[-1]
    section = answer.thinking
    assert "Thinking…" in seen_live  # it was shown live, folded, while the model thought
    assert section.isVisible() and not section.expanded and not section.text_label.isVisible()
    assert section.header.text().startswith("Thought for ") and section.header.text().endswith(" s")
    assert "Thought for" in section.header.accessibleName() and "folded" in section.header.accessibleName()
    assert answer.text() == "Hello there, nice to meet you today."  # the answer carries no thinking
    assert THOUGHT not in answer.body.text()

    qtbot.mouseClick(section.header, Qt.MouseButton.LeftButton)  # open by click
    assert section.expanded and section.text_label.isVisible()
    assert section.text_label.text() == THOUGHT and "open" in section.header.accessibleName()
    section.header.setFocus()
    qtbot.keyClick(section.header, Qt.Key.Key_Return)  # fold by keyboard
    assert not section.expanded and not section.text_label.isVisible()
    qtbot.keyClick(section.header, Qt.Key.Key_Space)
    assert section.expanded


def test_a_stored_answer_shows_its_thinking_folded_and_a_plain_model_none(thinking_window, open_window, send, arun):
    window = thinking_window()
    send(window, "hello")
    conversation_id = window.conversations.current_id
    arun(window.conversations.open(conversation_id))  # rebuilt from the store
    answer = window.chat.message_widgets()[-1]
    assert answer.thinking.isVisible() and answer.thinking.text() == THOUGHT
    assert answer.thinking.header.text().startswith("Thought for")

    plain = open_window("Hi.")
    send(plain, "hello")
    assert not plain.chat.message_widgets()[-1].thinking.isVisible()


def test_chat_settings_turn_thinking_off_for_this_chat(thinking_window, send, qtbot, arun):
    window = thinking_window(reply="Hello.")
    send(window, "hello")
    conversation_id = window.conversations.current_id
    window.chat_settings_dialog = None
    qtbot.mouseClick(window.chat_settings_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.chat_settings_dialog is not None and window.chat_settings_dialog.isVisible(),
                    timeout=10000)
    dialog = window.chat_settings_dialog
    assert dialog.thinking.isVisible() and dialog.thinking.accessibleName() == "Thinking in this chat"
    assert [dialog.thinking.itemText(i) for i in range(dialog.thinking.count())] == ["The model's default", "On", "Off"]
    dialog.thinking.setCurrentText("Off")
    qtbot.mouseClick(dialog.buttons.button(dialog.buttons.StandardButton.Save), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not dialog.isVisible(), timeout=10000)
    assert arun(window.engine.conversations.settings(conversation_id))["thinking"] == "off"
    send(window, "again")
    assert window.engine.scripted.loaded[-1].prompts[-1].endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_chat_settings_hide_thinking_for_a_model_without_it(open_window, send, qtbot):
    window = open_window("Hi.")
    send(window, "hello")
    window.chat_settings_dialog = None
    qtbot.mouseClick(window.chat_settings_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.chat_settings_dialog is not None and window.chat_settings_dialog.isVisible(),
                    timeout=10000)
    dialog = window.chat_settings_dialog
    assert not dialog.thinking.isVisible() and "thinking" not in dialog.changes()


def test_chat_settings_say_a_model_without_a_switch_always_thinks(open_window, wren_home, tmp_path, send, qtbot):
    """A DeepSeek-R1 distill (its real template: no enable_thinking, no /no_think) thinks but
    cannot be told not to: the control is shown disabled and says so, instead of hiding."""
    from tests.fixtures.tiny import tiny_engine
    from wren.engine.inference.backends.scripted import ScriptedBackend

    scripted = ScriptedBackend("Hello.")
    engine = tiny_engine(wren_home, thinking_model_dir(tmp_path, R1_DISTILL, "qwen2"),
                         backend_factory=lambda name: scripted)
    window = open_window(engine=engine)
    send(window, "hello")
    window.chat_settings_dialog = None
    qtbot.mouseClick(window.chat_settings_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.chat_settings_dialog is not None and window.chat_settings_dialog.isVisible(),
                    timeout=10000)
    dialog = window.chat_settings_dialog
    assert dialog.thinking.isVisible() and not dialog.thinking.isEnabled()
    assert dialog.thinking.currentText() == "Always (this model cannot be told not to think)"
    assert "no switch for thinking" in dialog.thinking.toolTip()
    assert "thinking" not in dialog.changes()


def test_the_inspector_shows_earlier_thinking_left_out(thinking_window, send, qtbot):
    window = thinking_window()
    send(window, "hello")
    send(window, "and again")
    answer = window.chat.message_widgets()[-1]
    answer.inspect_button.click()
    qtbot.waitUntil(lambda: window.context.inspector is not None and window.context.inspector.isVisible())
    rows = window.context.inspector.rows()
    thinking = [row for row in rows if row[0] == "Earlier thinking"]
    assert len(thinking) == 1
    label, state, tokens, source, notes = thinking[0]
    first_answer = window.chat.message_widgets()[1]
    assert state == "left out" and int(tokens) > 0 and source == f"message {first_answer.message_id}"
    assert "not sent back" in notes
    assert THOUGHT not in window.context.inspector.prompt_view.toPlainText()
