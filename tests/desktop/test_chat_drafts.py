"""An unsent message stays with the chat it was written in: its typed text, large pastes and
attached files do not follow the user into another chat (where Enter sent them, a private
file or text reaching a chat that may use a remote provider), and come back with it."""

from __future__ import annotations

from PySide6.QtCore import Qt

from wren.desktop.composer.composer import LARGE_PASTE_CHARS


def _open(window, qtbot, conversation_id: int) -> None:
    chats = window.sidebar.list
    with qtbot.waitSignal(window.conversations.opened):
        qtbot.mouseClick(chats.viewport(), Qt.MouseButton.LeftButton,
                         pos=chats.visualItemRect(window.sidebar._find(conversation_id)).center())


def test_each_chat_keeps_its_own_unsent_message(open_window, qtbot, arun, send, tmp_path):
    window = open_window()
    a = arun(window.engine.conversations.create("Alpha"))
    b = arun(window.engine.conversations.create("Beta"))
    with qtbot.waitSignal(window.conversations.listed):
        window.conversations.refresh()
    notes = tmp_path / "private.md"
    notes.write_text("salary figures\n")
    pasted = "x" * (LARGE_PASTE_CHARS + 10)

    _open(window, qtbot, a.id)
    qtbot.keyClicks(window.composer.edit, "half a thought for Alpha")
    window.composer.attach(pasted)
    window.composer.attachment_bar.add(str(notes))

    _open(window, qtbot, b.id)  # Beta's box is empty: nothing of Alpha's came along
    assert window.composer.text() == "" and window.composer.attachment_bar.files() == []
    send(window, "a question for Beta")
    assert window.conversations.current_id == b.id
    question = arun(window.engine.conversations.messages(b.id))[0]
    assert question.content == "a question for Beta" and "salary" not in str(question.meta)

    window.conversations.new_chat()  # the new chat has its own draft too
    qtbot.keyClicks(window.composer.edit, "a new chat's start")
    _open(window, qtbot, a.id)  # Alpha's draft is back as it was, the pasted text still folded
    assert window.composer.edit.toPlainText() == "half a thought for Alpha"
    assert window.composer.attachments() == [pasted]
    assert window.composer.attachment_bar.files() == [str(notes.resolve())]
    window.conversations.new_chat()
    assert window.composer.text() == "a new chat's start" and window.composer.attachment_bar.files() == []


def test_a_chat_deleted_for_good_takes_its_draft_with_it(open_window, qtbot, arun):
    window = open_window()
    a = arun(window.engine.conversations.create("Alpha"))
    with qtbot.waitSignal(window.conversations.listed):
        window.conversations.refresh()
    _open(window, qtbot, a.id)
    qtbot.keyClicks(window.composer.edit, "never sent")
    window.conversations.new_chat()
    assert a.id in window.conversations._drafts
    window.conversations.forget(a.id)
    assert a.id not in window.conversations._drafts
