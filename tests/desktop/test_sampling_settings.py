"""Settings → Generation: each model's sampling preset is shown, edited, saved, reset."""

from __future__ import annotations

import json

from wren.desktop.settings.dialog import SettingsDialog
from wren.desktop.settings.sampling import HELP
from wren.engine.inference.presets import PRESET_FIELDS, PRESETS_KEY


def _dialog(window, arun) -> SettingsDialog:
    dialog = SettingsDialog(window.engine, window.tasks, parent=window)
    arun(dialog.load(hotkey_default="Ctrl+Alt+Space"))
    return dialog


def _add_model_with_config(window, arun, tmp_path, name: str, config: dict) -> None:
    from tests.fixtures.tiny import make_tiny_model_dir

    folder = make_tiny_model_dir(tmp_path / name)
    (folder / "generation_config.json").write_text(json.dumps(config))
    arun(window.engine.models.import_model(folder, name=name))


def test_every_setting_says_what_it_does(open_window, arun):
    dialog = _dialog(open_window(), arun)
    editor = dialog.sampling_editor
    for name in PRESET_FIELDS:
        hint = editor.findChild(type(editor.state), f"{name}Help")
        assert hint is not None and hint.text() == HELP[name] and len(hint.text()) > 30
        assert editor.boxes[name].toolTip() == HELP[name]


def test_editing_a_models_preset_changes_its_default_sampling(open_window, arun, qtbot, tmp_path):
    window = open_window()
    engine = window.engine
    _add_model_with_config(window, arun, tmp_path, "configured", {"temperature": 0.4, "top_k": 12})
    before = arun(engine.settings.default_sampling("tiny"))
    dialog = _dialog(window, arun)
    editor = dialog.sampling_editor
    assert editor.current_model() == "tiny"  # the loaded model
    assert editor.values() == {f: getattr(before, f) for f in PRESET_FIELDS}
    assert "defaults" in editor.state.text() and not editor.reset_button.isEnabled()

    editor.temperature.setValue(0.35)
    editor.min_p.setValue(0.1)
    editor.repetition_penalty.setValue(1.2)
    assert "Edited" in editor.state.text() and editor.reset_button.isEnabled()
    # The other model shows its own generation_config values; an edit there is kept too.
    editor.select("configured")
    assert (editor.temperature.value(), editor.top_k.value()) == (0.4, 12)
    editor.top_p.setValue(0.8)
    editor.select("tiny")
    assert editor.temperature.value() == 0.35  # the first model's edits survive the switch

    with qtbot.waitSignal(dialog.saved):
        dialog.buttons.accepted.emit()
    tiny = arun(engine.settings.default_sampling("tiny"))
    assert (tiny.temperature, tiny.min_p, tiny.repetition_penalty) == (0.35, 0.1, 1.2)
    assert (tiny.top_k, tiny.top_p) == (before.top_k, before.top_p)
    configured = arun(engine.settings.default_sampling("configured"))
    assert (configured.temperature, configured.top_k, configured.top_p) == (0.4, 12, 0.8)
    # Only what differs from the model's defaults is stored.
    assert arun(engine.settings.get(PRESETS_KEY)) == {
        "tiny": {"temperature": 0.35, "min_p": 0.1, "repetition_penalty": 1.2}, "configured": {"top_p": 0.8},
    }
    assert arun(engine.settings.default_sampling()).temperature == 0.35  # the loaded model's preset answers


def test_reset_to_model_defaults_removes_the_preset(open_window, arun, qtbot):
    window = open_window()
    engine = window.engine
    arun(engine.settings.set(PRESETS_KEY, {"tiny": {"temperature": 1.3, "top_k": 5}}))
    defaults = arun(engine.settings.default_sampling("tiny", preset=False))
    dialog = _dialog(window, arun)
    editor = dialog.sampling_editor
    assert (editor.temperature.value(), editor.top_k.value()) == (1.3, 5)
    editor.reset_button.click()
    assert editor.values() == {f: getattr(defaults, f) for f in PRESET_FIELDS}
    with qtbot.waitSignal(dialog.saved):
        dialog.buttons.accepted.emit()
    assert arun(engine.settings.get(PRESETS_KEY)) is None
    assert arun(engine.settings.default_sampling("tiny")) == defaults


def test_picking_a_model_on_the_model_tab_shows_its_preset(open_window, arun, tmp_path):
    window = open_window()
    _add_model_with_config(window, arun, tmp_path, "configured", {"temperature": 0.45})
    dialog = _dialog(window, arun)
    for i in range(dialog.model_list.count()):
        if dialog.model_list.item(i).text().startswith("configured"):
            dialog.model_list.setCurrentRow(i)
    assert dialog.sampling_editor.current_model() == "configured"
    assert dialog.temperature.value() == 0.45
