"""`wren-desktop`: one QApplication on a qasync loop, the window, tray, quick prompt, hotkey.

The window shows at once; the model loads in the background. A second start (for example
`wren-desktop --quick` bound to a key) hands its request to the running Wren and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import time
from collections.abc import Awaitable, Callable

import qasync
from PySide6.QtCore import QObject, Qt, QTimer
from PySide6.QtWidgets import QApplication, QMessageBox

from wren.engine.api import Engine, install_network_guard
from wren.engine.crashreport import (
    asyncio_exception_handler,
    install_crash_hooks,
    mark_crash_reports_seen,
    pending_crash_reports,
    write_crash_report,
)
from wren.engine.errors import WrenError
from wren.engine.paths import data_dir
from wren.engine.terminal.resident_host import host_for_window

from .collector import WindowThreadCollector
from .crash_notice import CrashNotice, notice_text
from .settings.dialog import HOTKEY, HOTKEY_ENABLED, SavedSettings, SettingsDialog
from .theme import app_icon, apply_theme
from .tray.hotkey import DEFAULT_SHORTCUT, GlobalHotkey, unsupported_reason
from .tray.instance import QUICK, SHOW, SingleInstance, server_name
from .tray.quick import QuickPrompt
from .tray.tray import Tray
from .voice.quick_mic import QuickMic
from .welcome import WELCOME_SEEN, WelcomeDialog
from .window.main_window import MainWindow

log = logging.getLogger(__name__)
# A broken safety policy file leaves the user's rules out; the Safety settings page says what and where.
POLICY_PROBLEM = "Your safety policy file has a mistake, so Wren uses its shipped policy: Settings → Safety says where."

TRAY_NOTICE_SHOWN = "desktop.tray_notice_shown"


class WrenApp(QObject):
    """Wires the engine, the window, the tray, the quick prompt and the hotkey together."""

    def __init__(self, engine: Engine, instance: SingleInstance | None = None, *, tray: bool | None = None):
        super().__init__()
        self.engine = engine
        self.instance = instance
        self.window = MainWindow(engine)
        self.tasks = self.window.tasks
        self.quick = QuickPrompt(engine, self.tasks)
        self.quick_mic = QuickMic(self.quick, engine.voice, device=lambda: self.window.voice.choices.device())
        self.tray = Tray(app_icon(), self, available=tray)
        self.hotkey = GlobalHotkey(self)
        self.hotkey_problem: str | None = None
        self.settings: SettingsDialog | None = None
        self.welcome: WelcomeDialog | None = None
        self.crash_notice: CrashNotice | None = None
        self._stop_terminal: Callable[[], Awaitable[None]] | None = None  # `wren ask` answered here
        self.window.keep_running_in_tray = self.tray.available
        self.done: asyncio.Future = asyncio.get_running_loop().create_future()
        self._connect()

    def _connect(self) -> None:
        w, models = self.window, self.window.models
        self.tray.quick_requested.connect(self.quick.popup)
        self.tray.show_requested.connect(w.show_and_raise)
        self.tray.quit_requested.connect(self.quit)
        w.quit_requested.connect(self.quit)
        w.hidden_to_tray.connect(lambda: self.tasks.run(self._said_once(), what="tray notice"))
        w.settings_requested.connect(self.open_settings)
        w.memory_requested.connect(lambda memory_id: self.open_settings(memory_id=memory_id))
        w.welcome_requested.connect(lambda: self.tasks.run(self.show_welcome(), what="showing the welcome"))
        self.quick.open_requested.connect(self.open_in_window)
        self.quick.conversation_changed.connect(lambda _cid: w.conversations.refresh())
        models.loading.connect(lambda: self.quick.set_ready(False, "Wren is loading the model…", loading=True))
        models.loaded.connect(lambda status: self.quick.set_ready(True))
        models.load_failed.connect(lambda _t: self.quick.set_ready(False, "No model is loaded; open Wren's settings to choose one."))
        self.hotkey.activated.connect(self.quick.popup)
        if self.instance is not None:
            self.instance.message.connect(self.handle)
        self.engine.on_notice(self.show_notice)

    def show_notice(self, notice) -> None:
        """What the engine found outside any answer: a damaged model file gets a dialog that
        says to re-import it; disk freed at start is a status-bar line."""
        if notice.kind == "model_damaged":
            box = QMessageBox(QMessageBox.Icon.Warning, "A model file is damaged", notice.message,
                              QMessageBox.StandardButton.Ok, self.window)
            box.setObjectName("modelDamagedNotice")
            box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
            box.open()
        else:
            self.window.status.showMessage(notice.message, 15000)

    async def start(self, *, quick: bool = False, hidden: bool = False, greet: bool = True) -> None:
        """`greet`: the first start's welcome and the notice of a crash last time (both
        non-modal); off for the packaged start-up check."""
        await self.window.restore_layout()  # before showing: no jump from the default size
        for notice in self.engine.notices():  # found before the window subscribed
            self.show_notice(notice)
        if self.engine.policy_warnings:  # the user's own rules are not in force: said where it is seen
            self.window.status.showMessage(POLICY_PROBLEM, 60_000)
        shown = not ((quick or hidden) and self.tray.available)
        if shown:
            self.window.show()
        await self.window.start()
        await self.apply_hotkey()
        try:  # `wren ask` for the loaded model is answered here, not by a second copy of it
            self._stop_terminal = await host_for_window(self.engine)
        except Exception:  # the terminal then starts its own engine: Wren itself goes on
            log.exception("could not answer `wren ask` from the window")
        if greet:
            self.announce_crashes(in_window=shown)
            if shown and not await self.engine.settings.get(WELCOME_SEEN, False):
                try:  # hidden in the tray: at the next start that shows the window
                    await self.show_welcome()
                    await self.engine.settings.set(WELCOME_SEEN, True)
                except Exception:  # a greeting must never stop Wren from starting
                    log.exception("could not show the welcome")
        if quick:
            self.quick.popup()

    async def show_welcome(self) -> WelcomeDialog:
        """The welcome (first start, and Help → Welcome), beside the window, never modal."""
        if self.welcome is None:
            models = self.window.models
            self.welcome = WelcomeDialog(self.engine, self.tasks, data_dir(),
                                         model_loading=lambda: models.is_loading, parent=self.window)
            self.welcome.models_requested.connect(self.window.open_models)
            self.welcome.finished.connect(lambda _result: self.window.focus_composer())  # typing goes on there
            self.welcome.destroyed.connect(self._forget_welcome)
            for signal in (models.loaded, models.load_failed):
                signal.connect(self._welcome_model_changed)
        await self.welcome.refresh()
        self.welcome.show()
        self.welcome.raise_()
        return self.welcome

    # A dialog deleted by Qt (its parent going, a deleteLater) is forgotten, so that closing
    # Wren never reaches for a deleted one.
    def _forget_welcome(self, *_) -> None:
        self.welcome = None

    def _forget_crash_notice(self, *_) -> None:
        self.crash_notice = None

    def _welcome_model_changed(self, *_) -> None:
        if self.welcome is not None:
            self.welcome.model_changed()

    def announce_crashes(self, *, in_window: bool = True) -> CrashNotice | None:
        """Crash reports from earlier runs: a notice beside the window (a tray message when
        Wren starts hidden), once each. Nothing is sent anywhere."""
        try:
            reports = pending_crash_reports()
            if reports:
                mark_crash_reports_seen(reports)
        except OSError as exc:
            log.warning("could not read the crash reports: %s", exc)
            return None
        if not reports:
            return None
        if not in_window:
            self.tray.say(notice_text(reports)[0], f"A crash report was saved at {reports[0].path}")
            return None
        self.crash_notice = CrashNotice(reports, self.window)
        self.crash_notice.destroyed.connect(self._forget_crash_notice)
        self.crash_notice.show()
        return self.crash_notice

    def handle(self, message: str) -> None:
        """A request from a second `wren-desktop`."""
        if message == QUICK:
            self.quick.popup()
        elif message == SHOW:
            self.window.show_and_raise()

    def open_in_window(self, conversation_id: int) -> None:
        self.window.show_and_raise()
        self.tasks.run(self._open(conversation_id), what="opening the chat")

    async def _open(self, conversation_id: int) -> None:
        await self.window.conversations.refresh_list()
        await self.window.conversations.open(conversation_id)

    async def apply_hotkey(self, shortcut: str | None = None) -> None:
        if shortcut is None:
            enabled = bool(await self.engine.settings.get(HOTKEY_ENABLED, True))
            shortcut = (await self.engine.settings.get(HOTKEY, DEFAULT_SHORTCUT)) if enabled else None
        self.hotkey_problem = self.hotkey.set_shortcut(shortcut) if shortcut else unsupported_reason()
        if shortcut and self.hotkey_problem:
            log.info("global shortcut %s is off: %s", shortcut, self.hotkey_problem)

    def open_settings(self, memory_id: int | None = None) -> None:
        if self.settings is not None and self.settings.isVisible():
            self.settings.raise_()
            if memory_id is not None:
                self.tasks.run(self.settings.show_memory(memory_id), what="showing the memory")
            return
        dialog = SettingsDialog(self.engine, self.tasks, hotkey_problem=self.hotkey_problem, parent=self.window)
        dialog.saved.connect(lambda saved: self.tasks.run(self._apply(saved), what="applying settings"))
        dialog.models_requested.connect(self.window.open_models)
        dialog.models_changed.connect(lambda: self.tasks.run(self.window.models.refresh(), what="listing the models"))
        dialog.privacy_page.erased.connect(self._after_erase)
        self.settings = dialog
        self.tasks.run(self._show_settings(dialog, memory_id), what="opening settings")

    def _after_erase(self) -> None:
        """Everything was deleted: the window shows no chat that is gone."""
        self.window.conversations.new_chat()
        self.window.conversations.forget()  # the unsent drafts of every chat too
        self.window.conversations.refresh()

    async def _show_settings(self, dialog: SettingsDialog, memory_id: int | None = None) -> None:
        await dialog.load(hotkey_default=DEFAULT_SHORTCUT)
        if memory_id is not None:
            await dialog.show_memory(memory_id)
        dialog.open()

    async def _apply(self, saved: SavedSettings) -> None:
        await self.apply_hotkey(saved.hotkey or "")
        if saved.hotkey and self.hotkey_problem:
            self.window.status.showMessage(f"The global shortcut {saved.hotkey} is off: {self.hotkey_problem}", 15000)
        if saved.model_changed or self.engine.models.current is None:
            await self.window.models.load(saved.model, saved.backend)

    async def _said_once(self) -> None:
        if not await self.engine.settings.get(TRAY_NOTICE_SHOWN, False):
            self.tray.say("Wren is still running", "Wren keeps running in the tray. Choose Quit from its menu to close it.")
            await self.engine.settings.set(TRAY_NOTICE_SHOWN, True)

    def quit(self) -> None:
        if not self.done.done():
            self.done.set_result(None)

    async def shutdown(self) -> None:
        try:
            await self.window.save_layout()
        except Exception:  # the layout is a convenience: closing goes on
            log.exception("could not save the window layout")
        self.hotkey.clear()
        if self._stop_terminal is not None:
            await self._stop_terminal()
        self.quick.hide()
        self.quick_mic.close()
        for dialog in (self.welcome, self.crash_notice):
            if dialog is not None:
                dialog.hide()
        self.window.hide()
        self.tray.hide()
        await self.window.conversations.close()
        if self.quick.stream is not None:
            await self.quick.stream.wait()
        await self.tasks.cancel_all()
        await self.engine.close()
        if self.instance is not None:
            self.instance.close()


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="wren-desktop", description="Wren, a private AI assistant on your computer.")
    parser.add_argument("--quick", action="store_true", help="open the quick prompt (in the running Wren if there is one)")
    parser.add_argument("--no-tray", action="store_true", help="no tray icon: closing the window quits")
    parser.add_argument("--hidden", action="store_true",
                        help="start in the tray without showing the window (starting with the system); "
                             "without a tray the window shows")
    args, _qt_args = parser.parse_known_args(argv)
    return args


async def _run(args: argparse.Namespace, instance: SingleInstance) -> int:
    try:
        engine = Engine.open()
    except Exception as exc:  # a locked or unreadable database: nothing else can work
        QMessageBox.critical(None, "Wren cannot start", f"Wren could not open its data:\n\n{exc}")
        return 1
    asyncio.get_running_loop().set_exception_handler(asyncio_exception_handler)  # and a crash report
    wren = WrenApp(engine, instance, tray=False if args.no_tray else None)
    # Python handles Ctrl+C only between bytecodes; a idle tick lets it in while Qt waits.
    signal.signal(signal.SIGINT, lambda *_: wren.quit())
    ticker = QTimer(interval=300)
    ticker.timeout.connect(lambda: None)
    ticker.start()
    collector = WindowThreadCollector()  # cycles are collected on this thread only (collector.py)
    collector.start()
    from .smoke import from_environment

    smoke = from_environment(wren, args.began)  # packaged builds' start-up check; None normally
    await wren.start(quick=args.quick, hidden=args.hidden, greet=smoke is None)
    if smoke is not None:
        smoke.window_shown()
    await wren.done
    await wren.shutdown()
    collector.stop()
    return smoke.status if smoke is not None else 0


def main(argv: list[str] | None = None) -> int:
    began = time.monotonic()
    install_network_guard("window")  # every connection recorded, and the offline lock kept (engine/network)
    argv = sys.argv[1:] if argv is None else argv
    args = _parse(argv)
    args.began = began
    from .syslibs import check_qt_libraries

    if (problem := check_qt_libraries()) is not None:  # before Qt aborts without saying what to install
        print(problem, file=sys.stderr)
        return 2
    from wren.engine.logs import setup_logging

    # JSON lines in the data folder, redacted; warnings also reach the terminal.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        setup_logging()  # the first look at the data folder: one open to other users is refused
    except WrenError as exc:
        return cannot_start(str(exc), argv)
    # Local, redacted crash reports (engine/crashreport.py). Qt sends an exception raised
    # in a slot to sys.excepthook and goes on, so those are errors, not crashes.
    install_crash_hooks("wren-desktop", fatal_excepthook=False, versions=_qt_versions)
    app = _application(argv)
    app.setApplicationName("Wren")
    app.setApplicationDisplayName("Wren")
    app.setDesktopFileName("io.github.wren_assistant.Wren")  # packaging/linux: the .desktop entry's id (Wayland matches the icon by it)
    app.setWindowIcon(app_icon())
    app.setQuitOnLastWindowClosed(False)  # the tray and quick prompt outlive the window

    instance = SingleInstance(_instance_socket())
    if instance.forward(QUICK if args.quick else SHOW):
        return 0
    if not instance.listen():
        log.warning("cannot listen on %s; a second start will open a second window", instance.name)
    apply_theme(app)
    # Python 3.11 has no asyncio.run(loop_factory=...); qasync.run installs its loop policy.
    try:
        return qasync.run(_run(args, instance))
    except Exception as exc:  # Wren is closing on a bug: the traceback, and a report for the next start
        import traceback

        traceback.print_exception(exc)
        path = write_crash_report(exc, program="wren-desktop", where="the event loop")
        if path is not None:
            print(f"wren-desktop: a crash report was saved at {path} (it stays on this computer)", file=sys.stderr)
        return 1


def _application(argv: list[str]) -> QApplication:
    """The running QApplication (a test may have made it), else a new one."""
    app = QApplication.instance()
    if app is None:
        return QApplication([sys.argv[0], *argv])
    if not isinstance(app, QApplication):
        raise RuntimeError(f"Wren's window needs a QApplication; this process already runs a {type(app).__name__}")
    return app


def cannot_start(text: str, argv: list[str], *, box: bool | None = None) -> int:
    """Say why Wren cannot start: on standard error, and in a message box where there is a
    screen to show one (started from a menu, nobody reads standard error). Status 2."""
    print(f"wren-desktop: {text}", file=sys.stderr, flush=True)
    if box is None:
        import os

        box = os.environ.get("QT_QPA_PLATFORM", "") not in ("offscreen", "minimal") and (
            sys.platform in ("darwin", "win32") or bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")))
    if box:
        _app = QApplication.instance() or QApplication([sys.argv[0], *argv])
        QMessageBox.critical(None, "Wren cannot start", text)
    return 2


def _instance_socket() -> str:
    """The single-instance socket: a full path in the user's private runtime folder (a pipe
    name on Windows). Where that folder is not private (another user made it), the window
    still opens, on its own."""
    from wren.engine import paths

    if sys.platform == "win32":
        return server_name(str(paths.data_dir()))
    path = paths.instance_socket_path()
    try:
        paths.private_runtime_dir(path.parent)
    except (WrenError, OSError) as exc:  # OSError: a runtime folder this user cannot write in
        log.warning("%s; a second start will open a second window", exc)
    return str(path)


def _qt_versions() -> dict[str, str]:
    import PySide6
    from PySide6.QtCore import qVersion

    return {"Qt": qVersion(), "PySide6": PySide6.__version__}


if __name__ == "__main__":
    sys.exit(main())
