"""A long paste is folded in its bubble (issue 34), as ChatGPT shows one: "Pasted text, N
lines" under its first lines, opened and folded again from the keyboard; Copy and Edit still
take the whole message; a short message shows whole, with no toggle."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication

LOG = "\n".join(f"2026-11-28 03:{i % 60:02d}:00 INFO worker {i} finished its batch" for i in range(40))


def test_a_long_paste_is_folded_and_opens_from_the_keyboard(open_window, send, qtbot):
    window = open_window("It is a worker log; every batch finished.")
    send(window, f"What does this log say?\n{LOG}")
    question = window.chat.message_widgets()[0]
    body, button = question.body, question.fold_button
    assert button is not None and button.isVisible()
    assert button.text().startswith("▸ Pasted text, 41 lines")
    shown = body.toPlainText()
    assert shown.startswith("What does this log say?") and "worker 30" not in shown and len(shown) < 400
    button.setFocus()
    qtbot.keyClick(button, Qt.Key.Key_Space)
    assert "worker 30" in body.toPlainText() and button.text().startswith("▾ Pasted text, 41 lines")
    qtbot.keyClick(button, Qt.Key.Key_Space)
    assert "worker 30" not in body.toPlainText()
    assert question.text() == f"What does this log say?\n{LOG}"  # Copy and Edit take it whole
    question.copy()
    assert QGuiApplication.clipboard().text() == question.text()


def test_a_short_message_has_no_fold(open_window, send):
    window = open_window("Hi!")
    send(window, "Hello there\nsecond line")
    question = window.chat.message_widgets()[0]
    assert question.fold_button is not None and not question.fold_button.isVisible()
    assert question.body.toPlainText() == "Hello there\nsecond line"


def test_a_refused_message_comes_back_as_it_was_written(open_window, qtbot, tmp_path):
    """Too long for the model: the question typed under a large paste comes back editable,
    apart from the paste (it disappeared into the paste), and the attached file comes back."""
    from wren.desktop.composer.composer import LARGE_PASTE_CHARS

    window = open_window()
    composer, bar = window.composer, window.composer.attachment_bar
    paste = "\n".join(f"row {i} of a very long table of numbers {i * 7}" for i in range(40 * LARGE_PASTE_CHARS // 40))
    composer.attach(paste)
    note = tmp_path / "note.md"
    note.write_text("context\n")
    bar.add(str(note))
    qtbot.keyClicks(composer.edit, "Summarize this.")
    with qtbot.waitSignal(window.conversations.turn_finished, timeout=20000):
        qtbot.keyClick(composer.edit, Qt.Key.Key_Return)
    assert window.conversations.current_id is None  # refused before any chat was made
    assert composer.edit.toPlainText() == "Summarize this."
    assert composer.attachments() == [paste]
    assert bar.files() == [str(note.resolve())]
