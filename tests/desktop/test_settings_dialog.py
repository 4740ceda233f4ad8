"""The settings dialog reads and writes the engine's store; model import reports progress."""

from __future__ import annotations

import threading
from pathlib import Path

from wren.desktop.settings.dialog import HOTKEY, HOTKEY_ENABLED, SettingsDialog


def _dialog(window, arun) -> SettingsDialog:
    dialog = SettingsDialog(window.engine, window.tasks, hotkey_problem="not here", parent=window)
    arun(dialog.load(hotkey_default="Ctrl+Alt+Space"))
    return dialog


def test_settings_show_and_save_what_the_store_holds(open_window, arun, qtbot):
    window = open_window()
    arun(window.engine.settings.set("system_prompt", "Be brief."))
    dialog = _dialog(window, arun)
    assert dialog.selected_model() == "tiny"
    assert dialog.backend_picker.currentText() == "auto"
    assert dialog.system_prompt.toPlainText() == "Be brief."
    assert dialog.hotkey_status.text() == "not here"
    assert dialog.hotkey_edit.keySequence().toString() == "Ctrl+Alt+Space"

    dialog.temperature.setValue(0.2)
    dialog.top_k.setValue(40)
    dialog.seed.setText("7")
    dialog.stop_strings.setText("END | ###")
    dialog.system_prompt.setPlainText("Answer in French.")
    dialog.hotkey_enabled.setChecked(False)
    with qtbot.waitSignal(dialog.saved) as saved:
        dialog.buttons.accepted.emit()
    assert saved.args[0].model_changed is False and saved.args[0].hotkey is None
    params = arun(window.engine.settings.default_sampling())
    assert (params.temperature, params.top_k, params.seed, params.stop) == (0.2, 40, 7, ("END", "###"))
    assert arun(window.engine.settings.get("system_prompt")) == "Answer in French."
    assert arun(window.engine.settings.get(HOTKEY_ENABLED)) is False
    assert arun(window.engine.settings.get(HOTKEY)) == "Ctrl+Alt+Space"


def test_speed_settings_show_save_and_reload_the_model(open_window, arun, qtbot):
    window = open_window()
    arun(window.engine.settings.set_performance(parallel_sequences=3))
    dialog = _dialog(window, arun)
    assert (dialog.parallel_spin.value(), dialog.prefix_cache_spin.value()) == (3, 512)
    dialog.parallel_spin.setValue(4)
    dialog.prefix_cache_spin.setValue(1024)
    with qtbot.waitSignal(dialog.saved) as saved:
        dialog.buttons.accepted.emit()
    assert saved.args[0].model_changed  # slots are allocated when the model loads
    settings = arun(window.engine.settings.performance())
    assert (settings.parallel_sequences, settings.prefix_cache_mb) == (4, 1024)


def test_the_terminal_keep_alive_is_shown_in_minutes_and_saved_in_seconds(open_window, arun, qtbot):
    window = open_window()
    engine = window.engine
    dialog = _dialog(window, arun)
    assert dialog.keep_alive_spin.value() == 5  # the default, 300 s
    dialog.keep_alive_spin.setValue(0)
    assert dialog.keep_alive_spin.text() == "Off"
    with qtbot.waitSignal(dialog.saved):
        dialog.buttons.accepted.emit()
    assert arun(engine.settings.terminal_keep_alive()) == 0
    arun(engine.settings.set_terminal_keep_alive(90))  # set elsewhere, not a whole minute
    dialog = _dialog(window, arun)
    assert dialog.keep_alive_spin.value() == 2
    with qtbot.waitSignal(dialog.saved):
        dialog.buttons.accepted.emit()
    assert arun(engine.settings.terminal_keep_alive()) == 90  # untouched: kept as it was
    dialog = _dialog(window, arun)
    dialog.keep_alive_spin.setValue(30)
    with qtbot.waitSignal(dialog.saved):
        dialog.buttons.accepted.emit()
    assert arun(engine.settings.terminal_keep_alive()) == 1800


def test_bad_sampling_values_are_refused_with_a_reason(open_window, arun):
    window = open_window()
    dialog = _dialog(window, arun)
    dialog.seed.setText("seven")
    assert arun(dialog.save()) is None
    assert not dialog.error_label.isHidden() and "seed" in dialog.error_label.text()
    assert arun(window.engine.settings.get("sampling")) is None


def test_import_a_model_folder_and_pick_it(open_window, arun, qtbot, tmp_path):
    from tests.fixtures.tiny import make_tiny_model_dir

    window = open_window()
    dialog = _dialog(window, arun)
    folder = make_tiny_model_dir(tmp_path / "my-model")
    info = arun(dialog.import_from(folder))
    assert info.name == "my-model"
    assert dialog.selected_model() == "my-model"
    assert "Imported" in dialog.import_status.text()
    with qtbot.waitSignal(dialog.saved) as saved:
        dialog.buttons.accepted.emit()
    assert saved.args[0].model_changed and saved.args[0].model == "my-model"


def test_gguf_import_progress_reaches_the_bar_from_the_worker_thread(open_window, arun, qtbot, tmp_path, monkeypatch):
    window = open_window()
    dialog = _dialog(window, arun)
    dialog.show()
    seen: list[int] = []
    threads: set[str] = set()
    registry = window.engine.registry
    folder_info = registry.list()[0]

    def fake_import(path, name=None, progress=None, **_kwargs):
        threads.add(threading.current_thread().name)
        for done in range(0, 101, 10):
            progress(done, 100)
        return folder_info

    monkeypatch.setattr(registry, "import_gguf", fake_import)
    original = dialog._progress
    monkeypatch.setattr(dialog, "_progress", lambda d, t: (seen.append(d), original(d, t)))
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    info = arun(dialog.import_from(Path(gguf)))
    assert info is folder_info
    assert threading.main_thread().name not in threads  # the import ran off the GUI thread
    assert seen and seen[-1] == 100  # throttled, but the end always arrives
    assert not dialog.import_progress.isVisible()


def test_a_failed_import_says_why(open_window, arun, tmp_path):
    window = open_window()
    dialog = _dialog(window, arun)
    missing = tmp_path / "nothing.gguf"
    assert arun(dialog.import_from(missing)) is None
    assert "nothing.gguf" in dialog.import_status.text()
    assert dialog.import_gguf_button.isEnabled()
