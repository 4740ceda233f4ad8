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


class _AskingSource:
    """One tool, echo, that asks before each call."""

    name = "test"

    def specs(self):
        from wren.engine.tools.registry import ToolSpec

        return [ToolSpec("echo", "Says its argument back", {"type": "object", "properties": {"x": {"type": "string"}}},
                         needs_approval=True)]

    async def call(self, name, arguments, cancel):
        return f"echoed {arguments.get('x', '')}", False


def _tool_round(engine_reply: str):
    """The first round calls echo; the round after its result answers `engine_reply`."""
    import json

    asking = '<tool_call>\n' + json.dumps({"name": "echo", "arguments": {"x": "hi"}}) + '\n</tool_call>'
    return lambda prompt: engine_reply if "<tool_response>" in prompt else asking


async def _open(name: str, engine, window):
    """A window a keyboard user reaches from the main one, opened beside it (WREN_A11Y_OPEN):
    settings (every page), library, models, chat-settings."""
    from wren.desktop.library.page import LibraryDialog
    from wren.desktop.models.dialog import ModelsDialog
    from wren.desktop.settings.dialog import SettingsDialog
    from wren.desktop.window.chat_settings import ChatSettingsDialog

    if name == "settings":
        dialog = SettingsDialog(engine, window.tasks, parent=window)
        await dialog.load(hotkey_default="Ctrl+Alt+Space")  # as the app opens it: every page filled in
    elif name == "library":
        dialog = LibraryDialog(engine, window.tasks, parent=window)
    elif name == "models":
        dialog = ModelsDialog(engine, window.tasks, parent=window)
        await dialog.page.load()
    elif name == "chat-settings":
        dialog = ChatSettingsDialog(engine, None, window)
        await dialog.load()
    else:
        raise SystemExit(f"WREN_A11Y_OPEN: no window {name!r}")
    dialog.show()
    return dialog


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
        answer = reply
        if os.environ.get("WREN_A11Y_TOOL"):  # the answer calls a tool that asks first: the approval by keys
            answer = _tool_round(engine_reply=reply)
        engine = Engine(store, registry, backend_factory=lambda _name: ScriptedBackend(answer, delay=0.02))
        if os.environ.get("WREN_A11Y_TOOL"):
            engine.tools.registry.add_source(_AskingSource())
            await engine.settings.set("tools.default", ["echo"])
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
        opened = [name for name in os.environ.get("WREN_A11Y_OPEN", "").split(",") if name]
        window.a11y_opened = [await _open(name, engine, window) for name in opened]  # kept alive
        print("READY", flush=True)
        await asyncio.Event().wait()

    qasync.run(run())


if __name__ == "__main__":
    main()
