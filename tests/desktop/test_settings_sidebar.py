"""Settings as a sidebar list of pages, by keyboard: every page's name in view, Up/Down
changes the page, Tab goes into it; one save rule (tool switches too are kept on Save and
dropped on Cancel); people's words, not ids, with the id in the tooltip."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from wren.desktop.settings.dialog import SettingsDialog
from wren.desktop.settings.tool_labels import tool_label

TITLES = ["Model", "Generation", "Personalization", "Memory", "Safety", "Tools", "Providers",
          "Quick prompt", "Privacy", "Diagnostics", "About"]


def _shown(window, arun, qtbot) -> SettingsDialog:
    dialog = SettingsDialog(window.engine, window.tasks, parent=window)
    arun(dialog.load(hotkey_default="Ctrl+Alt+Space"))
    dialog.show()
    dialog.activateWindow()
    qtbot.waitUntil(dialog.isActiveWindow)
    return dialog


def test_the_sidebar_shows_every_page_and_the_keyboard_walks_it(open_window, arun, qtbot):
    window = open_window()
    dialog = _shown(window, arun, qtbot)
    pages = dialog.pages
    assert [pages.title(i) for i in range(pages.count())] == TITLES
    viewport = pages.sidebar.viewport().rect()
    for i in range(pages.count()):  # no page hidden behind scroll arrows
        assert viewport.contains(pages.sidebar.visualItemRect(pages.sidebar.item(i))), TITLES[i]
    pages.sidebar.setFocus()
    qtbot.waitUntil(pages.sidebar.hasFocus)
    assert pages.currentWidget() is dialog._model_page
    qtbot.keyClick(pages.sidebar, Qt.Key.Key_Down)
    qtbot.keyClick(pages.sidebar, Qt.Key.Key_Down)
    assert pages.currentWidget() is dialog.personal_page
    qtbot.keyClick(pages.sidebar, Qt.Key.Key_Up)
    assert pages.currentWidget() is dialog._generation_page
    qtbot.keyClick(pages.sidebar, Qt.Key.Key_Tab)  # into the page shown, not the next list or button
    focused = QApplication.focusWidget()
    assert focused is not None and dialog._generation_page.isAncestorOf(focused), focused
    qtbot.keyClick(focused, Qt.Key.Key_Backtab)  # and Shift+Tab from there back to the list
    assert QApplication.focusWidget() is pages.sidebar
    qtbot.keyClick(pages.sidebar, Qt.Key.Key_End)
    assert pages.currentWidget() is dialog.about_page
    dialog.reject()


def test_a_tool_switch_follows_the_one_rule_cancel_drops_it_save_keeps_it(open_window, arun, qtbot):
    window = open_window()

    def enabled() -> bool:
        return {t.name: t.enabled for t in arun(window.engine.tools.list())}["calculator"]

    for keep in (False, True):
        dialog = _shown(window, arun, qtbot)
        dialog.pages.setCurrentWidget(dialog.tools_page)
        arun(dialog.tools_page.load())
        tools = dialog.tools_page.tool_list
        item = next(tools.item(i) for i in range(tools.count()) if tools.item(i).data(Qt.ItemDataRole.UserRole) == "calculator")
        item.setCheckState(Qt.CheckState.Unchecked)
        assert enabled() is True  # nothing kept before Save
        if keep:
            with qtbot.waitSignal(dialog.saved):
                dialog.buttons.accepted.emit()
        else:
            qtbot.keyClick(QApplication.focusWidget() or dialog, Qt.Key.Key_Escape)
            assert not dialog.isVisible()
        assert enabled() is (not keep)


def test_tools_and_safety_rules_read_as_words_with_the_id_in_the_tooltip(open_window, arun, qtbot):
    window = open_window()
    dialog = _shown(window, arun, qtbot)
    arun(dialog.tools_page.load())
    tools = dialog.tools_page.tool_list
    items = {tools.item(i).data(Qt.ItemDataRole.UserRole): tools.item(i) for i in range(tools.count())}
    clock = items["current_datetime"]
    assert clock.text().startswith("Current date and time — ") and "current_datetime" not in clock.text()
    assert clock.toolTip().startswith("current_datetime")
    assert tool_label("files__read_text") == "Read text (from files)"  # an MCP server's tool
    table = dialog.safety_page.table
    assert table.isColumnHidden(1)  # the id column
    rows = {table.item(r, 0).toolTip(): table.item(r, 0).text() for r in range(table.rowCount())}
    assert rows["content.self_harm"] == "Sensitive topics: self-harm"
    assert rows["secret.gitlab_token"] == "Secrets: GitLab token"
    visible = [table.item(r, 0).text() for r in range(table.rowCount())]
    assert not any("." in text.split(":")[-1] or "_" in text for text in visible), visible
    dialog.reject()
