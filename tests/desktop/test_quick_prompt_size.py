"""The quick prompt (issue 34): its answer area grows with the answer (it showed about three
lines), and after "Open in Wren" the hotkey gives a fresh question, never the old chat."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

LONG = "\n\n".join(f"Point {i}: a sentence that says something about step {i} of the plan." for i in range(14))


@pytest.fixture
def app(make_engine, arun, qtbot):
    from wren.desktop.app import WrenApp

    made = []

    def factory(reply, **kwargs):
        app = WrenApp(make_engine(reply, **kwargs), None, tray=False)
        made.append(app)
        with qtbot.waitSignal(app.window.models.loaded, timeout=20000):
            arun(app.start())
        return app

    yield factory
    for a in made:
        arun(a.shutdown())
        a.window.deleteLater()
        a.quick.deleteLater()


def test_the_answer_area_grows_with_a_long_answer(app, qtbot):
    quick = app(LONG).quick
    quick.popup()
    qtbot.keyClicks(quick.input, "Give me a plan")
    with qtbot.waitSignal(quick.turn_finished, timeout=15000):
        qtbot.keyClick(quick.input, Qt.Key.Key_Return)
    line = quick.answer_area.fontMetrics().lineSpacing()
    assert quick.answer_area.height() >= min(12 * line, 360 - line)  # not a three-line slot
    assert quick.answer_area.height() <= 360  # then it scrolls


def test_after_open_in_wren_the_hotkey_asks_a_fresh_question(app, qtbot):
    wren = app(" ".join(f"word{i}" for i in range(200)), delay=0.005)
    quick = wren.quick
    quick.popup()
    qtbot.keyClicks(quick.input, "first")
    with qtbot.waitSignal(quick.turn_finished, timeout=15000):
        qtbot.keyClick(quick.input, Qt.Key.Key_Return)
    qtbot.keyClicks(quick.input, "a follow-up")
    qtbot.keyClick(quick.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: quick.stream is not None)
    assert not quick.open_button.isEnabled()  # not while it answers
    with qtbot.waitSignal(quick.turn_finished, timeout=15000):
        pass
    with qtbot.waitSignal(wren.window.conversations.opened, timeout=5000):
        quick.open_button.click()
    wren.hotkey.activated.emit()
    assert quick.isVisible() and quick.conversation_id is None
    assert quick.input.text() == "" and not quick.answer_area.isVisible()
