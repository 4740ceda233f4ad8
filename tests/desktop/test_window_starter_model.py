"""End to end through the window with the real starter model (SmolLM2-135M-Instruct)."""

from __future__ import annotations

import pytest


@pytest.mark.slow
def test_the_starter_model_answers_the_capital_of_france(starter_models_dir, wren_home, arun, qtbot, send):
    from wren.desktop.window.main_window import MainWindow
    from wren.engine.api import Engine
    from wren.engine.modelhub.registry import ModelRegistry
    from wren.engine.store import Store

    engine = Engine(Store(wren_home / "wren.sqlite3"), ModelRegistry(starter_models_dir))
    arun(engine.settings.set("sampling", {"temperature": 0.0, "max_tokens": 48}))
    window = MainWindow(engine)
    window.show()
    try:
        with qtbot.waitSignal(window.models.loaded, timeout=180_000):
            arun(window.start())
        assert window.composer.edit.isEnabled()
        send(window, "What is the capital of France?", timeout=180_000)
        answer = window.chat.message_widgets()[-1]
        assert "Paris" in answer.text()
        assert "tokens/s" in window.status.speed_label.text()
        assert window.engine.models.current.name in window.status.model_label.text()
    finally:
        arun(window.conversations.close())
        arun(window.tasks.cancel_all())
        arun(engine.close(), timeout=60)
        window.close()
        window.deleteLater()
