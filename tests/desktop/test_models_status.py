"""The Models page's line under Import stops speaking of a model once it is deleted (issue 34):
"Imported X" stayed after X was removed."""

from __future__ import annotations

from PySide6.QtWidgets import QMessageBox


def test_imported_line_goes_when_the_model_is_deleted(open_window, monkeypatch, arun, qtbot, tiny_model_dir, tmp_path):
    window = open_window()
    dialog = window.open_models()
    page = dialog.page
    qtbot.waitUntil(lambda: bool(page.installed_rows), timeout=5000)

    async def import_by_registering(path, *, name=None, progress=None):
        return window.engine.registry.register_folder(tiny_model_dir, name="imported")

    monkeypatch.setattr(window.engine.models, "import_model", import_by_registering)
    gguf = tmp_path / "my-model.gguf"
    gguf.write_bytes(b"GGUF")
    arun(page.import_from(gguf))
    assert "Imported “imported”" in page.import_status.text()
    page.installed_rows["imported"].delete_button.click()
    with qtbot.waitSignal(page.changed, timeout=5000):
        page.confirm_box.button(QMessageBox.StandardButton.Yes).click()
    assert "imported" not in page.installed_rows
    assert "imported" not in page.import_status.text()
    dialog.close()
