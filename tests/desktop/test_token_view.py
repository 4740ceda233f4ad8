"""Tokens you can see: the composer's popover and the inspector's Tokens tab show a text as
the loaded model's tokens, with boundaries, ids on hover, spaces as · and newlines."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QPoint
from PySide6.QtGui import QHelpEvent
from PySide6.QtWidgets import QApplication, QToolTip

from wren.desktop.chat.tokens import label_for


def test_the_draft_as_tokens_in_a_popover(open_window, qtbot, arun):
    window = open_window("ok")
    text = "hello  world\nnext line"
    window.composer.edit.setPlainText(text)
    popover = window.token_popover
    with qtbot.waitSignal(popover.panel.loaded, timeout=10000) as blocker:
        window.tokens_action.trigger()  # Chat ▸ Show the draft as tokens (Ctrl+Shift+K)
    expected = arun(window.engine.models.tokens(text))
    strip = popover.panel.strip
    assert popover.isVisible() and blocker.args[0] == len(expected)
    assert [(p.id, p.text) for p in strip.pieces] == [(p.id, p.text) for p in expected]
    assert f"{len(expected):,} tokens" in popover.panel.count_label.text()
    labels = [label_for(p) for p in strip.pieces]
    assert any("·" in label for label in labels) and not any(" " in label for label in labels)
    newline = next(i for i, p in enumerate(strip.pieces) if "\n" in p.text)
    assert "↵" in labels[newline]
    strip.resize(600, strip.heightForWidth(600))
    boxes = strip.boxes()
    assert boxes[newline + 1].x() == 0 and boxes[newline + 1].y() > boxes[newline].y()  # the line breaks
    # Boundaries: neighbouring tokens on alternating backgrounds.
    image = strip.grab().toImage()
    first, second = boxes[0], boxes[1]
    assert image.pixelColor(first.left() + 1, first.top() + 1) != image.pixelColor(second.left() + 1, second.top() + 1)
    # The id on hover.
    centre = boxes[1].center()
    QApplication.sendEvent(strip, QHelpEvent(QEvent.Type.ToolTip, centre, strip.mapToGlobal(centre)))
    assert QToolTip.text().startswith(f"id {strip.pieces[1].id} ")
    assert strip.piece_at(QPoint(599, boxes[-1].bottom() + 50)) is None
    popover.hide()


def test_the_shortcut_opens_it_too(open_window, qtbot):
    window = open_window("ok")
    window.composer.edit.setPlainText("abc")
    with qtbot.waitSignal(window.token_popover.panel.loaded, timeout=10000):
        window.tokens_action.trigger()
    assert window.token_popover.isVisible()
    window.token_popover.hide()


def test_any_message_as_tokens_in_the_inspector(open_window, send, qtbot, arun):
    window = open_window("The answer,\nin two lines.")
    send(window, "A question")
    answer = arun(window.engine.conversations.messages(window.conversations.current_id))[-1]
    inspector = arun(window.context.inspect(answer.id))
    panel = inspector.token_panel
    qtbot.waitUntil(lambda: bool(panel.strip.pieces), timeout=10000)
    expected = arun(window.engine.models.tokens(answer.content))
    assert [p.id for p in panel.strip.pieces] == [p.id for p in expected]
    assert "".join(p.text for p in panel.strip.pieces) == answer.content
    assert inspector.tabs.tabText(inspector.tabs.indexOf(panel)) == "Tokens"
    inspector.close()
