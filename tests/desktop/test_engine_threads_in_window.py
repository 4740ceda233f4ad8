"""Engine threads that run their own asyncio loop (the MCP manager, a remote provider), used
from the window on the real qasync loop with qasync's loop policy installed, as `qasync.run`
installs it in wren-desktop: a real stdio MCP server and a real OpenAI-compatible server on
127.0.0.1. Under that policy `asyncio.new_event_loop()` makes a Qt loop; an engine thread
that made its loop that way froze the window (MCP) or hung its answers (remote)."""

from __future__ import annotations

import asyncio
import sys
import threading
import time

import pytest
from PySide6.QtCore import Qt

from tests.engine.mcp.conftest import SERVER
from tests.engine.providers.fakeserver import FakeServer
from wren.desktop.settings.dialog import SettingsDialog

pytestmark = [pytest.mark.timeout(180)]


class Ticker:
    """Counts the Qt loop's timer ticks from a coroutine: a frozen window stops them."""

    def __init__(self) -> None:
        self.gaps: list[float] = []
        self._stop = asyncio.Event()
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.is_set():
            await asyncio.sleep(0.02)
            now = time.monotonic()
            self.gaps.append(now - last)
            last = now

    def stop(self) -> float:
        self._stop.set()
        return max(self.gaps, default=0.0)


def _engine_threads_loops() -> list[str]:
    """Each engine thread whose running loop is a Qt loop (none should be)."""
    found = []
    for thread in threading.enumerate():
        loop = getattr(thread, "wren_loop", None)
        if loop is not None and "qasync" in type(loop).__module__:
            found.append(f"{thread.name}: {type(loop).__name__}")
    return found


def test_the_mcp_manager_thread_runs_a_plain_loop_under_qasyncs_policy(aloop):
    from wren.engine.threadloop import LoopThread

    assert "qasync" in type(asyncio.get_event_loop_policy()).__module__
    thread = LoopThread("wren-test")
    try:
        loop = thread.loop
        assert type(loop).__module__.startswith("asyncio")
        assert asyncio.run_coroutine_threadsafe(asyncio.sleep(0, "ran"), loop).result(5) == "ran"
    finally:
        thread.stop()
    assert not thread.is_alive()


@pytest.mark.serial  # a wall-clock bound: runs with the machine to itself (make test)
def test_settings_tools_test_connection_works_and_the_window_keeps_painting(open_window, arun, qtbot):
    window = open_window()
    dialog = SettingsDialog(window.engine, window.tasks, hotkey_problem="not here", parent=window)
    page = dialog.tools_page
    arun(page.load())
    page.name_edit.setText("helper")
    page.command_edit.setText(sys.executable)
    page.args_edit.setText(str(SERVER))
    arun(page.save_server())

    ticker = Ticker()
    arun(page.test_server(), timeout=60)
    worst_gap = ticker.stop()
    assert "helper works" in page.status.text(), page.status.text()
    assert "helper__add" in page.output.toPlainText()
    assert worst_gap < 1.0, f"the window stopped for {worst_gap:.1f} s"
    assert _engine_threads_loops() == []

    # The composer's Tools menu starts the servers to list their tools (the second freeze).
    arun(window.conversations.tool_choice.load_for(None, start_servers=True), timeout=60)
    assert "helper__add" in {t.name for t in arun(window.engine.tools.list())}
    # And a call runs on the manager's thread from the window's loop.
    result = arun(window.engine.tools.call("helper__add", {"a": 2, "b": 3}), timeout=30)
    assert "5" in str(result)
    dialog.close()


@pytest.fixture
def wren_app(make_engine, arun, qtbot):
    from wren.desktop.app import WrenApp

    made = []

    def factory(reply="Local answer."):
        app = WrenApp(make_engine(reply), None, tray=False)
        made.append(app)
        with qtbot.waitSignal(app.window.models.loaded, timeout=20000):
            arun(app.start())
        return app

    yield factory
    for app in made:
        arun(app.shutdown())
        app.window.deleteLater()
        app.quick.deleteLater()


def _add_provider(app, arun, qtbot, server: FakeServer) -> None:
    """Settings → Providers → Add, as the window opens it."""
    app.open_settings()
    qtbot.waitUntil(lambda: app.settings is not None and app.settings.isVisible(), timeout=10000)
    page = app.settings.providers_page
    arun(page.load())
    page.name_edit.setText("fake")
    page.url_edit.setText(server.base_url)
    page.store_picker.setCurrentIndex(page.store_picker.findData("none"))
    info = arun(page.add())
    assert info is not None, page.status.text()
    app.settings.close()


def _pick(window, qtbot, name: str) -> None:
    picker = window.models.picker
    qtbot.waitUntil(lambda: picker.findText(name) >= 0, timeout=10000)
    picker.setCurrentIndex(picker.findText(name))
    picker.activated.emit(picker.findText(name))
    qtbot.waitUntil(lambda: window.engine.models.current is not None and window.engine.models.current.name == name,
                    timeout=20000)
    qtbot.waitUntil(lambda: not window.models.is_loading, timeout=20000)


def _texts(window) -> list[str]:
    return [w.text() for w in window.chat.message_widgets()]


def test_a_remote_provider_answers_in_the_window_stops_and_gives_way_to_the_local_model(wren_app, arun, qtbot, send):
    server = FakeServer().start()
    try:
        app = wren_app()
        window = app.window
        _add_provider(app, arun, qtbot, server)
        # In the window's picker at once, without a restart.
        qtbot.waitUntil(lambda: window.models.picker.findText("fake/fake-chat") >= 0, timeout=10000)

        _pick(window, qtbot, "fake/fake-chat")
        finished = send(window, "Hello remote?", timeout=30000)
        assert finished.reason.value == "stop", finished
        assert _texts(window)[-1] == "Hello from the remote side."
        assert _engine_threads_loops() == []
        assert server.chats()[-1].body["messages"][-1]["content"] == "Hello remote?"

        # A slow remote answer stops on Esc.
        server.delay = 0.3
        window.composer.edit.setPlainText("Tell me a long story.")
        with qtbot.waitSignal(window.conversations.turn_finished, timeout=30000) as blocker:
            qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
            qtbot.waitUntil(lambda: len(_texts(window)) == 4 and _texts(window)[-1] != "", timeout=10000)
            window.stop_action.trigger()  # Esc
        assert blocker.args[0].reason.value == "cancelled", blocker.args[0]
        server.delay = 0.0

        # Back to the local model: it loads and answers (this crashed the window).
        _pick(window, qtbot, "tiny")
        window.conversations.new_chat()
        finished = send(window, "And locally?")
        assert finished.reason.value == "stop", finished
        assert _texts(window)[-1] == "Local answer."
    finally:
        server.stop()


def _wren_ask_in_thread(*args: str) -> tuple[threading.Thread, dict]:
    """`wren ask` as a real process, run from a thread so the window's loop keeps going."""
    import os
    import subprocess
    from pathlib import Path

    result: dict = {}
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}

    def run() -> None:
        done = subprocess.run([sys.executable, "-m", "wren.engine.terminal", "ask", *args],
                              cwd=Path(__file__).resolve().parents[2], env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=60)
        result.update(code=done.returncode, out=done.stdout, err=done.stderr)

    thread = threading.Thread(target=run, name="test-wren-ask", daemon=True)
    thread.start()
    return thread, result


@pytest.mark.skipif(sys.platform == "win32", reason="`wren ask` reaches the window over a Unix socket")
def test_wren_ask_for_the_remote_model_is_answered_by_the_window(wren_app, arun, qtbot, monkeypatch):
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)  # the window's socket where the asker looks
    server = FakeServer().start()
    try:
        app = wren_app()
        _add_provider(app, arun, qtbot, server)
        _pick(app.window, qtbot, "fake/fake-chat")
        thread, result = _wren_ask_in_thread("--model", "fake/fake-chat", "--keep-alive", "60", "Hello", "there")
        qtbot.waitUntil(lambda: not thread.is_alive(), timeout=60000)
        assert result["code"] == 0, result
        assert result["out"].strip() == "Hello from the remote side.", result
        assert server.chats()[-1].body["messages"][-1]["content"] == "Hello there"
    finally:
        server.stop()


def test_quitting_ends_the_engine_threads(wren_app, arun, qtbot, send):
    """Ctrl+Q after a remote answer and an MCP server: the engine closes (the process used
    to stay, hidden, with no tray icon, waiting on a remote thread's Qt loop)."""
    server = FakeServer().start()
    try:
        app = wren_app()
        _add_provider(app, arun, qtbot, server)
        _pick(app.window, qtbot, "fake/fake-chat")
        send(app.window, "Hi", timeout=30000)
        arun(app.engine.tools.add_mcp_server("helper", command=sys.executable, args=[str(SERVER)]))
        assert "helper__add" in {t.name for t in arun(app.engine.tools.test_mcp_server("helper"), timeout=60)}
        assert any(name.startswith("wren-mcp") for name in _engine_threads())
        arun(app.shutdown(), timeout=30)
        app.shutdown = _already_shut  # the fixture's own shutdown: nothing left to do
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _engine_threads():
            time.sleep(0.05)
        assert _engine_threads() == []
    finally:
        server.stop()


async def _already_shut() -> None:
    return None


def _engine_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.is_alive() and t.name.startswith(("wren-remote", "wren-mcp"))]


def test_a_secret_masked_on_its_way_to_the_remote_model_is_said_as_such(wren_app, arun, qtbot, send):
    secret = "sk-proj-" + "Qw3eR5tY7uI9oP1aS3dF5gH7jK9lZ1xC3vB5nM7"
    server = FakeServer().start()
    try:
        app = wren_app()
        arun(app.engine.memories.add(f"My OpenAI API key is {secret}"))
        _add_provider(app, arun, qtbot, server)
        _pick(app.window, qtbot, "fake/fake-chat")
        messages: list[str] = []
        app.window.status.messageChanged.connect(messages.append)
        send(app.window, "What is my OpenAI API key?", timeout=30000)
        assert secret not in str(server.chats()[-1].body["messages"])
        assert any(m.startswith("Safety, in what was sent to the remote model:") for m in messages), messages
    finally:
        server.stop()
