"""The Wren window over a scripted engine, for the screen-reader tests: run with Wren's
Python under Xvfb and a private accessibility bus (run_session.sh). Prints READY once the
model is loaded, then runs until it is killed. WREN_A11Y_REPLY is the scripted answer."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("QT_LINUX_ACCESSIBILITY_ALWAYS_ON", "1")  # no desktop settings tell Qt a reader runs


def main() -> None:
    import qasync
    from PySide6.QtWidgets import QApplication

    home = Path(tempfile.mkdtemp(prefix="wren-a11y-"))
    os.environ["WREN_HOME"] = str(home)
    app = QApplication([sys.argv[0]])
    app.setApplicationName("wren-desktop")
    from wren.desktop.theme import apply_theme

    apply_theme(app)

    async def run() -> None:
        from tests.fixtures.tiny import make_tiny_model_dir
        from wren.desktop.window.main_window import MainWindow
        from wren.engine.api import Engine
        from wren.engine.inference.backends.scripted import ScriptedBackend
        from wren.engine.modelhub.registry import ModelRegistry
        from wren.engine.store import Store

        registry = ModelRegistry(home / "models")
        registry.register_folder(make_tiny_model_dir(home / "src" / "tiny"), name="tiny")
        store = Store(home / "wren.sqlite3")
        store.set_setting("model", "tiny")
        reply = os.environ.get("WREN_A11Y_REPLY", "Paris is the capital of France.")
        engine = Engine(store, registry, backend_factory=lambda _name: ScriptedBackend(reply, delay=0.02))
        window = MainWindow(engine)
        window.resize(1100, 760)
        window.show()
        await window.start()
        while engine.models.current is None:
            await asyncio.sleep(0.02)
        window.activateWindow()
        if os.environ.get("WREN_A11Y_QUICK"):  # the quick prompt, as the global hotkey opens it
            from wren.desktop.tray.quick import QuickPrompt

            quick = QuickPrompt(engine, window.tasks)
            quick.set_ready(True)  # the model is loaded (the app tells it from the model controller)
            quick.popup()
            window.quick = quick  # kept alive
        print("READY", flush=True)
        await asyncio.Event().wait()

    qasync.run(run())


if __name__ == "__main__":
    main()
