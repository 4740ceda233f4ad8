"""Settings → Memory (list, search, add, edit, delete with undo, clear all, the switches) and
Settings → Personalization (custom instructions, room kept for the answer)."""

from __future__ import annotations

from PySide6.QtWidgets import QMessageBox

from wren.desktop.settings.dialog import SettingsDialog


def _dialog(window, arun) -> SettingsDialog:
    dialog = SettingsDialog(window.engine, window.tasks, parent=window)
    arun(dialog.load(hotkey_default="Ctrl+Alt+Space"))
    return dialog


def _texts(engine, arun) -> list[str]:
    return sorted(m.text for m in arun(engine.memories.list()))


def test_the_memory_page_lists_searches_edits_deletes_and_clears(open_window, arun, qtbot):
    window = open_window()
    for text in ("I prefer metric units", "My sister is called Ana", "I live in Lisbon"):
        arun(window.engine.memories.add(text))
    page = _dialog(window, arun).memory_page
    assert sorted(page.memory_texts()) == ["I live in Lisbon", "I prefer metric units", "My sister is called Ana"]
    assert page.count_label.text() == "3 memories."

    page.search_box.setText("sister")
    qtbot.waitUntil(lambda: page.memory_texts() == ["My sister is called Ana"])
    page.search_box.setText('"unbalanced * NEAR -')  # FTS syntax in a search never breaks the page
    qtbot.waitUntil(lambda: "match" in page.count_label.text())
    page.search_box.clear()
    qtbot.waitUntil(lambda: len(page.memory_texts()) == 3)

    # Add and edit go through the editor, which shows the engine's refusal and stays open.
    editor = page.add()
    editor.edit.setPlainText("x" * 1200)
    arun(editor._submit())
    assert editor.isVisible() and "at most 1,000 characters" in editor.error_label.text()
    editor.edit.setPlainText("I am vegetarian")
    arun(editor._submit())
    qtbot.waitUntil(lambda: "I am vegetarian" in page.memory_texts())
    assert page.list.currentItem().text() == "I am vegetarian"

    page.list.setCurrentRow(page.memory_texts().index("I prefer metric units"))
    editor = page.edit_selected()
    assert editor.edit.toPlainText() == "I prefer metric units"
    editor.edit.setPlainText("I prefer metric units and Celsius")
    arun(editor._submit())
    qtbot.waitUntil(lambda: "I prefer metric units and Celsius" in page.memory_texts())

    page.list.setCurrentRow(page.memory_texts().index("I live in Lisbon"))
    arun(page.delete_selected())
    assert "I live in Lisbon" not in _texts(window.engine, arun) and page.undo_bar.isVisibleTo(page)
    arun(page.undo_delete())
    assert "I live in Lisbon" in page.memory_texts() and "I live in Lisbon" in _texts(window.engine, arun)

    box = page.confirm_clear()
    box.button(QMessageBox.StandardButton.Cancel).click()
    assert len(_texts(window.engine, arun)) == 4
    box = page.confirm_clear()
    box.button(QMessageBox.StandardButton.Yes).click()
    qtbot.waitUntil(lambda: page.memory_texts() == [])
    assert _texts(window.engine, arun) == []
    assert page.count_label.text() == "Deleted 4 memories."


def test_a_memory_opened_from_an_answer_is_selected_or_said_to_be_gone(open_window, arun):
    window = open_window()
    keep = arun(window.engine.memories.add("I prefer metric units"))
    gone = arun(window.engine.memories.add("I live in Lisbon"))
    arun(window.engine.memories.delete(gone.id))
    dialog = _dialog(window, arun)
    assert arun(dialog.show_memory(keep.id))
    assert dialog.pages.currentWidget() is dialog.memory_page and dialog.memory_page.selected_id() == keep.id
    assert not arun(dialog.show_memory(gone.id))
    assert "deleted" in dialog.memory_page.count_label.text()


def test_memory_switches_and_custom_instructions_are_saved(open_window, arun, qtbot):
    window = open_window()
    dialog = _dialog(window, arun)
    page = dialog.memory_page
    assert page.enabled_box.isChecked() and not page.history_box.isChecked() and not page.suggest_box.isChecked()
    page.history_box.setChecked(True)
    page.suggest_box.setChecked(True)
    page.enabled_box.setChecked(False)
    assert not page.suggest_box.isEnabled()  # nothing to suggest into while memory is off
    personal = dialog.personal_page
    personal.about_me.setPlainText("I am a nurse in Porto.")
    personal.how_to_respond.setPlainText("Be brief.")
    personal.reserve.setValue(512)
    with qtbot.waitSignal(dialog.saved):
        dialog.buttons.accepted.emit()
    settings = arun(window.engine.memories.settings())
    assert (settings.enabled, settings.reference_history, settings.suggest) == (False, True, True)
    instructions = arun(window.engine.settings.instructions())
    assert (instructions.about_me, instructions.how_to_respond) == ("I am a nurse in Porto.", "Be brief.")
    assert arun(window.engine.settings.context()).answer_reserve == 512

    again = _dialog(window, arun)
    assert again.personal_page.about_me.toPlainText() == "I am a nurse in Porto."
    assert again.personal_page.reserve.value() == 512
    again.personal_page.how_to_respond.setPlainText("y" * 3001)
    again.personal_page.reserve.setValue(0)
    assert arun(again.save()) is None
    assert again.pages.currentWidget() is again.personal_page and "3,000" in again.error_label.text()
    assert arun(window.engine.settings.context()).answer_reserve == 512  # nothing was written
