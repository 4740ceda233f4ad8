"""wren-desktop's two packaging hooks over a scripted engine: WREN_DESKTOP_SMOKE answers one
question and quits (what the bundle test runs), and --hidden starts in the tray."""

from __future__ import annotations

import json
import time

import pytest


@pytest.fixture
def wren_app(make_engine, arun, qtbot):
    from wren.desktop.app import WrenApp

    made = []

    def factory(reply="Paris is the capital.", *, tray=False, **kwargs):
        app = WrenApp(make_engine(reply, **kwargs), None, tray=tray)
        made.append(app)
        return app

    yield factory
    for app in made:
        arun(app.shutdown())
        app.window.deleteLater()
        app.quick.deleteLater()


def test_smoke_sends_the_question_prints_each_step_and_quits(wren_app, arun, qtbot, capsys):
    from wren.desktop.smoke import from_environment

    app = wren_app("The answer, scripted.")
    smoke = from_environment(app, time.monotonic(), {"WREN_DESKTOP_SMOKE": "What is 2+2?"})
    arun(app.start())
    smoke.window_shown()
    qtbot.waitUntil(app.done.done, timeout=20000)
    steps = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith('{"smoke"')]
    # the scripted model may load before or after the window is up; the question waits for both
    assert {s["smoke"] for s in steps[:2]} == {"window", "model"}
    assert steps[2]["smoke"] == "answer" and len(steps) == 3
    answer = steps[-1]
    assert answer["text"] == "The answer, scripted."
    assert smoke.status == 0
    # the question went in as a user's message would, and is stored with its answer
    texts = [w.text() for w in app.window.chat.message_widgets()]
    assert texts == ["What is 2+2?", "The answer, scripted."]


def test_smoke_is_off_without_the_variable_and_says_a_bad_timeout(wren_app, capsys):
    from wren.desktop.smoke import from_environment

    app = wren_app()
    assert from_environment(app, 0.0, {}) is None
    smoke = from_environment(app, 0.0, {"WREN_DESKTOP_SMOKE": "hi", "WREN_DESKTOP_SMOKE_TIMEOUT": "soon"})
    assert smoke is not None
    assert "WREN_DESKTOP_SMOKE_TIMEOUT must be a number of seconds, not 'soon'" in capsys.readouterr().err
    # its 300 s time-out must not fire in a later test (it did: a "failed" line and a quit
    # of this long-gone app, 300 s on)
    smoke.cancel()
    assert not smoke._timer.isActive()


def test_smoke_fails_when_no_model_loads(wren_app, arun, qtbot, capsys):
    from wren.desktop.smoke import from_environment

    app = wren_app()
    smoke = from_environment(app, time.monotonic(), {"WREN_DESKTOP_SMOKE": "hello"})
    app.window.models.load_failed.emit("the model file is damaged")
    assert app.done.done()
    assert smoke.status == 1
    (line,) = capsys.readouterr().out.splitlines()
    assert json.loads(line)["error"] == "no model loaded: the model file is damaged"
    assert not smoke._timer.isActive()  # the time-out stopped with the failure
    smoke._timer.timeout.emit()  # and a late one reports nothing more
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(("tray", "shown"), [(True, False), (False, True)])
def test_hidden_starts_in_the_tray_or_shows_without_one(wren_app, arun, qtbot, tray, shown):
    app = wren_app(tray=tray)
    if tray and not app.tray.available:
        pytest.skip("no system tray here")
    with qtbot.waitSignal(app.window.models.loaded, timeout=20000):
        arun(app.start(hidden=True))
    assert app.window.isVisible() is shown


def test_wren_desktop_takes_hidden():
    from wren.desktop.app import _parse

    assert _parse(["--hidden"]).hidden is True
    assert _parse([]).hidden is False
