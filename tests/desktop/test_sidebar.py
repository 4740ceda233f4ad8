"""The conversation list: days, search in message text, rename, pin, delete with undo, export."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta

from PySide6.QtCore import Qt

from wren.desktop.sidebar.grouping import PINNED, day_label, group_by_day
from wren.engine.records import ConversationInfo


def _conv(cid: int, when: datetime, pinned: bool = False) -> ConversationInfo:
    naive_utc = when.astimezone(UTC).replace(tzinfo=None)
    return ConversationInfo(cid, f"chat {cid}", naive_utc, naive_utc, None, pinned)


def test_grouped_by_local_day_with_pinned_first():
    now = datetime.now().astimezone().replace(hour=12, minute=0, second=0, microsecond=0)
    today = now.date()
    convs = [
        _conv(1, now), _conv(2, now - timedelta(hours=1)), _conv(3, now - timedelta(days=1)),
        _conv(4, now - timedelta(days=3)), _conv(5, now - timedelta(days=40)), _conv(6, now - timedelta(days=2), pinned=True),
    ]
    groups = group_by_day(convs, today)
    assert [g.label for g in groups][:3] == [PINNED, "Today", "Yesterday"]
    assert [[c.id for c in g.conversations] for g in groups] == [[6], [1, 2], [3], [4], [5]]
    assert groups[3].label == (today - timedelta(days=3)).strftime("%A")


def test_day_labels():
    today = date(2025, 6, 15)
    assert day_label(date(2025, 6, 15), today) == "Today"
    assert day_label(date(2025, 6, 14), today) == "Yesterday"
    assert day_label(date(2025, 6, 10), today) == "Tuesday"
    assert day_label(date(2025, 3, 2), today) == "Sunday, 2 March"
    assert day_label(date(2023, 3, 2), today) == "2 March 2023"


def _titled(prompt: str) -> str:
    return "Garden flowers and roses" if "Write a title" in prompt else "Roses like sun."


def test_search_finds_a_word_only_inside_a_message(open_window, send, qtbot, arun):
    window = open_window(_titled)
    arun(window.engine.settings.set("titles.model", "always"))  # the engine names chats; the scripted model has one slot
    send(window, "Why do my zygomorphic flowers wilt?")
    qtbot.waitUntil(lambda: window.title_label.text() == "Garden flowers and roses")
    first = window.conversations.current_id
    window.conversations.new_chat()
    send(window, "Something else entirely")
    qtbot.waitUntil(lambda: len(window.sidebar.conversation_ids()) == 2)

    window.focus_search()
    with qtbot.waitSignal(window.conversations.listed, timeout=5000):
        qtbot.keyClicks(window.sidebar.search_box, "zygomorphic")
    assert window.sidebar.conversation_ids() == [first]
    with qtbot.waitSignal(window.conversations.listed, timeout=5000):
        window.sidebar.search_box.setText("nowhere-to-be-found")
    assert window.sidebar.conversation_ids() == []
    assert window.sidebar.empty_label.isVisible()
    with qtbot.waitSignal(window.conversations.listed, timeout=5000):
        window.sidebar.search_box.clear()
    assert len(window.sidebar.conversation_ids()) == 2


def test_title_is_written_by_the_model_after_the_first_answer(open_window, send, qtbot, arun):
    window = open_window(_titled)
    arun(window.engine.settings.set("titles.model", "always"))
    with qtbot.waitSignal(window.conversations.titled, timeout=10000) as blocker:
        send(window, "Tell me about roses")
    assert blocker.args[1] == "Garden flowers and roses"
    assert window.title_label.text() == "Garden flowers and roses"
    assert arun(window.engine.conversations.get(window.conversations.current_id)).title == "Garden flowers and roses"
    qtbot.waitUntil(lambda: window.sidebar.list.item(1) is not None and window.sidebar.list.item(1).text() == "Garden flowers and roses")


def test_rename_pin_delete_and_undo(open_window, qtbot, arun):
    window = open_window()
    a = arun(window.engine.conversations.create("Alpha"))
    b = arun(window.engine.conversations.create("Beta"))
    with qtbot.waitSignal(window.conversations.listed):
        window.conversations.refresh()
    assert window.sidebar.conversation_ids() == [b.id, a.id]

    # Rename in place: the list item's editor commits the new title.
    window.sidebar.start_rename(a.id)
    item = window.sidebar._find(a.id)
    with qtbot.waitSignal(window.conversations.listed):
        item.setText("Alpha renamed")
    assert arun(window.engine.conversations.get(a.id)).title == "Alpha renamed"

    with qtbot.waitSignal(window.conversations.listed):
        window.sidebar.pin_requested.emit(a.id, True)
    assert window.sidebar.list.item(0).text() == PINNED
    assert window.sidebar.conversation_ids() == [a.id, b.id]

    with qtbot.waitSignal(window.conversations.opened):
        window.sidebar.select(None)
        chats = window.sidebar.list
        qtbot.mouseClick(chats.viewport(), Qt.MouseButton.LeftButton, pos=chats.visualItemRect(window.sidebar._find(b.id)).center())
    with qtbot.waitSignal(window.conversations.listed):
        qtbot.keyClick(window.sidebar.list, Qt.Key.Key_Delete)
    assert window.sidebar.conversation_ids() == [a.id]
    assert window.conversations.current_id is None  # the open chat went away
    assert window.sidebar.undo_bar.isVisible() and "Beta" in window.sidebar.undo_label.text()
    with qtbot.waitSignal(window.conversations.opened):
        window.sidebar.undo_button.click()
    assert window.sidebar.conversation_ids() == [a.id, b.id]
    assert window.conversations.current_id == b.id


def test_export_markdown_and_json(open_window, send, arun, tmp_path):
    window = open_window("An **answer**.")
    send(window, "A question")
    cid = window.conversations.current_id
    md = arun(window.conversations.export_to(cid, "markdown", tmp_path / "chat.md")).read_text()
    assert "A question" in md and "An **answer**." in md and md.startswith("# ")
    data = json.loads(arun(window.conversations.export_to(cid, "json", tmp_path / "chat.json")).read_text())
    assert [m["content"] for m in data["messages"]] == ["A question", "An **answer**."]


def _right_click_menu(window, qtbot, conversation_id: int):
    """Right-click a chat's row as a person does: the press, then the menu it opens."""
    chats = window.sidebar.list
    where = chats.visualItemRect(window.sidebar._find(conversation_id)).center()
    qtbot.mousePress(chats.viewport(), Qt.MouseButton.RightButton, pos=where)
    qtbot.mouseRelease(chats.viewport(), Qt.MouseButton.RightButton, pos=where)
    window.sidebar._menu(where)  # what customContextMenuRequested calls (offscreen sends no context-menu event)
    return window.sidebar.menu


def _open_chat(window, qtbot, conversation_id: int) -> None:
    chats = window.sidebar.list
    with qtbot.waitSignal(window.conversations.opened):
        qtbot.mouseClick(chats.viewport(), Qt.MouseButton.LeftButton,
                         pos=chats.visualItemRect(window.sidebar._find(conversation_id)).center())


def _two_chats_alpha_open(open_window, qtbot, arun):
    window = open_window()
    a = arun(window.engine.conversations.create("Alpha"))
    b = arun(window.engine.conversations.create("Beta"))
    with qtbot.waitSignal(window.conversations.listed):
        window.conversations.refresh()
    _open_chat(window, qtbot, a.id)
    return window, a, b


def test_a_closed_menu_gives_the_highlight_back_and_delete_keeps_to_the_open_chat(open_window, qtbot, arun):
    window, a, b = _two_chats_alpha_open(open_window, qtbot, arun)
    menu = _right_click_menu(window, qtbot, b.id)
    assert window.sidebar.list.currentItem() is window.sidebar._find(b.id)  # the press moved the highlight
    menu.close()  # Esc: nothing chosen
    assert window.sidebar.list.currentItem() is window.sidebar._find(a.id)
    with qtbot.waitSignal(window.conversations.listed):
        qtbot.keyClick(window.sidebar.list, Qt.Key.Key_Delete)
    assert window.sidebar.conversation_ids() == [b.id]  # the open chat went, not the right-clicked one


def test_undo_of_a_chat_deleted_from_the_list_leaves_the_open_chat_shown(open_window, qtbot, arun):
    window, a, b = _two_chats_alpha_open(open_window, qtbot, arun)
    with qtbot.waitSignal(window.conversations.listed):
        window.sidebar.delete_requested.emit(b.id)  # its menu's "Delete (can be undone)"
    with qtbot.waitSignal(window.conversations.listed):
        window.sidebar.undo_button.click()
    assert window.sidebar.conversation_ids() == [b.id, a.id]
    assert window.conversations.current_id == a.id  # still on Alpha
    assert window.sidebar.list.currentItem() is window.sidebar._find(a.id)


def test_delete_permanently_asks_and_cancel_keeps_the_chat(open_window, qtbot, arun):
    from PySide6.QtWidgets import QMessageBox

    window = open_window()
    a = arun(window.engine.conversations.create("Alpha"))
    with qtbot.waitSignal(window.conversations.listed):
        window.conversations.refresh()
    menu = _right_click_menu(window, qtbot, a.id)
    actions = {x.text(): x for x in menu.actions()}
    actions["Delete permanently"].trigger()
    menu.close()
    box = window.sidebar.confirm_box
    assert box is not None and box.isVisible() and "“Alpha”" in box.text() and "cannot be undone" in box.text()
    assert box.defaultButton() is box.button(QMessageBox.StandardButton.Cancel)  # Enter does not delete
    box.button(QMessageBox.StandardButton.Cancel).click()
    qtbot.wait(100)
    assert [c.id for c in arun(window.engine.conversations.list())] == [a.id]
