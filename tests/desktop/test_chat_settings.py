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


def test_a_new_chat_says_to_send_first(open_window, qtbot):
    window = open_window("ok")
    window.conversations.new_chat()
    window.chat_settings_dialog = None
    qtbot.mouseClick(window.chat_settings_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "first message" in window.status.currentMessage(), timeout=5000)
    assert window.chat_settings_dialog is None
