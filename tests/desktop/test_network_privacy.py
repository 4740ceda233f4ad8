"""Settings → Privacy's offline lock and network ledger, and the status bar's mark."""

from __future__ import annotations

import json

from wren.desktop.bridge import Tasks
from wren.desktop.settings.privacy import PrivacyPage
from wren.engine.network import ledger, lock


def _page(engine, qtbot) -> PrivacyPage:
    page = PrivacyPage(engine, Tasks())
    qtbot.addWidget(page)
    return page


def test_the_switch_turns_the_lock_on_and_off_for_every_wren_process(make_engine, arun, qtbot):
    engine = make_engine()
    page = _page(engine, qtbot)
    arun(page.network.load())
    assert not page.network.lock_box.isChecked() and page.network.lock_box.isEnabled()
    page.network.lock_box.click()
    qtbot.waitUntil(lambda: lock.state().on, timeout=5000)  # the file every process reads
    qtbot.waitUntil(lambda: page.network.status.text() == "The offline lock is on.", timeout=5000)
    assert "MCP servers" in page.network.lock_note.text()
    page.network.lock_box.click()
    qtbot.waitUntil(lambda: not lock.state().on, timeout=5000)
    arun(engine.close())


def test_a_lock_set_by_the_environment_is_shown_on_and_cannot_be_switched_off(make_engine, arun, qtbot, monkeypatch):
    monkeypatch.setenv("WREN_OFFLINE", "1")
    engine = make_engine()
    page = _page(engine, qtbot)
    arun(page.network.load())
    assert page.network.lock_box.isChecked() and not page.network.lock_box.isEnabled()
    assert "WREN_OFFLINE=1" in page.network.lock_note.text()
    arun(engine.close())


def test_the_ledger_is_shown_and_saved_as_a_report(make_engine, arun, qtbot, tmp_path):
    engine = make_engine()
    ledger.record(ledger.Entry("model download", "model pull of acme/tiny", "connect", "127.0.0.1", 8080, True,
                               "allowed", process="wren models", sent=10, received=20))
    page = _page(engine, qtbot)
    arun(page.network.load())
    shown = page.network.ledger_view.toPlainText()
    assert "127.0.0.1:8080 (loopback)" in shown and "model download: model pull of acme/tiny" in shown
    target = tmp_path / "report.json"
    assert arun(page.network.save_report(target)) == target
    saved = json.loads(target.read_text())
    assert saved["summary"]["entries"] == 1 and saved["entries"][0]["host"] == "127.0.0.1"
    assert str(target) in page.network.status.text()
    missing = tmp_path / "no-such-folder" / "report.txt"
    assert arun(page.network.save_report(missing)) is None
    assert page.network.status.text().startswith("Nothing was saved: the privacy report was not written")
    arun(engine.close())


def test_the_status_bar_marks_the_lock_while_it_is_on(open_window, qtbot):
    window = open_window()
    mark = window.status.offline_mark
    assert mark.isHidden()
    lock.set_offline(True)  # as `wren privacy offline on` in a terminal would
    qtbot.waitUntil(lambda: not mark.isHidden(), timeout=8000)
    assert mark.text() == "Offline" and "Settings → Privacy" in mark.toolTip()
    assert mark.accessibleName() == "Offline lock on"
    lock.set_offline(False)
    qtbot.waitUntil(mark.isHidden, timeout=8000)
