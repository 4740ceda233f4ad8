"""Safety in the window: the check before sending (warn, block, redact), notices while an
answer streams, Settings → Safety, and Settings → Diagnostics."""

from __future__ import annotations

import zipfile

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication

from wren.desktop.settings.dialog import SettingsDialog
from wren.engine.events import SafetyAction
from wren.engine.records import MessageStatus


def _policy(home, text: str) -> None:
    (home / "safety").mkdir(exist_ok=True)
    (home / "safety" / "policy.toml").write_text("version = 1\n" + text)


def _press_enter(window, qtbot, text: str):
    window.composer.edit.setPlainText(text)
    with qtbot.waitSignal(window.gate.checked, timeout=5000) as checked:
        qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
    return checked.args[0]


def _dialog(window, arun) -> SettingsDialog:
    dialog = SettingsDialog(window.engine, window.tasks, parent=window)
    arun(dialog.load(hotkey_default="Ctrl+Alt+Space"))
    return dialog


def test_a_warning_says_what_fired_and_send_anyway_sends_it(open_window, qtbot, wren_home, arun):
    _policy(wren_home, '[actions]\n"user.blocklist" = "warn"\n[blocklist]\nwords = ["zorblax"]\n')
    window = open_window()
    result = _press_enter(window, qtbot, "tell me about zorblax")
    assert result.action is SafetyAction.WARN
    panel = window.gate.panel
    assert panel.isVisible() and panel.property("level") == "warn"
    assert "block list" in panel.details.text() and "blocklist:words" in panel.details.text()
    assert panel.send_button.isVisible()
    assert window.composer.text() == "tell me about zorblax"  # nothing sent yet
    assert window.chat.message_widgets() == [] and window.conversations.current_id is None

    with qtbot.waitSignal(window.conversations.turn_finished, timeout=15000):
        panel.send_button.click()
    assert not panel.isVisible() and window.composer.text() == ""
    user = window.chat.message_widgets()[0]
    assert user.text() == "tell me about zorblax"
    assert "flagged: user.blocklist" in user.status_label.text()


def test_edit_goes_back_to_the_draft_with_the_finding_selected(open_window, qtbot, wren_home, send):
    _policy(wren_home, '[actions]\n"user.blocklist" = "warn"\n[blocklist]\nwords = ["zorblax"]\n')
    window = open_window()
    _press_enter(window, qtbot, "what is a zorblax anyway")
    window.gate.panel.edit_button.click()
    assert not window.gate.panel.isVisible()
    assert window.composer.edit.textCursor().selectedText() == "zorblax"
    window.composer.edit.textCursor().insertText("gadget")
    finished = send(window, window.composer.text())
    assert finished.reason.value == "stop"
    assert window.chat.message_widgets()[0].text() == "what is a gadget anyway"


def test_a_blocked_message_is_not_sent_and_the_draft_stays(open_window, qtbot, wren_home, arun):
    _policy(wren_home, '[blocklist]\nwords = ["zorblax"]\n')
    window = open_window()
    result = _press_enter(window, qtbot, "tell me about zorblax please")
    assert result.blocked
    panel = window.gate.panel
    assert panel.isVisible() and panel.property("level") == "block"
    assert not panel.send_button.isVisible()
    assert "Not sent" in panel.title.text() and "block list" in panel.title.text()
    assert window.composer.text() == "tell me about zorblax please"
    assert window.conversations.current_id is None and window.chat.message_widgets() == []
    assert arun(window.engine.conversations.list()) == []


def test_a_redacted_message_is_stored_masked_and_says_which_categories(open_window, qtbot, wren_home, send, arun):
    _policy(wren_home, '[actions]\n"pii.email" = "redact"\n')
    window = open_window()
    said: list[str] = []
    window.gate.said.connect(said.append)
    send(window, "write to bob@wrenmail.net for me")
    assert said == ["Masked before sending: email address"]
    user = window.chat.message_widgets()[0]
    assert user.text() == "write to [REDACTED:pii.email] for me"
    assert "redacted: pii.email" in user.status_label.text()
    stored = arun(window.engine.conversations.messages(window.conversations.current_id))[0]
    assert "bob@wrenmail.net" not in stored.content


def test_a_rule_firing_on_the_answer_shows_while_it_streams(open_window, qtbot, wren_home):
    _policy(wren_home, '[actions]\n"user.blocklist" = "redact"\n[blocklist]\nwords = ["zorblax"]\n')
    reply = "The zorblax is " + " ".join(f"word{i}" for i in range(150))
    window = open_window(reply, delay=0.004)
    window.composer.edit.setPlainText("hello")
    with qtbot.waitSignal(window.conversations.turn_finished, timeout=20000):
        qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: len(window.chat.message_widgets()) == 2, timeout=5000)
        answer = window.chat.message_widgets()[1]
        qtbot.waitUntil(lambda: "redacted: user.blocklist" in answer.status_label.text(), timeout=5000)
        assert answer.is_streaming  # shown before the answer is done
    answer = window.chat.message_widgets()[1]
    assert answer.text().startswith("The [REDACTED:user.blocklist] is")
    assert answer.info.status is MessageStatus.COMPLETE
    assert "redacted: user.blocklist" in answer.status_label.text()


def test_safety_settings_change_an_action_and_it_takes_effect(open_window, qtbot, arun):
    window = open_window()
    dialog = _dialog(window, arun)
    page = dialog.safety_page
    assert not page.warnings_label.isVisibleTo(dialog)
    categories = [page.table.item(r, 1).text() for r in range(page.table.rowCount())]
    assert {"pii.email", "secret.openai_key", "user.blocklist"} <= set(categories)
    assert page.action("pii.email", "local") is SafetyAction.ALLOW
    page.set_action("pii.email", "local", SafetyAction.BLOCK)
    with qtbot.waitSignal(dialog.saved):
        dialog.buttons.accepted.emit()
    rules = {r.category: r for r in window.engine.safety.rules()}
    assert rules["pii.email"].local is SafetyAction.BLOCK and rules["pii.email"].remote is SafetyAction.WARN

    result = _press_enter(window, qtbot, "mail me at bob@wrenmail.net")
    assert result.blocked and window.gate.panel.property("level") == "block"
    assert "email address" in window.gate.panel.title.text()


def test_block_list_edits_and_a_bad_pattern_is_refused_with_the_reason(open_window, qtbot, arun):
    window = open_window()
    dialog = _dialog(window, arun)
    page = dialog.safety_page
    page.words_edit.setPlainText("zorblax\n\nquux")
    page.patterns_edit.setPlainText(r"\bPRJ-\d{4}\b")
    assert arun(page.save())
    assert arun(window.engine.safety.scan("about PRJ-1234 today")).blocked

    again = _dialog(window, arun).safety_page
    assert again.words_edit.toPlainText() == "zorblax\nquux"
    again.patterns_edit.setPlainText("(unclosed")
    again.set_action("pii.phone", "local", SafetyAction.WARN)
    assert not arun(again.save())
    assert "(unclosed" in again.error_label.text() and "not a valid regular expression" in again.error_label.text()
    # Refused as a whole: neither the pattern nor the action after it was written.
    assert {r.category: r for r in window.engine.safety.rules()}["pii.phone"].local is SafetyAction.ALLOW
    assert arun(window.engine.safety.scan("about PRJ-1234 today")).blocked


def test_a_broken_policy_file_is_reported_on_the_safety_page(open_window, arun, wren_home):
    _policy(wren_home, '[actions]\n"pii.email" = "explode"\n')
    window = open_window()
    page = _dialog(window, arun).safety_page
    assert not page.warnings_label.isHidden()
    assert "policy.toml" in page.warnings_label.text() and "line 3" in page.warnings_label.text()


def test_diagnostics_saves_a_redacted_zip_and_puts_it_on_the_clipboard(open_window, arun, tmp_path, monkeypatch):
    from PySide6.QtGui import QDesktopServices

    window = open_window()
    page = _dialog(window, arun).diagnostics_page
    assert page.folder_edit.text() == str(window.engine.settings.logs_folder())
    opened = []
    monkeypatch.setattr(QDesktopServices, "openUrl", lambda url: opened.append(url.toLocalFile()) or True)
    assert page.open_folder() and opened == [str(window.engine.settings.logs_folder())]

    target = tmp_path / "bundle.zip"
    assert arun(page.save_bundle(target)) == target
    with zipfile.ZipFile(target) as bundle:
        assert "system.json" in bundle.namelist()
    clipboard = QGuiApplication.clipboard().mimeData()
    assert clipboard.text() == str(target)
    assert [u.toLocalFile() for u in clipboard.urls()] == [str(target)]
    assert str(target) in page.status_label.text()
