"""Window size, position, splitter and maximized state come back after a restart."""

from __future__ import annotations

from wren.desktop.window.main_window import LAYOUT_KEY


def test_size_position_and_splitter_come_back(open_window, make_engine, arun, qtbot):
    first = open_window()
    first.resize(800, 560)  # the smallest screen the window supports is 800×600
    first.move(0, 70)  # the offscreen screen is 800 px wide: a full-width window sits at x 0
    first.splitter.setSizes([220, 576])  # the header (with Library) keeps the chat pane at least ~572 wide
    first.splitter.splitterMoved.emit(220, 1)  # as a drag says it: the user's width, kept (not fitted to the title)
    qtbot.waitUntil(lambda: first.width() == 800 and first.splitter.sizes()[0] == 220)
    saved_sizes = first.splitter.sizes()
    with qtbot.waitSignal(first.quit_requested):
        first.close()  # what quitting does; the app also saves on shutdown
    qtbot.waitUntil(lambda: arun(first.engine.settings.get(LAYOUT_KEY)) is not None)

    second = open_window(engine=make_engine())  # a new Wren over the same data folder
    assert abs(second.width() - 800) <= 4 and abs(second.height() - 560) <= 4  # the offscreen frame's few pixels
    # Where it was (the offscreen platform may shift a window by its frame's few pixels).
    assert abs(second.x() - first.x()) <= 20 and abs(second.y() - first.y()) <= 20, (second.pos(), first.pos())
    assert second.splitter.sizes()[0] == saved_sizes[0]  # the sidebar keeps its width; the chat takes the rest
    assert not second.isMaximized()


def test_maximized_comes_back(open_window, make_engine, arun, qtbot):
    first = open_window()
    first.showMaximized()
    qtbot.waitUntil(first.isMaximized)
    arun(first.save_layout())
    second = open_window(engine=make_engine())
    qtbot.waitUntil(second.isMaximized)


def test_a_damaged_saved_layout_is_ignored(open_window, make_engine, arun):
    first = open_window()
    arun(first.engine.settings.set(LAYOUT_KEY, {"geometry": "not base64!", "splitter": ["x"]}))
    second = open_window(engine=make_engine())
    assert second.isVisible() and second.width() > 0
