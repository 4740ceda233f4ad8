"""A long pasted message: the answer's status says how far the model has read it, then the
answer replaces it; Stop works while it reads and keeps the question."""

from __future__ import annotations

import re

from PySide6.QtCore import Qt

from wren.engine.events import FinishReason
from wren.engine.records import MessageStatus, Role

# Several prefill chunks of the tiny tokenizer's tokens.
LONG_PASTE = " ".join(f"word{i}" for i in range(300))
READING = re.compile(r"^Reading your message… (\d[\d,]*) / (\d[\d,]*) tokens$")


def _live_answer(window):
    widgets = window.chat.message_widgets()
    assert widgets and widgets[-1].role is Role.ASSISTANT
    return widgets[-1]


def _shows_reading(window) -> bool:
    widgets = window.chat.message_widgets()  # empty until the new chat is created
    return bool(widgets) and widgets[-1].role is Role.ASSISTANT and _reading(widgets[-1]) is not None


def _reading(widget) -> tuple[int, int] | None:
    match = READING.match(widget.status_label.text())
    if match is None:
        return None
    return tuple(int(g.replace(",", "")) for g in match.groups())


def test_window_shows_reading_progress_then_the_answer(open_window, qtbot):
    window = open_window("Here is the answer, read in full.", prefill_delay=0.15, delay=0.03)
    window.composer.edit.setPlainText(LONG_PASTE)
    seen: list[tuple[int, int]] = []
    with qtbot.waitSignal(window.conversations.turn_finished, timeout=30000) as finished:
        qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: _shows_reading(window), timeout=15000)
        answer = _live_answer(window)
        assert answer.status_label.isVisible() and answer.body.text() == ""
        seen.append(_reading(answer))
        qtbot.waitUntil(lambda: answer.body.text() != "" or _reading(answer) != seen[-1], timeout=15000)
        if _reading(answer) is not None:
            seen.append(_reading(answer))
        # Once the answer streams, its status is the usual one again.
        qtbot.waitUntil(lambda: answer.body.text() != "", timeout=15000)
        assert answer.status_label.text() == "answering…"
    assert finished.args[0].reason is FinishReason.STOP
    total = seen[0][1]
    assert total > 256 and all(t == total for _, t in seen)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen) and seen[0][0] < total
    stored = _live_answer(window)
    assert stored.text() == "Here is the answer, read in full."
    assert stored.info.status is MessageStatus.COMPLETE and _reading(stored) is None


def test_stop_while_reading_keeps_the_question_and_stops_the_answer(open_window, qtbot):
    window = open_window("This must never show.", prefill_delay=0.3)
    window.composer.edit.setPlainText(LONG_PASTE)
    with qtbot.waitSignal(window.conversations.turn_finished, timeout=30000) as finished:
        qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: _shows_reading(window), timeout=15000)
        assert window.composer.stop_button.isVisible() and window.composer.stop_button.isEnabled()
        qtbot.mouseClick(window.composer.stop_button, Qt.MouseButton.LeftButton)
    assert finished.args[0].reason is FinishReason.CANCELLED
    question, answer = window.chat.message_widgets()[-2:]
    assert question.role is Role.USER and question.text() == LONG_PASTE and question.info is not None
    assert answer.info.status is MessageStatus.STOPPED and answer.text() == ""
    assert answer.status_label.text() == "stopped"
