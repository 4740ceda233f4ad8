"""A passing message longer than the room left of the status bar's labels is cut with "…"
where the room ends (Qt cut it mid-letter under the first label), whole in its tooltip and in
currentMessage()."""

from __future__ import annotations

from PySide6.QtGui import QImage


def test_a_long_message_is_cut_to_fit_before_the_labels(open_window, qtbot):
    window = open_window()
    window.resize(700, 500)
    status = window.status
    status.show_speed(41.2, 0.31)
    long = "Memory saved: " + "the user prefers the metric system and short answers in the morning " * 4
    status.showMessage(long, 10000)
    qtbot.wait(50)
    shown = status.message_shown()
    room = status.message_rect()
    assert status.currentMessage() == long and status.toolTip() == long
    assert shown.endswith("…") and long.startswith(shown[:-1])
    assert status.fontMetrics().horizontalAdvance(shown) <= room.width()
    first = min(w.geometry().left() for w in (status.model_label, status.speed_label, status.context_label)
                if w.isVisible())
    assert room.right() < first
    # painted: nothing of the message reaches the labels (the strip before them is bare)
    image: QImage = status.grab().toImage()
    background = image.pixel(image.width() - 1, 0)
    strip = range(room.right() + 1, first)
    assert len(strip) >= 4
    assert all(image.pixel(x, y) == background for x in strip for y in range(image.height()))
    short = "Exported to /tmp/a.md"
    status.showMessage(short, 10000)
    assert status.message_shown() == short
