"""A message about self-harm is met with care, not a privacy gate: it is sent at once, the
model answers, and the window shows supportive words and where to find help, with no rule
ids and no "Send anyway". The rule ids stay in the stored notices (diagnostics)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractButton, QLabel

HURTING = "Honestly I want to die, nothing helps any more"


def _all_text(window) -> str:
    """Every piece of text the window shows, as a person would see it."""
    labels = [w.text() for w in window.findChildren(QLabel) if w.isVisibleTo(window)]
    buttons = [w.text() for w in window.findChildren(QAbstractButton) if w.isVisibleTo(window)]
    return "\n".join(labels + buttons + [window.status.currentMessage()])


def test_self_harm_gets_care_and_an_answer_not_a_gate(open_window, send, qtbot, arun):
    window = open_window("I'm so sorry you're feeling this way. I'm here with you.")
    with qtbot.waitSignal(window.gate.checked, timeout=5000) as checked:
        finished = send(window, HURTING)
    assert any(f.category == "content.self_harm" for f in checked.args[0].findings)
    assert finished.reason.value == "stop"
    assert window.chat.last_answer().text() == "I'm so sorry you're feeling this way. I'm here with you."

    care, care_text = window.gate.care_panel, window.engine.safety.care_message()
    assert care.isVisible() and not window.gate.panel.isVisible()
    shown = care.visible_text()
    assert care_text.title in shown and care_text.message in shown
    assert all(line.text.split(":")[0] in shown for line in care_text.help)
    assert "findahelpline.com" in shown
    everything = _all_text(window)
    assert "Send anyway" not in everything
    for rule_word in ("rule", "content.self_harm", "wordlist", "flagged", "self harm"):
        assert rule_word not in everything.lower(), rule_word
    # Diagnostics keep what fired and why.
    stored = arun(window.engine.conversations.messages(window.conversations.current_id))
    assert stored[0].meta["safety"][0]["category"] == "content.self_harm" and stored[0].meta["safety"][0]["rule"]


def test_care_stays_while_chatting_and_goes_with_the_chat(open_window, send, qtbot):
    window = open_window("Here for you.")
    send(window, HURTING)
    care = window.gate.care_panel
    assert care.isVisible()
    send(window, "thanks")
    assert care.isVisible()  # still there in the same chat
    window.conversations.new_chat()
    assert not care.isVisible()
    send(window, HURTING)
    assert care.isVisible()
    qtbot.mouseClick(care.close_button, Qt.MouseButton.LeftButton)
    assert not care.isVisible()


def test_other_findings_still_get_the_safety_check_without_the_care_finding(open_window, qtbot, wren_home):
    (wren_home / "safety").mkdir(exist_ok=True)
    (wren_home / "safety" / "policy.toml").write_text(
        'version = 1\n[actions]\n"user.blocklist" = "warn"\n[blocklist]\nwords = ["zorblax"]\n')
    window = open_window()
    window.composer.edit.setPlainText(f"{HURTING}, and zorblax")
    with qtbot.waitSignal(window.gate.checked, timeout=5000):
        qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
    panel = window.gate.panel
    assert window.gate.care_panel.isVisible() and panel.isVisible()
    assert "self" not in panel.details.text().lower()  # the care finding is not a privacy line
    assert "block list" in panel.details.text()
