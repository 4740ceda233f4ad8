"""A broken safety policy file (the user's rules not in force) is said in the window's status
bar when Wren starts, not only on the Safety settings page."""

from __future__ import annotations

import pytest


@pytest.fixture
def start_app(make_engine, arun, qtbot):
    from wren.desktop.app import WrenApp

    made = []

    def start():
        app = WrenApp(make_engine("ok"), None, tray=False)
        made.append(app)
        with qtbot.waitSignal(app.window.models.loaded, timeout=20000):
            arun(app.start(greet=False))
        return app

    yield start
    for app in made:
        arun(app.shutdown())
        app.window.deleteLater()
        app.quick.deleteLater()


def test_a_broken_policy_file_is_said_at_start(start_app, wren_home):
    from wren.desktop.app import POLICY_PROBLEM

    (wren_home / "safety").mkdir(exist_ok=True)
    (wren_home / "safety" / "policy.toml").write_text('[blocklist]\nwords = ["pineapple"\n')
    app = start_app()
    assert app.engine.policy_warnings
    assert app.window.status.currentMessage() == POLICY_PROBLEM


def test_a_sound_policy_file_says_nothing(start_app, wren_home):
    from wren.desktop.app import POLICY_PROBLEM

    (wren_home / "safety").mkdir(exist_ok=True)
    (wren_home / "safety" / "policy.toml").write_text('[blocklist]\nwords = ["pineapple"]\n')
    app = start_app()
    assert not app.engine.policy_warnings
    assert app.window.status.currentMessage() != POLICY_PROBLEM
