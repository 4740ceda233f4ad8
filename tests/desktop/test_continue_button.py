"""The Continue button under an answer that ended before it was done."""

from __future__ import annotations

from PySide6.QtCore import Qt

from wren.engine.records import MessageStatus, Role


def _answer_widget(window):
    return [w for w in window.chat.message_widgets() if w.role is Role.ASSISTANT][-1]


def test_continue_button_after_an_interrupted_answer(open_window, send, arun, qtbot):
    window = open_window("Roses like sun and water.")
    send(window, "Tell me about roses")
    cid = window.conversations.current_id
    answer = arun(window.engine.conversations.messages(cid))[-1]
    widget = _answer_widget(window)
    assert not widget.continue_button.isVisible()  # a complete answer offers no Continue

    # Wren died mid-answer: the stored answer is interrupted (as found on the next start)
    arun(window.engine.db(window.engine.store.update_message, answer.id, content="Roses like",
                           status=MessageStatus.INTERRUPTED))
    window.conversations.new_chat()
    arun(window.conversations.open(cid))
    widget = _answer_widget(window)
    assert widget.message_id == answer.id
    qtbot.waitUntil(widget.continue_button.isVisible, timeout=5000)

    with qtbot.waitSignal(window.conversations.turn_finished, timeout=15000):
        qtbot.mouseClick(widget.continue_button, Qt.MouseButton.LeftButton)
    stored = arun(window.engine.conversations.messages(cid))
    assert [m.id for m in stored] == [stored[0].id, answer.id]  # the same message, no new one
    assert stored[-1].content.startswith("Roses like")
    assert stored[-1].status is MessageStatus.COMPLETE
    widget = _answer_widget(window)
    assert widget.text().startswith("Roses like")
    assert not widget.continue_button.isVisible()
