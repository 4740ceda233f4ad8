"""The status bar's offline-lock poll never outlives its window or its event loop: a timer
left running after a test's loop was gone raised "There is no current event loop" inside
whatever test ran next (seen in a clean-clone run)."""

from __future__ import annotations

import asyncio

from wren.desktop.bridge import Tasks
from wren.desktop.window.status import WrenStatusBar


def test_closing_the_window_stops_the_poll(open_window):
    window = open_window("Fine.")
    poll = window.status._offline_poll
    assert poll.isActive()
    window.close()
    assert not poll.isActive()


def test_a_poll_without_an_event_loop_stops_instead_of_raising(qtbot):
    bar = WrenStatusBar()
    qtbot.addWidget(bar)
    reads: list[int] = []

    async def read():
        reads.append(1)

    asyncio.set_event_loop(None)  # as after the loop the window ran on was closed
    bar.follow_offline_lock(read, Tasks())  # polls once at once: no loop, so it stops
    assert not bar._offline_poll.isActive()
