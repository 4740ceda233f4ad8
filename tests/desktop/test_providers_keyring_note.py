"""Settings → Providers where no OS keyring answers: the note leads with a sentence a person
can act on; the keyring's own error (a D-Bus message) comes after it, marked as details."""

from __future__ import annotations

from wren.desktop.settings.dialog import SettingsDialog


def test_the_no_keyring_note_leads_with_a_sentence_and_ends_with_the_details(open_window, arun, monkeypatch,
                                                                              tmp_path):
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", f"unix:path={tmp_path / 'no-bus'}")  # nothing listens
    window = open_window()
    dialog = SettingsDialog(window.engine, window.tasks, hotkey_problem="not here", parent=window)
    page = dialog.providers_page
    arun(page.load())
    assert not page.keyring_note.isHidden()
    first, _, rest = page.keyring_note.text().partition("\n")
    assert first.startswith("No OS keyring is available here, as on a headless Linux machine")
    assert "encrypted file" in first
    assert "SecretService" not in first and "Errno" not in first  # the raw reason is not the lead
    assert rest.startswith("Details: SecretService")
