"""Searching chats (issue 34): each result shows a snippet with the match highlighted;
opening one (Ctrl+K, type, Enter) shows the chat at the matching message, highlighted, not at
its bottom; the filter is cleared afterwards."""

from __future__ import annotations

from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QToolButton

from wren.desktop.sidebar.snippets import Hit, find_hit, snippet_around

LONG = "\n\n".join(f"Paragraph {i} of a long answer about gardens and the weather." for i in range(12))


def _in_viewport(view, widget) -> bool:
    top = widget.mapTo(view.viewport(), QPoint(0, 0)).y()
    return top >= 0 and top < view.viewport().height()


def test_a_snippet_is_the_words_around_the_first_match():
    text = "We planned the garden in spring. " * 3 + "Then the tulips came up red and yellow. " + "More. " * 20
    cut = snippet_around(text, text.index("tulips"), text.index("tulips") + 6)
    assert "tulips" in cut and cut.startswith("…") and cut.endswith("…") and len(cut) < 100


def test_search_shows_snippets_and_opens_the_chat_at_the_match(open_window, send, qtbot):
    window = open_window(LONG)
    window.resize(900, 600)
    send(window, "Tell me about Tulips and how to plant them")
    send(window, "More please")
    send(window, "And more")
    garden = window.conversations.current_id
    window.conversations.new_chat()
    send(window, "Plan a trip to Rome")
    other = window.conversations.current_id

    window.activateWindow()
    window.composer.edit.setFocus()
    qtbot.waitUntil(window.composer.edit.hasFocus)
    qtbot.keyClick(window.composer.edit, Qt.Key.Key_K, Qt.KeyboardModifier.ControlModifier)
    assert window.sidebar.search_box.hasFocus()
    with qtbot.waitSignal(window.search.hits_shown, timeout=10000):
        qtbot.keyClicks(window.sidebar.search_box, "tulips")
    assert window.sidebar.conversation_ids() == [garden]
    hit = window.sidebar.hit_for(garden)
    assert isinstance(hit, Hit) and "Tulips and how to plant" in hit.snippet
    html = hit.html("#ffee00")
    assert '<span style="background-color:#ffee00; font-weight:600">Tulips</span>' in html
    assert hit.message_id is not None  # the question that holds the word

    with qtbot.waitSignal(window.search.revealed, timeout=10000) as revealed:
        qtbot.keyClick(window.sidebar.search_box, Qt.Key.Key_Return)  # opens the first result
    assert window.conversations.current_id == garden and revealed.args[0] == hit.message_id
    qtbot.waitUntil(lambda: window.sidebar.conversation_ids() == [other, garden] or
                    sorted(window.sidebar.conversation_ids()) == sorted([other, garden]), timeout=5000)
    assert window.sidebar.search_box.text() == ""  # the filter is off again
    # the box's ⓧ fades away with the text (it stayed over the empty box)
    clear = next(b for b in window.sidebar.search_box.findChildren(QToolButton) if b.defaultAction() is not None
                 and b.defaultAction().objectName() == "_q_qlineeditclearaction")
    qtbot.waitUntil(lambda: clear.property("opacity") == 0, timeout=2000)
    view = window.chat
    found = view.widget_for(hit.message_id)
    qtbot.wait(200)  # the opened chat lays out over a few event-loop turns
    bar = view.verticalScrollBar()
    assert bar.maximum() > 0 and bar.value() < bar.maximum()  # not at the bottom
    assert _in_viewport(view, found)
    assert found.property("found") is True and found.found_marks >= 1

    # opening another chat plainly: no highlight carried over, and it opens at its bottom
    window.conversations.new_chat()
    assert found not in view.message_widgets() or not found.property("found")


def test_find_hit_needs_every_word_like_the_store():
    from datetime import datetime

    from wren.engine.records import MessageInfo, MessageStatus, Role

    def msg(i, text):
        return MessageInfo(i, 1, None, Role.USER, text, MessageStatus.COMPLETE, datetime.now())

    messages = [msg(1, "red tulips"), msg(2, "tulips in a red pot by the window")]
    assert find_hit(messages, "window tulips").message_id == 2
    assert find_hit(messages, "roses") is None
