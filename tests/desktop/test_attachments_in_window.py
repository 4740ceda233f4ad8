"""An attached file in the real window: its chip shows under the question in the transcript
(while the answer streams, once stored, and after a restart), and its text reaches the prompt
the model reads."""

from __future__ import annotations

from PySide6.QtCore import Qt

from wren.engine.records import Role

LIVE_MS = 15000
NOTE = """# Trip to Lisbon

- Flight TP 1351 leaves Berlin at **07:45** on Friday, gate B12.
"""


def _question(window):
    return next(w for w in window.chat.message_widgets() if w.role is Role.USER)


def test_an_attached_note_is_shown_under_the_question_and_reaches_the_prompt(
        open_window, make_engine, qtbot, arun, tmp_path, wren_home):
    note = tmp_path / "trip-notes.md"
    note.write_text(NOTE, encoding="utf-8")
    window = open_window("Your flight leaves at 07:45.")
    window.composer.attachment_bar.add(str(note))
    window.composer.edit.setPlainText("What time does my flight leave, according to the attached notes?")
    with qtbot.waitSignal(window.conversations.turn_finished, timeout=LIVE_MS):
        qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
        # shown with the question as it is sent, before the answer is stored
        qtbot.waitUntil(lambda: any(w.role is Role.USER for w in window.chat.message_widgets()), timeout=LIVE_MS)
        question = _question(window)
        assert question.attached is not None and question.attached.names() == ["trip-notes.md"]

    question = _question(window)
    assert question.attached.isVisible() and question.attached.names() == ["trip-notes.md"]
    _every_chip_character_is_in_its_font(question.attached)
    assert question.attached.accessibleName() == "Attached: trip-notes.md"
    assert question.text() == "What time does my flight leave, according to the attached notes?"
    prompt = window.engine.scripted.loaded[0].prompts[-1]
    assert "Flight TP 1351 leaves Berlin at **07:45**" in prompt.split("<|im_start|>user\n")[-1]
    answer = window.chat.last_answer()
    assert answer.text() == "Your flight leaves at 07:45." and answer.attached is None

    # After a restart (a new engine on the same database, a new window) the chip is still there.
    conversation_id = window.conversations.current_id
    arun(window.engine.close())
    window.engine._closed_by_test = True
    again = open_window(engine=make_engine("ok", db_path=wren_home / "wren.sqlite3"))
    with qtbot.waitSignal(again.conversations.opened, timeout=5000):
        again.tasks.run(again.conversations.open(conversation_id))
    question = _question(again)
    assert question.attached.names() == ["trip-notes.md"]
    assert question.attached.paths() == [str(note.resolve())]


def test_a_question_without_files_shows_no_chips(open_window, send):
    window = open_window("Hi.")
    send(window, "hello")
    question = _question(window)
    assert question.attached is not None and not question.attached.isVisible()
    assert question.attached.names() == []


def _every_chip_character_is_in_its_font(bar) -> None:
    """A chip's text draws as letters, not as the empty boxes of glyphs the font lacks."""
    from PySide6.QtGui import QFontMetrics
    from PySide6.QtWidgets import QLabel

    chips = bar.findChildren(QLabel)
    assert chips
    for chip in chips:
        metrics = QFontMetrics(chip.font())
        missing = [ch for ch in chip.text() if not metrics.inFontUcs4(ord(ch))]
        assert not missing, f"{chip.text()!r} has characters its font cannot draw: {missing}"


def test_a_file_wren_cannot_read_is_flagged_as_it_is_attached(open_window, qtbot, tmp_path):
    """A binary file was taken silently: only the sent message said it could not be read."""
    import os

    blob = tmp_path / "photo-raw.bin"
    blob.write_bytes(os.urandom(4096) + b"\x00")
    note = tmp_path / "trip-notes.md"
    note.write_text(NOTE, encoding="utf-8")
    window = open_window()
    bar = window.composer.attachment_bar
    bad, good = bar.add(str(blob)), bar.add(str(note))
    qtbot.waitUntil(lambda: bool(bad.problem), timeout=5000)
    assert bad.label.text() == "⚠ photo-raw.bin — cannot be read"
    assert "binary file" in bad.label.toolTip() and "binary file" in bad.accessibleDescription()
    assert "Photo-raw.bin is a binary file" in window.status.currentMessage()
    qtbot.wait(200)
    assert good.problem == "" and good.label.text() == "trip-notes.md"
