"""Memory in the chat: "Memory saved" notices, "Remember this", suggestions, "forget
everything", and which memories an answer used (openable, editable, forgettable)."""

from __future__ import annotations

from PySide6.QtWidgets import QMessageBox


def _texts(engine, arun) -> list[str]:
    return [m.text for m in arun(engine.memories.list())]


def test_remember_that_shows_a_memory_saved_notice_linking_to_it(open_window, send, qtbot, arun):
    window = open_window("Noted.")
    send(window, "Remember that I prefer metric units")
    answer = window.chat.message_widgets()[1]
    notes = answer.notes
    assert notes.isVisible()
    assert notes.texts() == ["Memory saved: “I prefer metric units”"]
    (memory,) = arun(window.engine.memories.list())
    (row,) = notes.saved_rows.values()
    with qtbot.waitSignal(window.memory_requested) as opened:
        row.buttons[0].click()  # Open
    assert opened.args == [memory.id]

    # After a reload the notice is still there (it is stored with the answer).
    conversation_id = window.conversations.current_id
    window.conversations.new_chat()
    with qtbot.waitSignal(window.conversations.opened):
        window.tasks.run(window.conversations.open(conversation_id))
    notes = window.chat.message_widgets()[1].notes
    assert notes.texts() == ["Memory saved: “I prefer metric units”"]
    with qtbot.waitSignal(window.status.messageChanged):
        notes.saved_rows[memory.id].buttons[1].click()  # Undo
    assert _texts(window.engine, arun) == []
    assert notes.texts() == ["Memory removed: “I prefer metric units”"]
    window.conversations.new_chat()
    with qtbot.waitSignal(window.conversations.opened):
        window.tasks.run(window.conversations.open(conversation_id))
    notes = window.chat.message_widgets()[1].notes
    qtbot.waitUntil(lambda: notes.texts() == ["Memory removed: “I prefer metric units”"])


def test_forget_notices_and_forget_everything_asks_first(open_window, send, qtbot, arun):
    window = open_window("Okay.")
    send(window, "Remember that my dog is called Biscuit")
    send(window, "Forget that my dog is called Biscuit")
    assert window.chat.message_widgets()[3].notes.texts() == ["Forgot: “My dog is called Biscuit”"]
    send(window, "forget that I own a submarine")
    assert "nothing was forgotten" in window.chat.message_widgets()[5].notes.texts()[0]

    for text in ("I prefer metric units", "I live in Lisbon"):
        arun(window.engine.memories.add(text))
    send(window, "Forget everything you know about me")
    notes = window.chat.message_widgets()[7].notes
    assert notes.clear_row is not None
    assert len(_texts(window.engine, arun)) == 2  # nothing happens before the user confirms

    notes.clear_row.buttons[0].click()
    box = window.context.confirm_box
    assert box is not None and box.isVisible()
    box.button(QMessageBox.StandardButton.Cancel).click()
    assert len(_texts(window.engine, arun)) == 2

    notes.clear_row.buttons[0].click()
    with qtbot.waitSignal(window.context.cleared) as cleared:
        window.context.confirm_box.button(QMessageBox.StandardButton.Yes).click()
    assert cleared.args == [2]
    assert _texts(window.engine, arun) == []
    assert notes.texts()[-1] == "Forgot all memories (2)."


def test_remember_this_on_any_message_and_an_edit_box_for_a_long_one(open_window, send, qtbot, arun):
    window = open_window("Paris is the capital of France.")
    send(window, "What is the capital of France?")
    user, answer = window.chat.message_widgets()
    with qtbot.waitSignal(window.context.remembered) as saved:
        answer.remember_button.click()
    assert saved.args[0].text == "Paris is the capital of France."
    assert "Memory saved" in window.status.currentMessage()

    long = "My project notes. " + "x" * 1200
    send(window, long)
    user = window.chat.message_widgets()[2]
    user.remember_button.click()
    qtbot.waitUntil(lambda: window.context.editor is not None and window.context.editor.isVisible())
    editor = window.context.editor
    assert editor.note_label.text().startswith("A memory is a short fact of at most 1,000 characters")
    editor.edit.setPlainText("My project notes live in ~/notes")
    with qtbot.waitSignal(window.context.remembered):
        editor.buttons.accepted.emit()
    assert set(_texts(window.engine, arun)) == {"Paris is the capital of France.", "My project notes live in ~/notes"}
    assert arun(window.engine.memories.list())[0].source_message_id in (user.message_id, answer.message_id)


def test_suggested_memories_are_offered_and_saved_only_when_accepted(open_window, send, qtbot, arun):
    window = open_window("Nice!")
    arun(window.engine.memories.update_settings(suggest=True))
    send(window, "I live in Lisbon.")
    notes = window.chat.message_widgets()[1].notes
    assert list(notes.offer_rows) == ["I live in Lisbon"]
    assert _texts(window.engine, arun) == []
    row = notes.offer_rows["I live in Lisbon"]
    with qtbot.waitSignal(window.context.remembered):
        row.buttons[0].click()  # Remember
    assert _texts(window.engine, arun) == ["I live in Lisbon"]
    assert notes.texts() == ["Memory saved: “I live in Lisbon”"]


def test_an_answer_shows_the_memories_it_used_each_editable_and_forgettable(open_window, send, qtbot, arun):
    window = open_window("Use metric units.")
    memory = arun(window.engine.memories.add("I prefer metric units"))
    arun(window.engine.memories.add("My sister is called Ana"))
    send(window, "Which units should the recipe use?")
    answer = window.chat.message_widgets()[1]
    assert answer.memory_ids == (memory.id,)
    assert answer.provenance_button.isVisible() and answer.provenance_button.text() == "Used 1 memory"

    answer.provenance_button.click()
    qtbot.waitUntil(lambda: window.context.provenance is not None and window.context.provenance.isVisible())
    dialog = window.context.provenance
    row = dialog.rows[memory.id]
    assert row.label.text() == "“I prefer metric units”"
    with qtbot.waitSignal(window.memory_requested) as opened:
        row.open_button.click()
    assert opened.args == [memory.id]

    editor = dialog.edit(memory.id)
    editor.edit.setPlainText("I prefer metric units and Celsius")
    with qtbot.waitSignal(dialog.changed):
        editor.buttons.accepted.emit()
    assert "Celsius" in row.label.text() and "edited since" in row.label.text()
    assert _texts(window.engine, arun)[0] == "I prefer metric units and Celsius"

    with qtbot.waitSignal(dialog.changed):
        row.forget_button.click()
    assert memory.id not in arun(window.engine.memories.by_id([memory.id]))
    assert row.label.text() == "Deleted since. It said: “I prefer metric units”"
    with qtbot.waitSignal(dialog.changed):
        row.undo_button.click()
    assert arun(window.engine.memories.by_id([memory.id]))[memory.id].text == "I prefer metric units and Celsius"
    dialog.close()

    # Deleted for good: the answer stays readable and says the memory is gone.
    arun(window.engine.memories.delete(memory.id))
    conversation_id = window.conversations.current_id
    window.conversations.new_chat()
    with qtbot.waitSignal(window.conversations.opened):
        window.tasks.run(window.conversations.open(conversation_id))
    answer = window.chat.message_widgets()[1]
    assert answer.text() == "Use metric units." and answer.provenance_button.text() == "Used 1 memory"
    answer.provenance_button.click()
    qtbot.waitUntil(lambda: window.context.provenance is not dialog and window.context.provenance is not None)
    row = window.context.provenance.rows[memory.id]
    assert row.label.text().startswith("Deleted since.") and not row.edit_button.isVisibleTo(row)
