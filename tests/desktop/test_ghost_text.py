"""Ghost text in the composer: a pause brings a grey suggestion after the cursor; Right or
End takes it, Ctrl+Right a word at a time, Tab only moves focus, any other key dismisses it, and a suggestion made for
another draft is never shown."""

from __future__ import annotations

import asyncio

from PySide6.QtCore import Qt

from tests.engine.worker_probe import submitted_to
from wren.engine.ghost import GHOST_PRIORITY, Suggestion


def _window(open_window, qtbot, reply=" to the park. Then we went home.", **kwargs):
    window = open_window(reply, **kwargs)
    # The scripted model answers only after the assistant cue; ghost text leaves the user's
    # turn open, so let it continue any prompt.
    window.engine.loaded_worker.model._answer_cue = ""
    window.ghost.set_pause(30)
    window.composer.edit.setFocus()
    qtbot.waitUntil(window.composer.edit.hasFocus)
    return window


def _suggest(window, qtbot, text: str) -> str:
    with qtbot.waitSignal(window.ghost.shown, timeout=10000) as blocker:
        qtbot.keyClicks(window.composer.edit, text)
    return blocker.args[0]


def test_right_or_end_accepts_the_whole_suggestion(open_window, qtbot):
    window = _window(open_window, qtbot)
    edit = window.composer.edit
    shown = _suggest(window, qtbot, "Yesterday I walked")
    assert shown == " to the park." and edit.ghost_visible()
    assert edit.toPlainText() == "Yesterday I walked"  # grey only: not in the text yet
    with_ghost = edit.grab().toImage()
    edit.clear_ghost()
    without = edit.grab().toImage()
    assert with_ghost != without  # the grey text is drawn after the cursor
    assert edit.set_ghost(shown, "Yesterday I walked")
    qtbot.keyClick(edit, Qt.Key.Key_Right)
    assert edit.toPlainText() == "Yesterday I walked to the park."
    assert edit.hasFocus() and not edit.ghost_visible()
    edit.setPlainText("Yesterday I ran")
    edit.moveCursor(edit.textCursor().MoveOperation.End)
    assert edit.set_ghost(" home.", "Yesterday I ran")
    qtbot.keyClick(edit, Qt.Key.Key_End)
    assert edit.toPlainText() == "Yesterday I ran home."


def test_tab_leaves_the_composer_and_inserts_nothing(open_window, qtbot):
    """A keyboard user tabbing out of the box must not get the suggestion typed in."""
    window = _window(open_window, qtbot)
    edit = window.composer.edit
    shown = _suggest(window, qtbot, "Yesterday I walked")
    assert shown and edit.ghost_visible()
    qtbot.keyClick(edit, Qt.Key.Key_Tab)
    assert edit.toPlainText() == "Yesterday I walked"
    assert not edit.hasFocus() and not edit.ghost_visible()


def test_ctrl_right_takes_a_word_at_a_time_and_another_key_dismisses(open_window, qtbot):
    window = _window(open_window, qtbot)
    edit = window.composer.edit
    _suggest(window, qtbot, "Yesterday I walked")
    qtbot.keyClick(edit, Qt.Key.Key_Control)  # pressing the modifier alone keeps it
    qtbot.keyClick(edit, Qt.Key.Key_Right, Qt.KeyboardModifier.ControlModifier)
    assert edit.toPlainText() == "Yesterday I walked to"
    assert edit.ghost_visible() and edit.ghost_text == " the park."
    qtbot.keyClick(edit, Qt.Key.Key_Right, Qt.KeyboardModifier.ControlModifier)
    assert edit.toPlainText() == "Yesterday I walked to the" and edit.ghost_text == " park."
    requests = window.ghost.requests
    assert requests == 1  # taking a word asks for nothing new
    qtbot.keyClick(edit, Qt.Key.Key_X)
    assert edit.toPlainText() == "Yesterday I walked to thex"
    assert not edit.ghost_visible() and edit.ghost_text == ""


def test_escape_dismisses_and_keeps_the_text(open_window, qtbot):
    window = _window(open_window, qtbot)
    edit = window.composer.edit
    _suggest(window, qtbot, "Yesterday I walked")
    qtbot.keyClick(edit, Qt.Key.Key_Escape)
    assert not edit.ghost_visible() and edit.toPlainText() == "Yesterday I walked"
    qtbot.keyClick(edit, Qt.Key.Key_Tab)  # nothing to take now: Tab moves on as before
    assert edit.toPlainText() == "Yesterday I walked" and not edit.hasFocus()


def test_a_suggestion_for_a_changed_draft_is_dropped(open_window, qtbot, arun, monkeypatch):
    window = _window(open_window, qtbot)
    edit = window.composer.edit
    release = asyncio.Event()
    asked = []

    async def slow(draft, conversation_id=None, *, temporary=False):
        asked.append(draft)
        await release.wait()
        return Suggestion(" there.", draft)

    monkeypatch.setattr(window.engine.chat, "suggest_continuation", slow)
    edit.setPlainText("Hello")
    edit.moveCursor(edit.textCursor().MoveOperation.End)
    task = asyncio.ensure_future(window.ghost._run("Hello"))
    qtbot.waitUntil(lambda: asked == ["Hello"])
    qtbot.keyClicks(edit, "w")  # the draft changes while the suggestion is written
    release.set()
    qtbot.waitUntil(task.done)
    assert edit.toPlainText() == "Hellow" and not edit.ghost_visible() and edit.ghost_text == ""
    assert not edit.set_ghost(" there.", "Hello")  # the editor refuses it outright too


def test_the_next_keystroke_cancels_a_running_suggestion(open_window, qtbot):
    window = _window(open_window, qtbot, " and on and on and on and on and on and on.", delay=0.05)
    edit = window.composer.edit
    submitted = submitted_to(window.engine.loaded_worker)
    qtbot.keyClicks(edit, "It goes")
    qtbot.waitUntil(lambda: any(r.priority == GHOST_PRIORITY for r in submitted), timeout=5000)
    request = next(r for r in submitted if r.priority == GHOST_PRIORITY)
    qtbot.keyClicks(edit, " o")
    qtbot.waitUntil(request.cancel.is_set, timeout=2000)
    assert window.ghost.cancelled >= 1
    assert not edit.ghost_visible()


def test_the_setting_turns_ghost_text_off(open_window, qtbot, arun):
    from wren.engine.ghost import ENABLED_KEY

    window = _window(open_window, qtbot)
    arun(window.engine.settings.set(ENABLED_KEY, False))
    qtbot.keyClicks(window.composer.edit, "Yesterday I walked")
    qtbot.waitUntil(lambda: window.ghost.requests >= 1 and not window.ghost._task_running(), timeout=5000)
    assert not window.composer.edit.ghost_visible() and window.composer.edit.ghost_text == ""


def test_settings_generation_page_switches_ghost_text(open_window, arun):
    from wren.desktop.settings.dialog import SettingsDialog
    from wren.engine.ghost import ENABLED_KEY, TEMPORARY_ENABLED_KEY

    window = open_window("ok")
    dialog = SettingsDialog(window.engine, window.tasks, hotkey_problem="not here", parent=window)
    arun(dialog.load(hotkey_default="Ctrl+Alt+Space"))
    assert dialog.ghost_text.isChecked() and dialog.ghost_text_temporary.isChecked()
    dialog.ghost_text_temporary.setChecked(False)
    dialog.ghost_text.setChecked(False)
    assert not dialog.ghost_text_temporary.isEnabled()
    assert arun(dialog.save()) is not None
    assert arun(window.engine.settings.get(ENABLED_KEY)) is False
    assert arun(window.engine.settings.get(TEMPORARY_ENABLED_KEY)) is False
    assert arun(window.engine.chat.suggest_continuation("Yesterday I walked")) == ""
    dialog.deleteLater()
