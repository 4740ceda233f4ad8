"""Long titles are cut with "…" everywhere (whole in a tooltip), nothing scrolls sideways, and
the window works at 800×600."""

from __future__ import annotations

from PySide6.QtCore import QRect
from PySide6.QtWidgets import QWidget

from wren.desktop.sidebar.sidebar import ID_ROLE

LONG = "A remarkably long conversation title about planning the summer holiday in the mountains " * 3


def _titled_chat(window, send, arun, qtbot, title: str = LONG) -> int:
    """A chat whose generated title came first and was then renamed to `title`."""
    with qtbot.waitSignal(window.conversations.titled, timeout=10000):
        send(window, "hi")
    cid = window.conversations.current_id
    arun(window.conversations.rename(cid, title))
    return cid


def _inside(widget: QWidget, window: QWidget) -> bool:
    """The widget is shown whole inside the window's client area."""
    top_left = widget.mapTo(window, widget.rect().topLeft())
    return window.rect().contains(QRect(top_left, widget.size()))


def test_the_window_fits_800_by_600(open_window, send, arun, qtbot):
    window = open_window("Line one\nLine two")
    _titled_chat(window, send, arun, qtbot)
    hint = window.minimumSizeHint()
    assert hint.width() <= 800 and hint.height() <= 600, hint
    window.resize(800, 600)
    qtbot.waitUntil(lambda: window.width() == 800 and window.height() == 600)
    qtbot.wait(50)  # layouts settle
    header = window.header
    folded = header.foldable() if header.folded else []  # in "⋯"'s menu, which must then show
    assert window.temporary_button in folded and window.settings_button in folded  # a long title at 800 px
    controls = (window.model_picker, window.temporary_button, window.models_button, window.settings_button,
                window.composer.edit, window.composer.send_button, window.sidebar.search_box,
                window.sidebar.new_chat_button, window.title_label, header.more_button)
    for control in controls:
        if control in folded:
            continue
        assert control.isVisible() and control.width() > 10 and _inside(control, window), control.objectName()
    assert window.sidebar.width() >= 180  # the header does not squeeze the chat list
    assert window.chat.width() >= 400


def test_a_long_title_is_elided_with_the_whole_title_in_a_tooltip(open_window, send, arun, qtbot):
    window = open_window()
    cid = _titled_chat(window, send, arun, qtbot)
    window.resize(800, 600)
    qtbot.waitUntil(lambda: window.width() == 800)
    whole = arun(window.engine.conversations.get(cid)).title  # as the engine keeps it
    assert len(whole) > 150
    label = window.title_label
    assert label.text() == whole  # what the window knows; what it shows is cut
    qtbot.waitUntil(lambda: label.shown_text().endswith("…"))
    assert len(label.shown_text()) < len(whole) and label.toolTip() == whole
    assert label.fontMetrics().horizontalAdvance(label.shown_text()) <= label.width()
    title = window.windowTitle()
    assert title.endswith(" — Wren") and "…" in title and len(title) < 80

    sidebar_list = window.sidebar.list
    row = next(sidebar_list.item(i) for i in range(sidebar_list.count()) if sidebar_list.item(i).data(ID_ROLE) == cid)
    assert row.toolTip() == whole
    qtbot.waitUntil(lambda: sidebar_list.visualItemRect(row).width() <= sidebar_list.viewport().width())
    assert not sidebar_list.horizontalScrollBar().isVisible()
    assert sidebar_list.horizontalScrollBar().maximum() == 0


def test_a_long_model_name_does_not_widen_the_header(open_window, qtbot):
    window = open_window()
    picker = window.model_picker
    picker.addItem("an-extraordinarily-long-model-name-that-goes-on-and-on-q4_k_m-instruct-v2")
    window.status.model_label.setText("an-extraordinarily-long-model-name-that-goes-on-and-on · cpu")
    assert picker.minimumSizeHint().width() < 260
    assert window.minimumSizeHint().width() <= 800
    assert window.status.model_label.toolTip().startswith("an-extraordinarily")
