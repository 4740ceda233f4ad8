"""The Models page: installed models and the catalog, memory badges, downloads with progress,
cancel and resume, delete, make default, import; the header's picker follows at once."""

from __future__ import annotations

import asyncio
import threading

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox, QPushButton

from wren.desktop.models.rows import DownloadState
from wren.engine.modelhub.catalog import load_catalog
from wren.engine.models import DownloadCancelled

GB = 10**9


@pytest.fixture
def models_page(open_window, arun, qtbot):
    """A started window and its Models page, loaded; the page's window is closed afterwards."""
    made = []

    def factory(**kwargs):
        window = open_window(**kwargs)
        dialog = window.open_models()
        made.append(dialog)
        page = dialog.page
        qtbot.waitUntil(lambda: len(page.catalog_rows) == len(load_catalog()) and bool(page.installed_rows),
                        timeout=5000)
        return window, page

    yield factory
    for dialog in made:
        dialog.close()


def picker_names(window) -> list[str]:
    picker = window.model_picker
    return [picker.itemText(i) for i in range(picker.count())]


class FakePull:
    """engine.models.pull's stand-in: reports progress in steps from a worker thread, stops
    when its cancel event is set, and resumes from the bytes it had on the next call."""

    def __init__(self, engine, source, size=10 * 10**6, step=10**6):
        self.engine, self.source, self.size, self.step = engine, source, size, step
        self.have = 0
        self.calls: list[str] = []
        self.gate = threading.Semaphore(0)  # the test lets each step through

    async def __call__(self, spec, *, quant=None, name=None, progress=None, cancel=None):
        self.calls.append(spec)

        def work():
            while self.have < self.size:
                if not self.gate.acquire(timeout=5):
                    raise TimeoutError("the test did not release the next step")
                if cancel is not None and cancel.is_set():
                    raise DownloadCancelled(f"the download of {spec} was cancelled; pull it again to resume")
                self.have += self.step
                progress(self.have, self.size)
            return self.engine.registry.register_folder(self.source, name or spec)

        return await asyncio.get_running_loop().run_in_executor(None, work)


def test_page_lists_installed_models_and_the_catalog(models_page):
    window, page = models_page()
    row = page.installed_rows["tiny"]
    assert not row.marker.isHidden()  # the default
    assert not row.delete_button.isEnabled()  # it is answering now
    assert "llama" in row.details.text() and "answering now" in row.details.text()
    names = [r.title.text() for r in page.catalog_rows.values()]
    assert names == [e.name for e in load_catalog()]
    llama = page.catalog_rows["llama-3.2-1b-instruct"]
    assert "licence: llama3.2" in llama.details.text() and "RAM" in llama.details.text()
    assert llama.download_button.text() == "Download" and llama.progress.isHidden()
    assert window.models_button.accessibleName() == "Models"


def test_fit_badges_follow_this_computers_memory(models_page, monkeypatch, arun):
    window, page = models_page()
    monkeypatch.setattr(window.engine.models, "system_memory_bytes", lambda: 4 * GB)
    arun(page.refresh_catalog())
    assert page.catalog_rows["qwen2.5-0.5b-instruct"].badge.text() == "Fits this computer"
    big = page.catalog_rows["llama-3.1-8b-instruct"]
    needed = big.entry.ram_bytes_4k - int(4 * GB * 0.8)
    assert big.badge.text() == f"Needs {needed / GB:.1f} GB more RAM"
    assert big.badge.property("fits") is False
    assert "4.0 GB of memory" in page.memory_note.text()
    monkeypatch.setattr(window.engine.models, "system_memory_bytes", lambda: 64 * GB)
    arun(page.refresh_catalog())
    assert all(r.badge.text() == "Fits this computer" for r in page.catalog_rows.values())


def test_download_shows_progress_cancel_offers_resume_and_resume_finishes(models_page, monkeypatch, qtbot,
                                                                          tiny_model_dir):
    window, page = models_page()
    fake = FakePull(window.engine, tiny_model_dir)
    monkeypatch.setattr(window.engine.models, "pull", fake)
    row = page.catalog_rows["qwen3-0.6b"]

    qtbot.mouseClick(row.download_button, Qt.MouseButton.LeftButton)
    assert row.state is DownloadState.DOWNLOADING and row.cancel_button.isVisibleTo(page)
    for _ in range(3):
        fake.gate.release()
    qtbot.waitUntil(lambda: row.progress_label.text() == "3.0 MB of 10.0 MB (30%)", timeout=5000)
    assert row.progress.value() == 300

    row.cancel_button.click()
    fake.gate.release()  # the worker sees the cancel at its next step
    qtbot.waitUntil(lambda: row.state is DownloadState.PAUSED, timeout=5000)
    assert row.download_button.text() == "Resume" and not row.download_button.isHidden()
    assert row.download_button.accessibleName() == "Resume the download of Qwen3 0.6B"
    assert row.progress_label.text() == "Paused at 3.0 MB"
    assert "qwen3-0.6b" not in picker_names(window)

    row.download_button.click()
    assert row.state is DownloadState.DOWNLOADING
    fake.gate.release()
    qtbot.waitUntil(lambda: row.progress_label.text() == "4.0 MB of 10.0 MB (40%)", timeout=5000)  # not from 0
    for _ in range(6):
        fake.gate.release()
    qtbot.waitUntil(lambda: row.state is DownloadState.INSTALLED, timeout=5000)
    assert fake.calls == ["qwen3-0.6b", "qwen3-0.6b"]
    assert row.download_button.text() == "Installed" and not row.download_button.isEnabled()
    assert "qwen3-0.6b" in page.installed_rows
    qtbot.waitUntil(lambda: "qwen3-0.6b" in picker_names(window), timeout=5000)  # no Save needed


def test_a_failed_download_says_why_inline(models_page, monkeypatch, qtbot):
    window, page = models_page()

    async def no_network(spec, **_):
        raise ConnectionError("[Errno 111] Connection refused")

    monkeypatch.setattr(window.engine.models, "pull", no_network)
    row = page.catalog_rows["qwen3-4b"]
    row.download_button.click()
    qtbot.waitUntil(lambda: row.state is DownloadState.FAILED, timeout=5000)
    assert "could not reach Hugging Face" in row.error_label.text() and not row.error_label.isHidden()
    assert row.download_button.text() == "Try again"


def test_delete_asks_then_removes_the_model_from_the_page_and_the_picker(models_page, arun, qtbot,
                                                                          tiny_model_dir):
    window, page = models_page()
    window.engine.registry.register_folder(tiny_model_dir, name="spare")
    arun(page.load())
    arun(window.models.refresh())
    assert "spare" in picker_names(window)
    page.installed_rows["spare"].delete_button.click()
    box = page.confirm_box
    assert box is not None and box.isVisible() and "spare" in box.text()
    with qtbot.waitSignal(page.changed, timeout=5000):
        box.button(QMessageBox.StandardButton.Yes).click()
    assert "spare" not in page.installed_rows
    qtbot.waitUntil(lambda: picker_names(window) == ["tiny"], timeout=5000)
    assert [m.name for m in arun(window.engine.models.installed())] == ["tiny"]


def test_refused_delete_is_said_on_the_page(models_page, arun):
    window, page = models_page()
    assert arun(page.delete("tiny")) is False  # the loaded model
    assert "answering now" in page.error_label.text() and not page.error_label.isHidden()


def test_make_default_saves_the_setting_loads_it_and_updates_the_picker(models_page, arun, qtbot,
                                                                         tiny_model_dir):
    window, page = models_page()
    window.engine.registry.register_folder(tiny_model_dir, name="second")
    arun(page.load())
    with qtbot.waitSignal(window.models.loaded, timeout=10000):
        page.installed_rows["second"].default_button.click()
    assert arun(window.engine.settings.get("model")) == "second"
    assert window.engine.models.current.name == "second"
    assert window.model_picker.currentText() == "second"
    qtbot.waitUntil(lambda: not page.installed_rows["second"].marker.isHidden(), timeout=5000)
    # the page follows the load: the old model is no longer answering, so it can be deleted
    qtbot.waitUntil(lambda: page.installed_rows["tiny"].delete_button.isEnabled(), timeout=5000)
    assert page.installed_rows["tiny"].marker.isHidden()


def test_import_a_file_calls_the_engine_and_lists_the_model(models_page, monkeypatch, arun, qtbot,
                                                            tiny_model_dir, tmp_path):
    window, page = models_page()
    seen = []

    async def fake_import(path, *, name=None, progress=None):
        seen.append(path)
        progress(5, 10)
        progress(10, 10)
        return window.engine.registry.register_folder(tiny_model_dir, name="imported")

    monkeypatch.setattr(window.engine.models, "import_model", fake_import)
    gguf = tmp_path / "my-model.gguf"
    gguf.write_bytes(b"GGUF")
    info = arun(page.import_from(gguf))
    assert seen == [gguf] and info.name == "imported"
    assert "imported" in page.installed_rows and "Imported" in page.import_status.text()
    qtbot.waitUntil(lambda: "imported" in picker_names(window), timeout=5000)


def test_every_button_is_named_and_reachable_by_tab(models_page):
    window, page = models_page()
    buttons = page.findChildren(QPushButton)
    assert buttons
    for button in buttons:
        assert button.accessibleName(), button.text()
    chain = [page.import_button]
    for row in page.installed_rows.values():
        chain += [row.default_button, row.delete_button]
    for row in page.catalog_rows.values():
        chain += [row.download_button, row.cancel_button]
    for first, second in zip(chain, chain[1:]):
        assert first.nextInFocusChain() is second, (first.accessibleName(), second.accessibleName())


def test_settings_and_the_menu_open_the_page(open_window, qtbot, arun):
    from wren.desktop.settings.dialog import SettingsDialog

    window = open_window()
    dialog = SettingsDialog(window.engine, window.tasks, parent=window)
    dialog.models_requested.connect(window.open_models)
    dialog.manage_models_button.click()
    models = window.models_dialog
    assert models is not None
    qtbot.waitUntil(models.isVisible, timeout=5000)
    models.hide()
    window.models_action.trigger()
    qtbot.waitUntil(models.isVisible, timeout=5000)
    assert window.models_dialog is models  # one page; downloads survive closing it
    models.close()


def test_a_model_missing_its_weights_says_so_and_cannot_be_made_default(models_page, arun, qtbot, tmp_path):
    from tests.fixtures.tiny import make_tiny_model_dir

    window, page = models_page()
    folder = make_tiny_model_dir(tmp_path / "moved-away")
    window.engine.registry.register_folder(folder, name="broken")
    for weights in folder.glob("*.safetensors"):
        weights.unlink()  # the user tidied the folder Wren was pointed at
    arun(page.load())
    row = page.installed_rows["broken"]
    assert not row.problem_label.isHidden()
    assert row.problem_label.text() == f"Cannot load: its folder {folder} has no weights (model.gguf or .safetensors)"
    assert not row.default_button.isEnabled() and row.delete_button.isEnabled()
    assert page.installed_rows["tiny"].problem_label.isHidden()
    row.delete_button.click()  # Delete takes it off the list
    with qtbot.waitSignal(page.changed, timeout=5000):
        page.confirm_box.button(QMessageBox.StandardButton.Yes).click()
    assert "broken" not in page.installed_rows
