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


def test_the_tools_menu_stays_open_while_ticking_from_the_keyboard(open_window, qtbot):
    window = open_window()
    qtbot.waitUntil(lambda: window.conversations.tools.loaded)
    button = window.composer.tools_button
    menu = button.menu_
    menu.popup(button.mapToGlobal(button.rect().bottomLeft()))
    qtbot.waitUntil(menu.isVisible)
    ticks = [a for a in menu.actions() if a.isCheckable()]
    assert len(ticks) >= 2
    before = [a.isChecked() for a in ticks[:2]]
    for action in ticks[:2]:
        menu.setActiveAction(action)
        qtbot.keyClick(menu, Qt.Key.Key_Space)
        assert menu.isVisible()  # still open for the next tick
    assert [a.isChecked() for a in ticks[:2]] == [not b for b in before]
    assert [a.text() in button.chosen() for a in ticks[:2]] == [not b for b in before]
    qtbot.keyClick(menu, Qt.Key.Key_Escape)
    qtbot.waitUntil(lambda: not menu.isVisible())


def test_the_two_deletes_say_how_they_differ(open_window, send, qtbot):
    from PySide6.QtWidgets import QMenu

    window = open_window("Fine.")
    send(window, "Hello")
    item = window.sidebar._find(window.conversations.current_id)
    window.sidebar._menu(window.sidebar.list.visualItemRect(item).center())
    menu = window.sidebar.findChildren(QMenu)[-1]
    actions = {a.text(): a for a in menu.actions()}
    assert "Delete (can be undone)" in actions and "Delete permanently" in actions
    assert "Undo" in actions["Delete (can be undone)"].toolTip()
    assert "no undo" in actions["Delete permanently"].toolTip()
    assert menu.toolTipsVisible()
    menu.close()


def test_the_crash_notice_shows_a_warning_not_a_lightbulb(qtbot, wren_home):
    from PySide6.QtWidgets import QMessageBox

    from wren.desktop.crash_notice import CrashNotice
    from wren.engine.crashreport import list_crash_reports, write_crash_report

    try:
        raise RuntimeError("the model worker died")
    except RuntimeError as exc:
        write_crash_report(exc, program="wren-desktop")
    notice = CrashNotice(list_crash_reports())
    qtbot.addWidget(notice)
    assert notice.icon() is QMessageBox.Icon.Warning
