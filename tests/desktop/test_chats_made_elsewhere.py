"""Chats made while the window is open by another front end of its engine (`wren ask`,
answered through the window's socket) or another process on the same data (`wren chat`)
show in the sidebar: the window reads its list again every few seconds and when it is
activated, and rebuilds it only when something changed, keeping the chat shown, the list's
scroll position and a rename in progress."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QWidget

from wren.desktop.sidebar.grouping import TERMINAL
from wren.desktop.sidebar.sidebar import ID_ROLE
from wren.desktop.window import main_window
from wren.engine.records import ORIGIN_KEY, TERMINAL_ORIGIN

FROM_TERMINAL = {ORIGIN_KEY: TERMINAL_ORIGIN}


def _many_chats(window, arun, qtbot, n: int = 40) -> list[int]:
    ids = [arun(window.engine.conversations.create(f"Chat {i}")).id for i in range(n)]
    with qtbot.waitSignal(window.conversations.listed):
        window.conversations.refresh()
    return ids


def _group_of(sidebar, conversation_id: int) -> str:
    group = ""
    for row in range(sidebar.list.count()):
        item = sidebar.list.item(row)
        if not item.flags():
            group = item.text()
        elif item is sidebar._find(conversation_id):
            return group
    raise AssertionError(f"chat {conversation_id} is not listed")


@pytest.mark.parametrize("settings", [FROM_TERMINAL, None], ids=["wren ask", "another front end"])
def test_a_chat_made_elsewhere_shows_within_a_poll_and_the_users_place_is_kept(
        open_window, arun, qtbot, monkeypatch, settings):
    monkeypatch.setattr(main_window, "CHAT_LIST_POLL_MS", 200, raising=False)
    window = open_window()
    sidebar = window.sidebar
    sidebar.list.setFixedHeight(200)  # room for a few rows: the list scrolls
    ids = _many_chats(window, arun, qtbot)
    arun(window.conversations.open(ids[20]))
    bar = sidebar.list.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 0)
    bar.setValue(bar.maximum() // 2)
    scrolled = bar.value()
    assert scrolled > 0

    made = arun(window.engine.conversations.create("Name a planet", settings=settings))
    qtbot.waitUntil(lambda: made.id in sidebar.conversation_ids(), timeout=3000)

    assert _group_of(sidebar, made.id) == (TERMINAL if settings else "Today")
    assert window.conversations.current_id == ids[20]
    assert sidebar.list.currentItem() is sidebar._find(ids[20])
    assert [item.data(ID_ROLE) for item in sidebar.list.selectedItems()] == [ids[20]]
    assert bar.value() == scrolled


def test_activating_the_window_lists_chats_made_meanwhile(open_window, arun, qtbot, monkeypatch):
    monkeypatch.setattr(main_window, "CHAT_LIST_POLL_MS", 600_000, raising=False)  # only activation lists again here
    window = open_window()
    other = QWidget()
    qtbot.addWidget(other)
    other.show()
    other.activateWindow()
    qtbot.waitUntil(other.isActiveWindow)

    made = arun(window.engine.conversations.create("Asked in a terminal", settings=FROM_TERMINAL))
    qtbot.wait(300)
    assert made.id not in window.sidebar.conversation_ids()  # nothing else lists it here
    window.activateWindow()
    qtbot.waitUntil(lambda: made.id in window.sidebar.conversation_ids(), timeout=3000)
    assert _group_of(window.sidebar, made.id) == TERMINAL


def test_reading_the_list_again_changes_nothing_when_nothing_changed(open_window, arun, qtbot):
    window = open_window()
    ids = _many_chats(window, arun, qtbot, n=3)
    first = window.sidebar._find(ids[0])
    with qtbot.assertNotEmitted(window.conversations.listed):
        arun(window.conversations.refresh_if_changed())
    assert window.sidebar._find(ids[0]) is first  # the same row: the list was not rebuilt

    # nor is a rename in progress dropped by a chat made meanwhile
    window.sidebar.start_rename(ids[0])
    assert window.sidebar.editing()
    made = arun(window.engine.conversations.create("Elsewhere"))
    with qtbot.assertNotEmitted(window.conversations.listed):
        arun(window.conversations.refresh_if_changed())
    assert window.sidebar.editing()
    assert made.id not in window.sidebar.conversation_ids()
