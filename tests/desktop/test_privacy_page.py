"""Settings → Privacy: export everything, and delete all my data behind a confirmation."""

from __future__ import annotations

import stat
import zipfile

from wren.desktop.bridge import Tasks
from wren.desktop.settings.privacy import PrivacyPage


async def _chat(engine, text):
    conv = await engine.conversations.create("Trip")
    async for _ in engine.chat.send(conv.id, text):
        pass
    return conv


def test_export_button_writes_the_zip(make_engine, arun, qtbot, tmp_path):
    engine = make_engine("Lisbon.")
    arun(_chat(engine, "Where to go?"))
    page = PrivacyPage(engine, Tasks())
    qtbot.addWidget(page)
    target = tmp_path / "mine.zip"
    page.choose_export_path = lambda: str(target)
    with qtbot.waitSignal(page.exported, timeout=10000) as done:
        page.export_button.click()
    assert done.args == [str(target)]
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    with zipfile.ZipFile(target) as zf:
        assert any(n.endswith(".md") for n in zf.namelist())
    assert str(target) in page.status.text()
    arun(engine.close())


def test_erase_asks_first_and_keeps_data_when_cancelled(make_engine, arun, qtbot):
    engine = make_engine("Sure.")
    arun(_chat(engine, "Plan it"))
    page = PrivacyPage(engine, Tasks())
    qtbot.addWidget(page)
    asked = []
    page.confirm_erase = lambda models: asked.append(models) or False
    page.erase_button.click()
    assert asked == [False] and page.status.text() == "Nothing was deleted."
    assert len(arun(engine.conversations.list())) == 1

    page.erase_models.setChecked(False)
    page.confirm_erase = lambda models: asked.append(models) or True
    with qtbot.waitSignal(page.erased, timeout=10000):
        page.erase_button.click()
    assert arun(engine.conversations.list()) == []
    assert "models were kept" in page.status.text()
    arun(engine.close())


def test_settings_dialog_has_the_privacy_page(make_engine, arun, qtbot):
    from wren.desktop.settings.dialog import SettingsDialog

    engine = make_engine()
    dialog = SettingsDialog(engine, Tasks())
    qtbot.addWidget(dialog)
    titles = [dialog.pages.title(i) for i in range(dialog.pages.count())]
    assert "Privacy" in titles and isinstance(dialog.privacy_page, PrivacyPage)
    arun(engine.close())


def test_delete_permanently_from_the_sidebar_leaves_no_text_on_disk(open_window, arun, qtbot):
    from pathlib import Path

    from PySide6.QtWidgets import QMenu, QMessageBox

    secret = "Snorklefrond"
    window = open_window("Noted.")
    conv = arun(_chat(window.engine, f"my {secret} plan"))
    arun(window.conversations.refresh_list())
    db = Path(window.engine.store.path)

    def on_disk() -> bool:
        return any(secret.encode() in Path(f"{db}{s}").read_bytes()
                   for s in ("", "-wal", "-shm") if Path(f"{db}{s}").exists())

    assert on_disk()
    item = window.sidebar._find(conv.id)
    assert item is not None
    window.sidebar._menu(window.sidebar.list.visualItemRect(item).center())
    menu = window.sidebar.findChildren(QMenu)[-1]
    actions = {a.text(): a for a in menu.actions()}
    assert "Delete permanently" in actions
    actions["Delete permanently"].trigger()
    menu.close()
    box = window.sidebar.confirm_box  # asked first: it cannot be undone
    assert box is not None and box.isVisible() and "cannot be undone" in box.text()
    box.button(QMessageBox.StandardButton.Yes).click()
    qtbot.waitUntil(lambda: not on_disk(), timeout=10000)
    assert arun(window.engine.conversations.list()) == []
    qtbot.waitUntil(lambda: window.sidebar._find(conv.id) is None, timeout=5000)
