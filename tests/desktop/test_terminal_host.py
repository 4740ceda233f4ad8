"""While Wren's window runs, its engine answers `wren ask` for the model it has loaded
(engine/terminal/resident_host.py's host_for_window), so the terminal does not load a second copy."""

from __future__ import annotations

import pytest

from wren.engine import engine_sockets as resident

pytestmark = pytest.mark.skipif(not resident.supported(), reason="`wren ask` reaches engines over Unix sockets")


def test_the_window_listens_for_wren_ask_while_it_runs(make_engine, arun, qtbot, monkeypatch):
    from wren.desktop.app import WrenApp

    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    app = WrenApp(make_engine("Scripted."), None, tray=False)
    try:
        arun(app.start())
        path = resident.window_socket_path()
        assert path.exists() and path.stat().st_mode & 0o777 == 0o600
        (status,) = arun(resident.request("status"))
        assert status["host"] == "window" and status["answering"] == 0
        # `wren resident stop` does not close the window's engine
        (answer,) = arun(resident.request("quit"))
        assert answer["type"] == "error" and "window" in answer["message"]
        assert arun(resident.request("status"))[0]["host"] == "window"
    finally:
        arun(app.shutdown())
        app.window.deleteLater()
        app.quick.deleteLater()
    assert not resident.window_socket_path().exists()
    assert arun(resident.request("status")) == []
