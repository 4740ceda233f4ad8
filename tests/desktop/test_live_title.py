"""The sidebar and the header follow the engine's TitleUpdate while the first answer streams."""

from __future__ import annotations

from PySide6.QtCore import Qt

ANSWER = ("Roses like sun. " + "Give the roses six hours of sun, water the roses deeply, and feed the roses in spring. " * 6)


def _reply(prompt: str) -> str:
    return "Growing healthy roses" if "Write a title" in prompt else ANSWER


def test_the_title_reaches_the_sidebar_before_the_answer_ends(open_window, arun, qtbot):
    window = open_window(_reply, delay=0.01)
    arun(window.engine.settings.set("titles.model", "always"))  # the scripted model has one slot
    titled: list[tuple[int, str, bool]] = []
    window.conversations.titled.connect(
        lambda cid, title: titled.append((cid, title, cid in window.conversations.streams)))
    window.composer.edit.setPlainText("How do I grow roses?")
    with qtbot.waitSignal(window.conversations.turn_finished, timeout=20000):
        qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
    cid = window.conversations.current_id
    assert titled and titled[0][:2] == (cid, "Growing healthy roses")
    assert titled[0][2]  # while the answer's stream was still open
    assert len(titled) <= 2
    assert window.title_label.text() == "Growing healthy roses"
    qtbot.waitUntil(lambda: "Growing healthy roses" in
                    [window.sidebar.list.item(i).text() for i in range(window.sidebar.list.count())])
    assert arun(window.engine.conversations.get(cid)).title == "Growing healthy roses"


def test_a_one_slot_model_names_the_chat_from_the_question(open_window, send, arun, qtbot):
    window = open_window(_reply)
    with qtbot.waitSignal(window.conversations.titled, timeout=15000) as blocker:
        send(window, "How do I grow roses on a balcony?")
    assert blocker.args[1] == "Grow roses balcony"
    qtbot.waitUntil(lambda: window.title_label.text() == "Grow roses balcony")
