"""The composer's Tools menu in the real window: it says what a new chat starts with and that
Settings → Tools is the on/off layer, "Use these for new chats" makes the ticks the default a
new chat starts from, and a model whose chat template has no tool format is marked."""

from __future__ import annotations

import json
import shutil

from tests.engine.tools.test_native_template import TEMPLATE as TOOLS_TEMPLATE

LIVE_MS = 15000


def _open_menu(window, qtbot):
    button = window.composer.tools_button
    button.menu_.aboutToShow.emit()  # what opening the menu does: the tools are listed afresh
    qtbot.waitUntil(lambda: button.loaded and "calculator" in button.actions_by_name(), timeout=5000)
    return button


def _note(button, name):
    action = button.action_named(name)
    assert action is not None, f"the menu has no {name}"
    return action.text()


def test_new_chats_start_from_the_default_the_menu_sets_and_says(open_window, qtbot, arun, send):
    window = open_window("Plain answer.")
    button = _open_menu(window, qtbot)
    # every tool is on in Settings, yet a new chat starts with none: the menu says both layers
    assert all(t.enabled for t in arun(window.engine.tools.list()))
    assert button.chosen() == [] and button.text() == "Tools · off"
    assert _note(button, "newChatToolsNote") == "New chats start with: no tools"
    assert "Settings → Tools switches tools on or off" in _note(button, "toolLayersNote")

    button.actions_by_name()["calculator"].trigger()
    button.action_named("useForNewChatsAction").trigger()
    qtbot.waitUntil(lambda: arun(window.engine.settings.get("tools.default")) == ["calculator"], timeout=5000)
    assert _note(button, "newChatToolsNote") == "New chats start with: calculator"

    window.conversations.new_chat()
    qtbot.waitUntil(lambda: button.loaded and button.chosen() == ["calculator"], timeout=5000)
    assert button.actions_by_name()["calculator"].isChecked() and button.text().startswith("Tools · 1")
    send(window, "a new chat")  # the chat keeps the tools it started with
    assert arun(window.engine.tools.for_conversation(window.conversations.current_id)) == ["calculator"]


def test_a_model_without_a_tool_format_is_marked_and_one_with_it_is_not(open_window, qtbot, tiny_model_dir,
                                                                          tmp_path):
    window = open_window("Plain answer.")
    button = _open_menu(window, qtbot)
    qtbot.waitUntil(lambda: button.model_calls_tools is not None, timeout=5000)  # once the model is loaded
    assert button.model_calls_tools is False
    assert "does not call tools" in _note(button, "toolSupportNote")
    button.actions_by_name()["calculator"].trigger()
    assert "does not call tools" in button.toolTip()

    # the same model with a chat template that renders tools: no mark
    with_tools = tmp_path / "tools-model"
    shutil.copytree(tiny_model_dir, with_tools)
    config = json.loads((with_tools / "tokenizer_config.json").read_text())
    config["chat_template"] = TOOLS_TEMPLATE
    (with_tools / "tokenizer_config.json").write_text(json.dumps(config))
    from wren.engine.tokenize import Tokenizer
    from wren.engine.tools.capability import tool_support

    support = tool_support("tools-model", Tokenizer.from_dir(with_tools))
    assert support.calls_tools and "can call tools" in support.reason
    button.set_support(support.calls_tools, support.reason)
    assert button.action_named("toolSupportNote") is None
    assert "does not call tools" not in button.toolTip()


def test_an_answer_that_skipped_the_wanted_tool_says_so_in_the_transcript(open_window, qtbot, send):
    window = open_window("= 690.5")  # what the starter model wrote, with no call
    button = _open_menu(window, qtbot)
    button.actions_by_name()["calculator"].trigger()
    send(window, "What is 1234.5 × 87 / 3?")
    answer = window.chat.last_answer()
    assert answer.text() == "= 690.5"
    label = answer.notices_label
    assert label is not None and label.isVisible()
    assert "without calling the calculator tool" in label.text() and "may be wrong" in label.text()
    # a question that wants no tool gets no note
    send(window, "Thanks, and what is the capital of France?")
    assert not window.chat.last_answer().notices_label.isVisible()
