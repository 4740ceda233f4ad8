"""Desktop fixtures: an asyncio loop living on the Qt loop, and a Wren window over a
scripted engine. Tests wait with qtbot (waitSignal/waitUntil), which spins the Qt loop and
with it every engine coroutine."""

from __future__ import annotations

import asyncio
import faulthandler
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import qasync


@pytest.fixture(autouse=True)
def _collected_on_the_window_thread(qapp):
    """As in the real window (desktop/collector.py): cycles are collected on this thread
    only, never by an engine worker thread that happens to allocate (which froze runs)."""
    from wren.desktop.collector import WindowThreadCollector

    collector = WindowThreadCollector()
    collector.start()
    yield
    collector.stop()
    collector.deleteLater()


@pytest.fixture(autouse=True)
def _deleted_before_the_next_test():
    """Whatever a test's fixtures handed to deleteLater() is deleted as the test ends: a
    window left for later (several app fixtures only call deleteLater) kept its timers, and
    its offline-lock poll fired into the next test with no event loop."""
    yield
    from PySide6.QtCore import QCoreApplication, QEvent

    if QCoreApplication.instance() is not None:
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


@pytest.fixture(scope="session")
def _session_loop(qapp):
    # One loop for the whole run: PySide6 6.11 loses the thread-safe wake-up signal of a
    # qasync loop created after another one was closed, so loops are never re-created.
    loop = qasync.QEventLoop(qapp, already_running=True)
    asyncio.events._set_running_loop(None)  # running only inside desktop tests (see aloop)
    yield loop
    loop.stop()  # only marks it stopped: no Qt loop is running under pytest-qt
    loop.close()


@pytest.fixture
def aloop(_session_loop, qtbot):
    """qasync's loop marked as running, so coroutines advance whenever Qt processes events.
    Unmarked afterwards, so other tests in the same run can still call asyncio.run().

    qasync's loop policy is installed for the test, as `qasync.run` installs it in the real
    window: under it `asyncio.new_event_loop()` makes a Qt loop, which froze the window when
    an engine thread made its own loop that way (the MCP manager, remote providers)."""
    policy = asyncio.get_event_loop_policy()
    asyncio.set_event_loop_policy(qasync.DefaultQEventLoopPolicy())
    asyncio.set_event_loop(_session_loop)
    asyncio.events._set_running_loop(_session_loop)
    try:
        yield _session_loop
        pending = [t for t in asyncio.all_tasks(_session_loop) if not t.done()]
        for task in pending:
            task.cancel()
        if pending:
            qtbot.waitUntil(lambda: all(t.done() for t in pending), timeout=5000)
    finally:
        asyncio.events._set_running_loop(None)
        asyncio.set_event_loop(None)
        asyncio.set_event_loop_policy(policy)


@pytest.fixture
def arun(aloop, qtbot) -> Callable[..., Any]:
    """Run a coroutine to completion while Qt keeps processing events; return its result."""

    def run(coro: Awaitable[Any], timeout: float = 10.0) -> Any:
        task = asyncio.ensure_future(coro)
        try:
            qtbot.waitUntil(task.done, timeout=int(timeout * 1000))
        except Exception:
            # what every thread was doing, so a hang seen once in CI can be told apart from
            # a slow machine
            faulthandler.dump_traceback(all_threads=True)
            task.print_stack()
            raise
        return task.result()

    return run


@pytest.fixture
def open_window(make_engine, arun, qtbot):
    """Build a started window over a scripted engine; everything is closed afterwards."""
    from PySide6.QtCore import QCoreApplication, QEvent

    from wren.desktop.window.main_window import MainWindow

    made: list[tuple[MainWindow, Any]] = []

    def factory(reply: Any = "Hello from Wren.", *, wait_model: bool = True, engine=None, **kwargs) -> MainWindow:
        engine = engine or make_engine(reply, **kwargs)
        window = MainWindow(engine)
        window.show()
        made.append((window, engine))
        if wait_model:
            with qtbot.waitSignal(window.models.loaded, timeout=20000):
                arun(window.start())
        else:
            arun(window.start())
        return window

    yield factory
    for window, engine in reversed(made):
        arun(window.conversations.close())
        arun(window.tasks.cancel_all())
        if not getattr(engine, "_closed_by_test", False):
            arun(engine.close())
        window.keep_running_in_tray = False
        window.close()
        window.deleteLater()
    # Deleted now, while this test's loop is still current: a debounce timer of a closed
    # window (the token count of a restored draft) must not fire into the next test.
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


@pytest.fixture
def send(qtbot) -> Callable[..., Any]:
    """Type text into a window's composer, press Enter, wait until the answer is stored;
    returns the Finished event."""
    from PySide6.QtCore import Qt

    def do(window, text: str, timeout: int = 15000):
        window.composer.edit.setPlainText(text)
        with qtbot.waitSignal(window.conversations.turn_finished, timeout=timeout) as blocker:
            qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
        return blocker.args[0]

    return do
