"""What the window says stops being shown once it is no longer true: an old send error, the
previous answer's speed; and the model picker lists a model as soon as it is imported."""

from __future__ import annotations

import shutil

import pytest
from PySide6.QtCore import Qt

from wren.engine.errors import InvalidRequest

REPLY = " ".join(f"word{i}" for i in range(40))


def test_an_old_send_error_goes_when_the_next_answer_comes(open_window, send, qtbot):
    window = open_window("A fine answer.")
    real_send, calls = window.engine.chat.send, []

    async def send_once_refused(conversation_id, text, **kwargs):
        calls.append(text)
        if len(calls) == 1:  # as the engine turns down a message before answering
            raise InvalidRequest("the message is longer than this model can read")
        async for event in real_send(conversation_id, text, **kwargs):
            yield event

    window.engine.chat.send = send_once_refused
    send(window, "first try")
    notice = window.chat.notice_label
    assert notice.isVisibleTo(window) and "longer than this model" in notice.text()
    window.composer.clear()
    send(window, "second try")
    assert window.chat.last_answer().text() == "A fine answer."
    assert not notice.isVisibleTo(window), notice.text()
    assert "failed" not in window.status.currentMessage()


def test_the_speed_shown_is_never_the_previous_answers(open_window, send, qtbot):
    window = open_window(REPLY, delay=0.01)
    send(window, "first")
    speed = window.status.speed_label
    assert "tokens/s" in speed.text()
    window.composer.edit.setPlainText("second")
    with qtbot.waitSignal(window.conversations.turn_finished, timeout=15000):
        qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: bool(window.conversations.streams) and len(window.chat.last_answer().text()) > 5)
        assert speed.text() == ""  # streaming: the last answer's speed is not this one's
    assert "tokens/s" in speed.text()  # this answer's, once it is done
    window.conversations.new_chat()
    assert speed.text() == ""  # a new chat has no answer yet


@pytest.fixture
def app_over(make_engine, arun, qtbot):
    from wren.desktop.app import WrenApp

    made = []

    def factory():
        app = WrenApp(make_engine(), None, tray=False)
        made.append(app)
        with qtbot.waitSignal(app.window.models.loaded, timeout=20000):
            arun(app.start())
        return app

    yield factory
    for app in made:
        arun(app.shutdown())
        app.window.deleteLater()
        app.quick.deleteLater()


def test_an_imported_model_is_in_the_model_picker_at_once(app_over, tiny_model_dir, tmp_path, qtbot, arun):
    app = app_over()
    picker = app.window.model_picker
    assert [picker.itemText(i) for i in range(picker.count())] == ["tiny"]
    app.open_settings()
    qtbot.waitUntil(lambda: app.settings is not None and app.settings.isVisible())
    folder = shutil.copytree(tiny_model_dir, tmp_path / "second-model")
    arun(app.settings.import_from(folder))
    qtbot.waitUntil(lambda: picker.findText("second-model") >= 0, timeout=5000)
    assert app.settings.isVisible()  # nothing was saved or closed
    assert picker.currentText() == "tiny"  # listed, not switched to


def test_a_refused_first_question_leaves_no_empty_chat(open_window, qtbot, arun, monkeypatch):
    """A new chat's question that the engine refuses (here: over the length limit, made
    small for the test) is said, kept in the composer, and no chat is created for it."""
    import wren.engine.chat

    monkeypatch.setattr(wren.engine.chat, "MAX_MESSAGE_CHARS", 40)
    window = open_window("never shown")
    before = len(arun(window.engine.conversations.list()))
    text = "a question far longer than the forty characters allowed here"
    window.composer.edit.setPlainText(text)
    qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: "limit" in window.status.currentMessage() or window.chat.notice_label.isVisibleTo(window),
                    timeout=10000)
    assert len(arun(window.engine.conversations.list())) == before
    assert window.composer.edit.toPlainText() == text


def test_after_delete_all_my_data_the_window_shows_no_chat_that_is_gone(app_over, qtbot, arun, send):
    """Settings → Privacy's erase leaves the window on a new, empty chat with an empty list."""
    app = app_over()
    send(app.window, "a chat that will be erased")
    assert app.window.conversations.current_id is not None
    app.open_settings()
    qtbot.waitUntil(lambda: app.settings is not None and app.settings.isVisible(), timeout=10000)
    arun(app.engine.privacy.erase_all())
    app.settings.privacy_page.erased.emit()
    qtbot.waitUntil(lambda: app.window.sidebar.list.count() == 0, timeout=10000)
    assert app.window.conversations.current_id is None
    assert app.window.chat.message_widgets() == []
