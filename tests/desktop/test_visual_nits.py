"""Small things the issue 34 tryout saw: a deleted chat's empty pane says what it is for, a
deleted title already in quotes is not quoted twice, and the passphrase variable is named as
the engine reads it."""

from __future__ import annotations

from PySide6.QtCore import Qt

from wren.desktop.memory.notes import quoted


def test_deleting_the_open_chat_leaves_the_ask_wren_anything_pane(open_window, send, qtbot, arun):
    window = open_window("Fine.")
    send(window, "Hello")
    conv = window.conversations.current_id
    assert not window.chat.empty_label.isVisible()
    arun(window.engine.conversations.rename(conv, '"Trip to Rome"'))
    arun(window.conversations.refresh_list())
    window.sidebar.list.setFocus()
    window.sidebar.select(conv)
    with qtbot.waitSignal(window.conversations.listed):
        qtbot.keyClick(window.sidebar.list, Qt.Key.Key_Delete)
    assert window.conversations.current_id is None
    assert window.chat.empty_label.isVisible() and "Ask Wren anything" in window.chat.empty_label.text()
    assert window.sidebar.undo_label.text() == "Deleted “Trip to Rome”."  # not “"Trip to Rome"”


def test_quoted_drops_quotes_the_text_already_has():
    assert quoted('"I like tea"') == "“I like tea”"
    assert quoted("“Already curly”") == "“Already curly”"
    assert quoted("It's 'fine' here") == "“It's 'fine' here”"
    assert quoted("x" * 10, 4) == "“xxxx…”"


def test_the_passphrase_placeholder_names_the_variable_the_engine_reads(open_window, qtbot):
    from wren.desktop.settings.providers import ProvidersPage
    from wren.engine.keystore import PASSPHRASE_ENV

    window = open_window()
    page = ProvidersPage(window.engine, window.tasks)
    page.store_picker.setCurrentIndex(page.store_picker.findData("file"))
    assert PASSPHRASE_ENV in page.secret_edit.placeholderText()
    page.deleteLater()
