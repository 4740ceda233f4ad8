"""The first start's welcome, Help → Welcome, starting with the system, and the notice
after a crash (desktop/welcome.py, desktop/autostart.py, desktop/crash_notice.py)."""

from __future__ import annotations

import plistlib
from pathlib import Path

import pytest


@pytest.fixture
def wren_app(make_engine, arun, qtbot, tmp_path, monkeypatch):
    from wren.desktop.app import WrenApp

    # The autostart checkbox writes here, never into the real ~/.config.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    made = []

    def factory(reply="Hello.", **kwargs):
        app = WrenApp(make_engine(reply, **kwargs), None, tray=False)
        made.append(app)
        return app

    def close(app):
        if app in made:
            made.remove(app)
            arun(app.shutdown())
            app.window.deleteLater()
            app.quick.deleteLater()

    factory.close = close
    yield factory
    for app in list(made):
        close(app)


def _start(app, arun, qtbot, **kwargs):
    with qtbot.waitSignal(app.window.models.loaded, timeout=20000):
        arun(app.start(**kwargs))


def test_first_start_welcomes_once(wren_app, arun, qtbot, wren_home):
    from wren.desktop.welcome import WELCOME_SEEN

    app = wren_app()
    _start(app, arun, qtbot)
    welcome = app.welcome
    assert welcome is not None and welcome.isVisible()
    assert not welcome.isModal()  # the window stays usable
    assert app.window.isEnabled() and app.window.isVisible()
    assert str(wren_home) in welcome.folder_label.text()
    assert "Nothing leaves this computer" in welcome.privacy_label.text()
    qtbot.waitUntil(lambda: "tiny" in welcome.model_label.text() and "answering" in welcome.model_label.text())
    assert arun(app.engine.settings.get(WELCOME_SEEN)) is True
    wren_app.close(app)

    again = wren_app()
    _start(again, arun, qtbot)
    assert again.welcome is None


def test_help_welcome_shows_it_again(wren_app, arun, qtbot):
    app = wren_app()
    _start(app, arun, qtbot)
    app.welcome.close_button.click()
    assert not app.welcome.isVisible()
    app.window.welcome_action.trigger()
    qtbot.waitUntil(lambda: app.welcome.isVisible())
    assert app.window.welcome_action in app.window.menuBar().actions()[-1].menu().actions()


def test_no_welcome_for_the_start_up_check(wren_app, arun, qtbot):
    from wren.desktop.welcome import WELCOME_SEEN

    app = wren_app()
    _start(app, arun, qtbot, greet=False)
    assert app.welcome is None
    assert arun(app.engine.settings.get(WELCOME_SEEN, False)) is False  # the user's first start still greets


def test_models_button_opens_the_models_page(wren_app, arun, qtbot):
    app = wren_app()
    _start(app, arun, qtbot)
    app.welcome.models_button.click()
    qtbot.waitUntil(lambda: app.window.models_dialog is not None and app.window.models_dialog.isVisible())
    assert not app.welcome.isVisible()


def test_welcome_names_remote_providers(wren_app, arun, qtbot):
    app = wren_app()
    arun(app.engine.providers.add("lab", "http://127.0.0.1:9/v1", models=["m"], discover=False))
    _start(app, arun, qtbot)
    text = app.welcome.privacy_label.text()
    assert "except what you send to the models of the remote provider you added (lab)" in text


def test_autostart_checkbox_writes_and_removes_the_login_item(wren_app, arun, qtbot, tmp_path):
    app = wren_app()
    _start(app, arun, qtbot)
    entry = tmp_path / "config" / "autostart" / "io.github.wren_assistant.Wren.desktop"
    box = app.welcome.autostart_box
    assert box.isVisible() and not box.isChecked()
    box.click()
    assert entry.is_file()
    text = entry.read_text(encoding="utf-8")
    assert "[Desktop Entry]" in text and "Type=Application" in text
    exec_line = next(line for line in text.splitlines() if line.startswith("Exec="))
    assert exec_line.endswith(" --hidden")
    box.click()
    assert not entry.exists()
    entry.parent.rmdir()
    entry.parent.write_text("not a folder")  # the folder cannot be made: said, and unticked
    box.click()
    assert not box.isChecked()
    assert "could not add" in app.welcome.autostart_note.text()


def test_crash_notice_after_a_crash_report(wren_app, arun, qtbot, wren_home):
    from PySide6.QtCore import QUrl

    from wren.engine.crashreport import write_crash_report

    try:
        raise RuntimeError("the model worker died")
    except RuntimeError as exc:
        report = write_crash_report(exc, program="wren-desktop")
    app = wren_app()
    _start(app, arun, qtbot)
    notice = app.crash_notice
    assert notice is not None and notice.isVisible()
    assert notice.windowModality().name == "NonModal"
    assert notice.text() == "Wren closed unexpectedly last time."
    assert str(report) in notice.informativeText() and "not sent anywhere" in notice.informativeText()
    opened = []
    notice.open_url = opened.append
    notice.open_button.click()
    assert opened == [QUrl.fromLocalFile(str(report))]
    wren_app.close(app)

    again = wren_app()  # said once
    _start(again, arun, qtbot)
    assert again.crash_notice is None


# -- the login item itself -----------------------------------------------------------------

def test_exec_line_quotes_as_the_desktop_entry_spec_says():
    from wren.desktop.autostart import exec_line

    assert exec_line(["/usr/bin/wren-desktop", "--hidden"]) == "/usr/bin/wren-desktop --hidden"
    assert exec_line(["/home/a b/venv/bin/wren-desktop"]) == '"/home/a b/venv/bin/wren-desktop"'
    assert exec_line(["/opt/$x/100%"]) == '"/opt/\\\\$x/100%%"'


def test_macos_gets_a_launch_agent_and_windows_none(tmp_path):
    from wren.desktop.autostart import Autostart

    mac = Autostart("darwin", {}, home=tmp_path)
    mac.set_enabled(True, ["/Applications/Wren.app/Contents/MacOS/wren-desktop"])
    plist = plistlib.loads(Path(tmp_path / "Library/LaunchAgents/io.github.wren_assistant.Wren.plist").read_bytes())
    assert plist["ProgramArguments"] == ["/Applications/Wren.app/Contents/MacOS/wren-desktop", "--hidden"]
    assert plist["RunAtLoad"] is True and mac.enabled()
    mac.set_enabled(False)
    assert not mac.enabled()

    windows = Autostart("win32", {}, home=tmp_path)
    assert not windows.supported and "Windows" in windows.why_not
    with pytest.raises(RuntimeError, match="Windows"):
        windows.set_enabled(True)


def test_xdg_config_home_must_be_absolute(tmp_path):
    from wren.desktop.autostart import Autostart

    assert Autostart("linux", {"XDG_CONFIG_HOME": "relative"}, home=tmp_path).path == (
        tmp_path / ".config/autostart/io.github.wren_assistant.Wren.desktop")


def test_welcome_says_the_starter_is_set_up_when_no_model_is_chosen(make_engine, arun, qtbot, tmp_path):
    from wren.desktop.bridge import Tasks
    from wren.desktop.welcome import WelcomeDialog
    from wren.engine.modelhub.registry import STARTER_NAME as STARTER_MODEL

    engine = make_engine()
    arun(engine.settings.set("model", None))
    welcome = WelcomeDialog(engine, Tasks(), tmp_path, model_loading=lambda: True)
    qtbot.addWidget(welcome)
    arun(welcome.refresh())
    text = welcome.model_label.text()
    assert STARTER_MODEL in text and "comes with it" in text and "loading now" in text
    welcome._model_loading = lambda: False  # the load failed
    arun(welcome.refresh())
    assert "No model is loaded yet" in welcome.model_label.text()
    opened = []
    welcome.open_url = opened.append
    welcome.folder_button.click()
    assert [u.toLocalFile() for u in opened] == [str(tmp_path)]
    arun(engine.close())


def test_crash_notice_shows_the_folder_and_a_hidden_start_says_it_in_the_tray(wren_app, arun, qtbot):
    from wren.engine.crashreport import write_crash_report

    try:
        raise RuntimeError("the model worker died")
    except RuntimeError as exc:
        report = write_crash_report(exc, program="wren-desktop", kind="error")
    app = wren_app()
    said = []
    app.tray.say = lambda title, text: said.append((title, text))
    assert app.announce_crashes(in_window=False) is None
    assert said == [("Wren ran into an unexpected error last time.", f"A crash report was saved at {report}")]
    assert app.announce_crashes() is None  # said once

    try:
        raise RuntimeError("again")
    except RuntimeError as exc:
        second = write_crash_report(exc, program="wren-desktop")
    notice = app.announce_crashes()
    opened = []
    notice.open_url = opened.append
    notice.folder_button.click()
    assert [u.toLocalFile() for u in opened] == [str(second.parent)]
    notice.deleteLater()
    # Once Qt has deleted it, closing Wren does not reach for it.
    from PySide6.QtCore import QCoreApplication, QEvent

    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    assert app.crash_notice is None
    arun(app.shutdown())
