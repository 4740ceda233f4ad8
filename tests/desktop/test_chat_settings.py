"""The chat settings panel (header → Chat settings): this chat's system prompt, sampling
preset, tools and memory switch are saved with the chat and reach its next Send."""

from __future__ import annotations

from PySide6.QtCore import Qt

from wren.engine.ghost import CHAT_SAMPLING_PRESETS


def _open_panel(window, qtbot):
    window.chat_settings_dialog = None
    qtbot.mouseClick(window.chat_settings_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.chat_settings_dialog is not None and window.chat_settings_dialog.isVisible(),
                    timeout=10000)
    return window.chat_settings_dialog


def test_edits_persist_and_reach_the_next_send(open_window, send, qtbot, arun):
    window = open_window("Arr, noted.")
    send(window, "Hello")
    conversation_id = window.conversations.current_id
    dialog = _open_panel(window, qtbot)
    assert dialog.system_prompt.toPlainText() == "" and dialog.preset.currentText() == "Model defaults"
    assert dialog.memory.isChecked()
    chosen = arun(window.engine.tools.for_conversation(conversation_id))  # the composer's menu keeps one too
    assert dialog.tools_default.isChecked() == (chosen is None)
    tool = sorted(dialog.tool_boxes)[0]
    dialog.system_prompt.setPlainText("You are a pirate. Answer like one.")
    dialog.preset.setCurrentText("Precise")
    dialog.memory.setChecked(False)
    dialog.tools_default.setChecked(False)
    for name, box in dialog.tool_boxes.items():
        assert box.isEnabled()
        box.setChecked(name == tool)  # this chat: that one tool
    qtbot.mouseClick(dialog.buttons.button(dialog.buttons.StandardButton.Save), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not dialog.isVisible(), timeout=10000)

    saved = arun(window.engine.conversations.settings(conversation_id))
    assert saved == {"system_prompt": "You are a pirate. Answer like one.", "sampling": CHAT_SAMPLING_PRESETS["Precise"],
                     "sampling_preset": "Precise", "memory": False, "thinking": None, "tools": [tool]}
    qtbot.waitUntil(lambda: window.composer.tools_button.loaded and window.composer.tools_button.chosen() == [tool],
                    timeout=5000)

    send(window, "Remember that I prefer metric units")
    prompt = window.engine.scripted.loaded[-1].prompts[-1]
    assert "You are a pirate. Answer like one." in prompt
    answer = arun(window.engine.conversations.messages(conversation_id))[-1]
    assert answer.sampling["temperature"] == CHAT_SAMPLING_PRESETS["Precise"]["temperature"]
    assert answer.sampling["top_p"] == CHAT_SAMPLING_PRESETS["Precise"]["top_p"]
    assert arun(window.engine.memories.list()) == []  # memory is off for this chat

    again = _open_panel(window, qtbot)  # what was saved is what the panel shows next time
    assert again.system_prompt.toPlainText() == "You are a pirate. Answer like one."
    assert again.preset.currentText() == "Precise" and not again.memory.isChecked()
    assert not again.tools_default.isChecked() and again.tool_boxes[tool].isChecked()
    again.system_prompt.setPlainText("")
    again.preset.setCurrentText("Model defaults")
    again.memory.setChecked(True)
    again.tools_default.setChecked(True)
    qtbot.mouseClick(again.buttons.button(again.buttons.StandardButton.Save), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not again.isVisible(), timeout=10000)
    assert arun(window.engine.conversations.settings(conversation_id)) == {
        "system_prompt": None, "sampling": None, "sampling_preset": None, "memory": None, "thinking": None,
        "tools": None}
    send(window, "Remember that I prefer metric units")
    assert "pirate" not in window.engine.scripted.loaded[-1].prompts[-1]
    assert [m.text for m in arun(window.engine.memories.list())] == ["I prefer metric units"]


def test_a_new_chats_settings_are_set_before_its_first_message_and_apply_to_its_first_answer(
        open_window, send, qtbot, arun):
    window = open_window("Arr, noted.")
    send(window, "Hello")  # another chat first: the new one must not inherit its settings
    window.conversations.new_chat()
    assert window.conversations.current_id is None
    dialog = _open_panel(window, qtbot)  # the empty new chat has its settings too
    assert dialog.system_prompt.toPlainText() == "" and dialog.preset.currentText() == "Model defaults"
    tool = sorted(dialog.tool_boxes)[0]
    dialog.system_prompt.setPlainText("You are a pirate. Answer like one.")
    dialog.preset.setCurrentText("Precise")
    dialog.memory.setChecked(False)
    dialog.tools_default.setChecked(False)
    for name, box in dialog.tool_boxes.items():
        box.setChecked(name == tool)
    qtbot.mouseClick(dialog.buttons.button(dialog.buttons.StandardButton.Save), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not dialog.isVisible(), timeout=10000)
    assert window.conversations.current_id is None  # no chat is made before its first message
    qtbot.waitUntil(lambda: window.composer.tools_button.chosen() == [tool], timeout=5000)

    again = _open_panel(window, qtbot)  # the panel shows what was set, still before the first message
    assert again.system_prompt.toPlainText() == "You are a pirate. Answer like one."
    assert again.preset.currentText() == "Precise" and not again.memory.isChecked()
    again.reject()

    send(window, "Remember that I prefer metric units")
    conversation_id = window.conversations.current_id
    assert conversation_id is not None
    assert "You are a pirate. Answer like one." in window.engine.scripted.loaded[-1].prompts[-1]
    answer = arun(window.engine.conversations.messages(conversation_id))[-1]
    assert answer.sampling["temperature"] == CHAT_SAMPLING_PRESETS["Precise"]["temperature"]
    assert answer.sampling["top_p"] == CHAT_SAMPLING_PRESETS["Precise"]["top_p"]
    saved = arun(window.engine.conversations.settings(conversation_id))
    assert saved["memory"] is False and saved["tools"] == [tool] and saved["sampling_preset"] == "Precise"
    assert arun(window.engine.memories.list()) == []  # memory is off for this chat from its first message

    window.conversations.new_chat()  # the next new chat starts from the app's settings again
    fresh = _open_panel(window, qtbot)
    assert fresh.system_prompt.toPlainText() == "" and fresh.memory.isChecked()
    fresh.reject()
