"""Chatting through the window: streaming, stop, regenerate, edit, versions, bad input."""

from __future__ import annotations

import itertools

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox

from wren.desktop.chat.body import MarkdownBody
from wren.engine.records import MessageStatus, Role

ANSWER = "Sure. Here is **bold** text.\n\n```python\nprint('hi')\n```\n\nAnd a closing line."


def _counter_reply(prefix: str = "Answer"):
    """A different answer each time, so siblings are distinguishable; short titles."""
    counter = itertools.count(1)

    def reply(prompt: str) -> str:
        if "Write a title" in prompt:
            return "Short title"
        return f"{prefix} number {next(counter)}."

    return reply


def test_enter_streams_the_answer_in_order_and_shows_speed(open_window, send, monkeypatch):
    window = open_window(ANSWER, delay=0.002)
    chunks: list[str] = []
    original = MarkdownBody.append
    monkeypatch.setattr(MarkdownBody, "append", lambda self, text: (chunks.append(text), original(self, text))[1])
    finished = send(window, "Say something")
    assert finished.message_id is not None
    assert "".join(chunks) == ANSWER  # every delta, in order, nothing twice
    assert len(chunks) > 1  # it streamed rather than arriving at once
    user, answer = window.chat.message_widgets()
    assert (user.role, user.text()) == (Role.USER, "Say something")
    assert answer.text() == ANSWER
    assert answer.info.content == ANSWER and answer.info.status is MessageStatus.COMPLETE
    assert [b.code for b in answer.body.code_blocks()] == ["print('hi')"]
    assert "tokens/s" in window.status.speed_label.text()
    assert "first token" in window.status.speed_label.text()
    assert "context" in window.status.context_label.text()
    assert window.composer.send_button.isEnabled() and not window.composer.stop_button.isVisible()


def test_shift_enter_breaks_the_line_instead_of_sending(open_window, qtbot):
    window = open_window()
    edit = window.composer.edit
    qtbot.keyClicks(edit, "first")
    qtbot.keyClick(edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(edit, "second")
    assert edit.toPlainText() == "first\nsecond"
    assert window.chat.message_widgets() == []


def test_stop_keeps_the_partial_answer_marked_stopped(open_window, qtbot, arun):
    long_answer = " ".join(f"word{i}" for i in range(400))
    window = open_window(long_answer, delay=0.005)
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)
    window.composer.edit.setPlainText("Talk for a while")
    with qtbot.waitSignal(window.conversations.turn_finished, timeout=20000) as blocker:
        qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: len(window.chat.message_widgets()) == 2 and len(window.chat.message_widgets()[1].text()) > 40)
        assert window.composer.stop_button.isVisible()
        qtbot.keyClick(window.composer.edit, Qt.Key.Key_Escape)
    assert blocker.args[0].reason.value == "cancelled"
    answer = window.chat.message_widgets()[1]
    stored = arun(window.engine.conversations.messages(window.conversations.current_id))[-1]
    assert stored.status is MessageStatus.STOPPED
    assert 0 < len(stored.content) < len(long_answer)
    assert long_answer.startswith(stored.content)
    assert answer.text() == stored.content
    assert answer.status_label.isVisible() and answer.status_label.text() == "stopped"


def test_regenerate_edit_and_versions_survive_a_restart(open_window, make_engine, send, qtbot, arun, wren_home):
    window = open_window(_counter_reply())
    send(window, "Question one")
    conversation_id = window.conversations.current_id
    answer = window.chat.message_widgets()[1]
    assert answer.text() == "Answer number 1."

    with qtbot.waitSignal(window.conversations.turn_finished, timeout=15000):
        answer.action_button.click()  # Regenerate
    answer = window.chat.message_widgets()[1]
    assert answer.text() == "Answer number 2."
    assert answer.version_label.isVisible() and answer.version_label.text() == "2/2"

    with qtbot.waitSignal(window.conversations.turn_finished, timeout=15000):
        user = window.chat.message_widgets()[0]
        user.action_button.click()  # Edit
        assert window.composer.editing_id == user.message_id
        window.composer.edit.setPlainText("Question one, edited")
        qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
    user, answer = window.chat.message_widgets()
    assert user.text() == "Question one, edited" and user.version_label.text() == "2/2"
    assert answer.text().startswith("Answer number")

    # Back to the first question and, below it, the first answer: a choice that must persist.
    user.previous_button.click()
    qtbot.waitUntil(lambda: window.chat.message_widgets()[0].text() == "Question one")
    answer = window.chat.message_widgets()[1]
    answer.previous_button.click()
    qtbot.waitUntil(lambda: window.chat.message_widgets()[1].text() == "Answer number 1.")
    assert window.chat.message_widgets()[1].version_label.text() == "1/2"

    # Restart: a new Engine on the same database, a new window.
    arun(window.engine.close())
    window.engine._closed_by_test = True
    again = open_window(engine=make_engine(_counter_reply(), db_path=wren_home / "wren.sqlite3"))
    with qtbot.waitSignal(again.conversations.opened, timeout=5000):
        again.sidebar.select(None)
        again.tasks.run(again.conversations.open(conversation_id))
    user, answer = again.chat.message_widgets()
    assert (user.text(), user.version_label.text()) == ("Question one", "1/2")
    assert (answer.text(), answer.version_label.text()) == ("Answer number 1.", "1/2")


UNICODE = "héllo 👋🏽 👨‍👩‍👧 مرحبا بالعالم עברית a\u200bb\u200cc\u200dd\u2060e\ufeff \u202eRTL override\u202c"


def test_emoji_rtl_and_zero_width_round_trip_unchanged(open_window, send, arun):
    window = open_window(UNICODE)
    send(window, UNICODE)
    stored = arun(window.engine.conversations.messages(window.conversations.current_id))
    assert [m.content for m in stored] == [UNICODE, UNICODE]
    user, answer = window.chat.message_widgets()
    assert user.text() == UNICODE and answer.text() == UNICODE
    assert user.body.toPlainText() == UNICODE


@pytest.mark.serial  # a wall-clock bound: runs with the machine to itself (make test)
def test_a_one_megabyte_paste_keeps_the_window_responsive(open_window, qtbot):
    from PySide6.QtCore import QElapsedTimer, QTimer
    from PySide6.QtGui import QGuiApplication

    window = open_window()
    words = itertools.cycle(["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "near", "Paris"])
    big = " ".join(itertools.islice(words, 200_000))[:1_000_000]
    QGuiApplication.clipboard().setText(big)
    edit = window.composer.edit
    edit.setFocus()

    clock = QElapsedTimer()
    gaps: list[int] = []
    beat = QTimer(interval=10)
    beat.timeout.connect(lambda: (gaps.append(clock.restart())))
    clock.start()
    beat.start()
    qtbot.keyClick(edit, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)
    # Kept beside the editor as an attachment: the editor itself stays small and fast.
    assert window.composer.attachments() == [big]
    qtbot.keyClicks(edit, "Summarize this")  # still typing at once, long before the count is done
    assert window.composer.text() == "Summarize this\n\n" + big
    qtbot.waitUntil(lambda: "in this message" in window.composer.token_label.text(), timeout=60000)
    beat.stop()
    count = int(window.composer.token_label.text().split(" in this message")[0].replace(",", ""))
    assert count > 100_000
    # The count ran on other threads; the GUI loop kept beating while it did.
    assert max(gaps) < 400, f"the event loop stalled for {max(gaps)} ms"


def test_a_model_that_fails_to_load_says_which_file_and_why(open_window, qtbot, tiny_model_dir, arun):
    from wren.engine.errors import ModelFileError

    window = open_window(wait_model=False, fail_load=ModelFileError("model.safetensors is truncated at byte 1024"))
    qtbot.waitUntil(lambda: window.models.error_dialog is not None and window.models.error_dialog.isVisible())
    dialog: QMessageBox = window.models.error_dialog
    assert dialog.objectName() == "modelErrorDialog"
    assert "tiny" in dialog.text()
    assert "truncated at byte 1024" in dialog.informativeText()
    assert f"File: {tiny_model_dir}" in dialog.informativeText()
    dialog.accept()
    # The composer says why it cannot send; the rest of the window works.
    assert not window.composer.edit.isEnabled() and not window.composer.send_button.isEnabled()
    assert "truncated" in window.composer.reason_label.text() and window.composer.reason_label.isVisible()
    conv = arun(window.engine.conversations.create("Still browsable"))
    with qtbot.waitSignal(window.conversations.listed):
        window.conversations.refresh()
    assert window.sidebar.conversation_ids() == [conv.id]
    with qtbot.waitSignal(window.conversations.opened):
        chats = window.sidebar.list
        qtbot.mouseClick(chats.viewport(), Qt.MouseButton.LeftButton, pos=chats.visualItemRect(chats.item(1)).center())
    assert window.title_label.text() == "Still browsable"


@pytest.mark.parametrize("tokens", [10_500])
def test_a_ten_thousand_token_answer_streams_through_the_window(open_window, make_engine, send, arun, tokens):
    # Each word is at least one token of the tiny tokenizer; code fences every so often.
    lines = []
    for i in range(tokens // 10):
        lines.append(f"line {i} has some words in it" if i % 50 else "```python\nx = 1\n```")
    reply = "\n".join(lines)
    engine = make_engine(reply, context_length=40_000)
    arun(engine.settings.set("sampling", {"max_tokens": 30_000}))
    window = open_window(engine=engine)
    finished = send(window, "Write a lot", timeout=120000)
    assert finished.reason.value == "stop"
    answer = window.chat.message_widgets()[1]
    assert answer.text() == reply
    assert answer.info.completion_tokens >= 10_000
