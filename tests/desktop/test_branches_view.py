"""Versions of an answer (issue 34): switching with ‹ › keeps that control in view instead
of jumping to the bottom; Replay sits in the answer's "⋯" menu, not in its button row."""

from __future__ import annotations

from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QToolButton

from wren.engine.records import Role

# Tall answers: the chat is several screens high below the first one.
LONG = "\n\n".join(f"Paragraph {i} of a long answer about the weather and the sea." for i in range(12))


def tab_to(window, qtbot, target) -> None:
    """Reach `target` with the Tab key from the stop before it."""
    stops = [w for w in window.tab_stops() if w.isVisible() and w.isEnabled()]
    before = stops[stops.index(target) - 1]
    window.activateWindow()
    before.setFocus(Qt.FocusReason.MouseFocusReason)
    qtbot.waitUntil(before.hasFocus)
    qtbot.keyClick(before, Qt.Key.Key_Tab)
    assert target.hasFocus()


def _in_viewport(view, widget) -> bool:
    top = widget.mapTo(view.viewport(), QPoint(0, 0)).y()
    return top >= 0 and top + widget.height() <= view.viewport().height()


def test_switching_a_version_keeps_its_control_in_view(open_window, send, qtbot):
    window = open_window(LONG)
    window.resize(900, 600)
    for question in ("First", "Second", "Third"):
        send(window, question)
    first_answer = window.chat.message_widgets()[1]
    with qtbot.waitSignal(window.conversations.turn_finished, timeout=15000):
        window.conversations.regenerate(first_answer.message_id)
    for question in ("Second again", "Third again"):
        send(window, question)
    view = window.chat
    answer = view.message_widgets()[1]
    qtbot.waitUntil(lambda: answer.version_label.text() == "2/2" and answer.previous_button.isEnabled())
    assert view.verticalScrollBar().maximum() > view.viewport().height()  # more than a screen below it
    view.ensureWidgetVisible(answer.previous_button, 0, 100)
    qtbot.waitUntil(lambda: _in_viewport(view, answer.previous_button))

    tab_to(window, qtbot, answer.previous_button)
    qtbot.keyClick(answer.previous_button, Qt.Key.Key_Space)
    qtbot.waitUntil(lambda: view.message_widgets()[1].version_label.text() == "1/2", timeout=10000)
    switched = view.message_widgets()[1]
    qtbot.wait(200)  # the rebuilt messages lay out over a few event-loop turns
    bar = view.verticalScrollBar()
    assert bar.value() < bar.maximum()  # not thrown to the bottom
    assert _in_viewport(view, switched.next_button) and switched.next_button.isEnabled()


def test_replay_is_in_the_answers_menu_not_its_button_row(open_window, send, qtbot):
    window = open_window("Roses like sun and water.")
    send(window, "Tell me about roses")
    answer = window.chat.last_answer()
    row = [b.text() for b in answer.findChildren(QToolButton) if b.isVisible()]
    assert "Replay" not in row and "Regenerate" in row
    assert answer.menu_button.isVisible() and answer.menu_button.focusPolicy() & Qt.FocusPolicy.TabFocus
    assert answer.menu_button in window.tab_stops()
    user = [w for w in window.chat.message_widgets() if w.role is Role.USER][-1]
    assert not user.menu_button.isVisible()
    assert [a.text() for a in answer.menu_button.menu().actions()] == ["Replay (same seed, same text)"]
