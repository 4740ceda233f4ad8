"""Replay, in an answer's "⋯" menu: the same answer again (its model, settings and seed),
streamed as a new version beside it, as Regenerate streams one."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt, QTimer

from tests.desktop.test_branches_view import tab_to
from wren.desktop.chat.message_menu import replay_state
from wren.engine.records import MessageStatus, Role


def _answer(window):
    return [w for w in window.chat.message_widgets() if w.role is Role.ASSISTANT][-1]


def _click_replay(window, qtbot, timeout: int = 15000):
    """Replay from the answer's "⋯" menu, by keyboard: focus the button, Space opens the
    menu, Enter on its Replay item."""
    widget = _answer(window)
    qtbot.waitUntil(widget.replay_action.isEnabled, timeout=5000)
    menu = widget.menu_button.menu()
    tab_to(window, qtbot, widget.menu_button)
    with qtbot.waitSignal(window.conversations.turn_finished, timeout=timeout):
        QTimer.singleShot(0, lambda: _choose_replay(qtbot, menu, widget.replay_action))
        qtbot.keyClick(widget.menu_button, Qt.Key.Key_Space)  # the menu's own loop runs here


def _choose_replay(qtbot, menu, action) -> None:
    qtbot.waitUntil(menu.isVisible, timeout=5000)
    menu.setActiveAction(action)
    qtbot.keyClick(menu, Qt.Key.Key_Return)


def test_replay_adds_a_version_with_the_same_seed(open_window, send, arun, qtbot):
    window = open_window("Roses like sun and water.")
    send(window, "Tell me about roses")
    cid = window.conversations.current_id
    first = arun(window.engine.conversations.messages(cid))[-1]
    assert isinstance(first.sampling.get("seed"), int)  # a sampled answer keeps its seed
    user = [w for w in window.chat.message_widgets() if w.role is Role.USER][-1]
    assert not user.menu_button.isVisible()  # only answers replay
    widget = _answer(window)
    assert widget.menu_button.isVisible() and str(first.sampling["seed"]) in widget.replay_action.toolTip()

    _click_replay(window, qtbot)
    again = arun(window.engine.conversations.messages(cid))[-1]
    assert again.id != first.id and again.parent_id == first.parent_id  # a sibling, not an edit
    assert again.sampling == first.sampling and again.content == first.content
    widget = _answer(window)
    assert widget.message_id == again.id and widget.text() == first.content
    assert widget.version_label.text() == "2/2" and widget.version_label.isVisible()


def test_replay_is_offered_only_where_the_answer_can_be_redone(open_window, send, arun, qtbot):
    window = open_window("Roses like sun and water.")
    send(window, "Tell me about roses")
    cid = window.conversations.current_id
    answer = arun(window.engine.conversations.messages(cid))[-1]
    unseeded = {k: v for k, v in answer.sampling.items() if k != "seed"}
    arun(window.engine.db(window.engine.store.update_message, answer.id, sampling=unseeded))
    window.conversations.new_chat()
    arun(window.conversations.open(cid))
    widget = _answer(window)
    assert widget.menu_button.isVisible() and not widget.replay_action.isEnabled()
    assert "kept no seed" in widget.replay_action.toolTip()

    greedy = arun(window.engine.conversations.message(answer.id))
    ok, why = replay_state(greedy)
    assert not ok
    ok, why = replay_state(type(greedy)(**{**greedy.__dict__, "sampling": {**unseeded, "temperature": 0.0}}))
    assert ok and "likeliest token" in why  # greedy needs no seed

    # while an answer streams in this chat, nothing branches from it
    window.chat.set_busy(True)
    arun(window.engine.db(window.engine.store.update_message, answer.id, sampling=answer.sampling))
    widget.set_info(arun(window.engine.conversations.message(answer.id)))
    assert not widget.replay_action.isEnabled()
    window.chat.set_busy(False)
    assert widget.replay_action.isEnabled()


def test_a_refused_replay_says_why_and_keeps_the_answer(open_window, send, arun, qtbot):
    window = open_window("Roses like sun and water.")
    send(window, "Tell me about roses")
    cid = window.conversations.current_id
    answer = arun(window.engine.conversations.messages(cid))[-1]
    arun(window.engine.db(window.engine.store.update_message, answer.id, model="some-other-model"))
    window.conversations.new_chat()
    arun(window.conversations.open(cid))
    _click_replay(window, qtbot)
    assert [m.id for m in arun(window.engine.conversations.messages(cid))][-1] == answer.id  # nothing new
    assert "some-other-model" in window.chat.notice_label.text()
    assert _answer(window).message_id == answer.id


@pytest.mark.slow  # loads the tiny random-weight model on torch
def test_replay_on_torch_gives_the_same_text_token_for_token(open_window, arun, qtbot, wren_home, tiny_model_dir, send):
    from wren.engine.api import Engine
    from wren.engine.modelhub.registry import ModelRegistry
    from wren.engine.store import Store

    registry = ModelRegistry(wren_home / "models")
    registry.register_folder(tiny_model_dir, name="tiny")
    store = Store(wren_home / "wren.sqlite3")
    store.set_setting("model", "tiny")
    # sampled, not greedy: the seed decides every token of a random-weight model's answer
    store.set_setting("sampling", {"temperature": 1.0, "top_p": 1.0, "max_tokens": 16})
    window = open_window(engine=Engine(store, registry), wait_model=False)
    qtbot.waitUntil(lambda: window.engine.models.current is not None, timeout=60000)
    send(window, "roll the dice", timeout=60000)
    cid = window.conversations.current_id
    first = arun(window.engine.conversations.messages(cid))[-1]
    assert first.status is MessageStatus.COMPLETE and first.backend.startswith("torch")
    assert first.sampling["temperature"] == 1.0 and isinstance(first.sampling["seed"], int)

    _click_replay(window, qtbot, timeout=60000)
    again = arun(window.engine.conversations.messages(cid))[-1]
    assert again.id != first.id and again.content == first.content
    assert again.completion_tokens == first.completion_tokens
    assert _answer(window).text() == first.content

    # Regenerate draws a new seed: a different answer from the same weights and settings
    with qtbot.waitSignal(window.conversations.turn_finished, timeout=60000):
        qtbot.mouseClick(_answer(window).action_button, Qt.MouseButton.LeftButton)
    other = arun(window.engine.conversations.messages(cid))[-1]
    assert other.sampling["seed"] != first.sampling["seed"] and other.content != first.content
    assert _answer(window).version_label.text() == "3/3"
