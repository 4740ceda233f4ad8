"""Quick prompt, tray, single instance (`wren-desktop --quick`), global hotkey."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from wren.desktop.tray.hotkey import GlobalHotkey, unsupported_reason
from wren.desktop.tray.instance import QUICK, SHOW, SingleInstance, server_name

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def wren_app(make_engine, arun, qtbot):
    """The whole app (window, quick prompt, tray) over a scripted engine."""
    from wren.desktop.app import WrenApp

    made = []

    def factory(reply="Quick answer with `code`.", *, tray=False, instance=None, **kwargs):
        app = WrenApp(make_engine(reply, **kwargs), instance, tray=tray)
        made.append(app)
        with qtbot.waitSignal(app.window.models.loaded, timeout=20000):
            arun(app.start())
        return app

    yield factory
    for app in made:
        arun(app.shutdown())
        app.window.deleteLater()
        app.quick.deleteLater()


def test_quick_prompt_streams_then_opens_in_wren(wren_app, qtbot, arun):
    app = wren_app()
    quick = app.quick
    app.tray.quick_action.trigger()  # the tray's "Quick prompt"
    assert quick.isVisible()
    assert quick.windowFlags() & Qt.WindowType.WindowStaysOnTopHint
    assert quick.windowFlags() & Qt.WindowType.FramelessWindowHint
    qtbot.keyClicks(quick.input, "What is 2+2?")
    with qtbot.waitSignal(quick.turn_finished, timeout=15000):
        qtbot.keyClick(quick.input, Qt.Key.Key_Return)
    assert quick.answer.text() == "Quick answer with `code`."
    assert quick.open_button.isEnabled()

    with qtbot.waitSignal(app.window.conversations.opened, timeout=5000) as opened:
        quick.open_button.click()
    assert opened.args[0] == quick.conversation_id
    assert not quick.isVisible() and app.window.isVisible()
    texts = [w.text() for w in app.window.chat.message_widgets()]
    assert texts == ["What is 2+2?", "Quick answer with `code`."]
    qtbot.waitUntil(lambda: quick.conversation_id in app.window.sidebar.conversation_ids())


def test_quick_prompt_esc_stops_then_hides(wren_app, qtbot):
    app = wren_app(" ".join(["slow"] * 300), delay=0.005)
    quick = app.quick
    quick.popup()
    quick.input.setText("Talk")
    with qtbot.waitSignal(quick.turn_finished, timeout=15000) as blocker:
        qtbot.keyClick(quick.input, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: len(quick.answer.text()) > 20)
        qtbot.keyClick(quick, Qt.Key.Key_Escape)
    assert blocker.args[0].reason.value == "cancelled"
    assert quick.status.text() == "Stopped." and quick.isVisible()
    qtbot.keyClick(quick, Qt.Key.Key_Escape)
    assert not quick.isVisible()


def _private_socket(made: list[Path]) -> str:
    """A socket path in a short private folder, as the runtime folder gives the window."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="wren-test-"))
    made.append(folder)
    return str(folder / f"desktop-{uuid.uuid4().hex[:8]}.sock")


@pytest.fixture
def private_socket():
    import shutil

    made: list[Path] = []
    yield lambda: _private_socket(made)
    for folder in made:
        shutil.rmtree(folder, ignore_errors=True)


def test_single_instance_hands_requests_to_the_running_one(qtbot, private_socket):
    name = private_socket()
    first, second = SingleInstance(name), SingleInstance(name)
    assert not second.forward(QUICK)  # nobody is listening yet
    assert first.listen()
    with qtbot.waitSignal(first.message, timeout=5000) as got:
        assert second.forward(QUICK)
    assert got.args == [QUICK]
    with qtbot.waitSignal(first.message, timeout=5000) as got:
        assert second.forward(SHOW)
    assert got.args == [SHOW]
    first.close()
    assert server_name("/a") != server_name("/b")


@pytest.mark.skipif(sys.platform == "win32", reason="named pipes leave no file behind")
def test_a_stale_socket_from_a_crashed_wren_is_replaced(qtbot, private_socket):
    import socket

    name = private_socket()
    path = Path(name)
    crashed = socket.socket(socket.AF_UNIX)
    crashed.bind(str(path))  # a socket file nobody listens on, as a killed Wren leaves
    crashed.close()
    assert path.exists()
    fresh = SingleInstance(name)
    assert not fresh.forward(SHOW)
    assert fresh.listen()
    fresh.close()


@pytest.mark.slow
def test_wren_desktop_quick_reaches_the_running_instance(wren_app, qtbot, wren_home):
    from wren.engine import paths

    socket_path = paths.instance_socket_path()  # where wren-desktop looks for the running one
    paths.private_runtime_dir(socket_path.parent)
    instance = SingleInstance(str(socket_path))
    assert instance.listen()
    app = wren_app(instance=instance)
    env = {**os.environ, "WREN_HOME": str(wren_home), "QT_QPA_PLATFORM": "offscreen"}
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from wren.desktop.app import main; sys.exit(main(['--quick']))"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    qtbot.waitUntil(lambda: proc.poll() is not None and app.quick.isVisible(), timeout=30000)
    assert proc.returncode == 0, proc.stdout.read().decode()
    instance.close()


def test_hotkey_is_off_where_the_platform_has_none():
    hotkey = GlobalHotkey()
    reason = unsupported_reason()
    assert reason is not None  # the offscreen test platform has no global keys
    assert hotkey.set_shortcut("Ctrl+Alt+Space") == reason
    assert hotkey.shortcut is None
    assert hotkey.set_shortcut(None) is None


def test_hotkey_setting_is_kept_off_and_reported(wren_app, arun):
    from wren.desktop.settings.dialog import HOTKEY_ENABLED

    app = wren_app()
    assert app.hotkey.shortcut is None and app.hotkey_problem
    arun(app.engine.settings.set(HOTKEY_ENABLED, False))
    arun(app.apply_hotkey())
    assert app.hotkey.shortcut is None


def test_tray_notice_is_said_once(wren_app, qtbot, arun):
    from wren.desktop.app import TRAY_NOTICE_SHOWN

    app = wren_app(tray=True)
    said = []
    app.tray.say = lambda title, text: said.append(title)
    assert app.window.keep_running_in_tray
    for _ in range(2):
        app.window.show()
        app.window.close()
        qtbot.waitUntil(lambda: arun(app.engine.settings.get(TRAY_NOTICE_SHOWN, False)))
    assert said == ["Wren is still running"]
    assert not app.done.done()  # closing the window did not quit
    app.tray.quit_action.trigger()
    assert app.done.done()


def test_quick_prompt_keeps_a_question_asked_while_the_model_loads(wren_app, qtbot, arun):
    import asyncio

    app = wren_app("Loaded and answering.")
    engine, gate = app.engine, asyncio.Event()
    real_load = engine.models.load

    async def slow_load(*args, **kwargs):
        await gate.wait()
        return await real_load(*args, **kwargs)

    engine.models.load = slow_load
    quick = app.quick
    with qtbot.waitSignal(app.window.models.loading, timeout=5000):
        app.window.models.load_in_background()  # e.g. another model chosen in the picker
    quick.popup()
    qtbot.keyClicks(quick.input, "Asked while loading")
    qtbot.keyClick(quick.input, Qt.Key.Key_Return)
    assert quick.queued == "Asked while loading"
    assert "loading" in quick.status.text().lower() and "kept" in quick.status.text()
    assert "Asked while loading" in quick.answer.text()  # the question stays in sight
    with qtbot.waitSignal(quick.turn_finished, timeout=15000) as finished:
        gate.set()
    assert finished.args[0].reason.value == "stop"
    assert quick.answer.text() == "Loaded and answering." and quick.queued is None
    stored = arun(engine.conversations.messages(quick.conversation_id))
    assert [m.content for m in stored] == ["Asked while loading", "Loaded and answering."]


def test_quick_prompt_gives_the_question_back_when_no_model_loads(wren_app, qtbot):
    app = wren_app()
    quick = app.quick
    quick.set_ready(False, "Wren is loading the model…", loading=True)
    quick.popup()
    qtbot.keyClicks(quick.input, "Still here?")
    qtbot.keyClick(quick.input, Qt.Key.Key_Return)
    assert quick.queued == "Still here?"
    quick.set_ready(False, "No model is loaded; open Wren's settings to choose one.")
    assert quick.queued is None and quick.input.text() == "Still here?"
    assert "No model" in quick.status.text()


def test_quick_prompt_meets_self_harm_with_care(wren_app, qtbot):
    app = wren_app("I'm here with you.")
    quick = app.quick
    quick.popup()
    qtbot.keyClicks(quick.input, "I want to die")
    with qtbot.waitSignal(quick.turn_finished, timeout=15000):
        qtbot.keyClick(quick.input, Qt.Key.Key_Return)
    assert quick.answer.text() == "I'm here with you."  # answered, not held back
    care = app.engine.safety.care_message()
    assert care.title in quick.status.text() and "findahelpline.com" in quick.status.text()
    assert "rule" not in quick.status.text().lower() and "self_harm" not in quick.status.text()


def test_engine_notices_reach_the_window(wren_app, qtbot):
    """A damaged model file found by the engine's background check is said in a dialog
    that names the file; disk freed at start is a status-bar line."""
    from PySide6.QtWidgets import QMessageBox

    from wren.engine.records import EngineNotice

    app = wren_app()
    app.engine.notify(EngineNotice("model_damaged", "model.gguf is damaged: re-import the model", "/m/model.gguf"))
    qtbot.waitUntil(lambda: app.window.findChild(QMessageBox, "modelDamagedNotice") is not None, timeout=5000)
    box = app.window.findChild(QMessageBox, "modelDamagedNotice")
    assert "re-import" in box.text() and "model.gguf" in box.text()
    box.close()
    app.engine.notify(EngineNotice("disk_freed", "Removed 2 unfinished model folders (1.0 GB)."))
    qtbot.waitUntil(lambda: "unfinished model folders" in app.window.status.currentMessage(), timeout=5000)


def test_quick_prompt_refused_question_leaves_no_chat(wren_app, qtbot, arun, monkeypatch):
    """A quick question the engine refuses is said and given back; no chat is made."""
    import wren.engine.chat

    monkeypatch.setattr(wren.engine.chat, "MAX_MESSAGE_CHARS", 20)
    app = wren_app()
    before = len(arun(app.engine.conversations.list()))
    app.quick.popup()
    app.quick.input.setText("a question longer than twenty characters")
    qtbot.keyClick(app.quick.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: "limit" in app.quick.status.text(), timeout=10000)
    assert app.quick.input.text() == "a question longer than twenty characters"
    assert len(arun(app.engine.conversations.list())) == before
