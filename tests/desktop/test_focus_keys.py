"""Focus and keyboard polish (issue 34): typed text always reaches the composer, actions give
focus back to it, chat switching and composer shortcuts, the shortcuts list, the memory
editor's keys, Send's focus ring and the mouse wheel on unfocused spin and combo boxes.
Keys only, no mouse clicks, on the real window over a scripted engine."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QWidget

from wren.desktop.settings.dialog import SettingsDialog


def _ready(window, qtbot) -> None:
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)


def _focus(widget: QWidget, qtbot, reason=Qt.FocusReason.TabFocusReason) -> None:
    widget.setFocus(reason)
    qtbot.waitUntil(widget.hasFocus)


def _type(qtbot, text: str) -> None:
    """Type where the focus is now, as a user would (the focus may move while typing)."""
    for ch in text:
        qtbot.keyClicks(QApplication.focusWidget(), ch)


# -- the memory editor ------------------------------------------------------------------


def _memory_editor(open_window, arun, qtbot):
    window = open_window()
    dialog = SettingsDialog(window.engine, window.tasks, parent=window)
    arun(dialog.load(hotkey_default="Ctrl+Alt+Space"))
    editor = dialog.memory_page.add()
    qtbot.waitUntil(editor.isVisible)
    editor.activateWindow()
    _focus(editor.edit, qtbot)
    return window, editor


def test_tab_leaves_the_memory_text_without_inserting_a_tab(open_window, arun, qtbot):
    _window, editor = _memory_editor(open_window, arun, qtbot)
    qtbot.keyClicks(editor.edit, "I like tea")
    qtbot.keyClick(editor.edit, Qt.Key.Key_Tab)
    assert editor.edit.toPlainText() == "I like tea"
    assert not editor.edit.hasFocus() and editor.isAncestorOf(QApplication.focusWidget())


def test_ctrl_enter_saves_the_memory(open_window, arun, qtbot):
    window, editor = _memory_editor(open_window, arun, qtbot)
    qtbot.keyClicks(editor.edit, "I like green tea")
    with qtbot.waitSignal(editor.saved, timeout=5000):
        qtbot.keyClick(editor.edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert [m.text for m in arun(window.engine.memories.list())] == ["I like green tea"]
    assert not editor.isVisible()


def test_alt_s_saves_the_memory(open_window, arun, qtbot):
    window, editor = _memory_editor(open_window, arun, qtbot)
    qtbot.keyClicks(editor.edit, "I cycle to work")
    with qtbot.waitSignal(editor.saved, timeout=5000):
        qtbot.keyClick(editor.edit, Qt.Key.Key_S, Qt.KeyboardModifier.AltModifier)
    assert [m.text for m in arun(window.engine.memories.list())] == ["I cycle to work"]


# -- typing reaches the composer ---------------------------------------------------------


def test_typing_anywhere_in_the_window_goes_to_the_composer(open_window, send, qtbot):
    window = open_window("An answer.")
    send(window, "A question")
    _ready(window, qtbot)
    opened, settings = [], []
    window.conversations.opened.connect(opened.append)
    window.settings_requested.connect(lambda: settings.append(1))
    answer = window.chat.last_answer()
    places = [window.sidebar.new_chat_button, window.sidebar.list, answer.copy_button, window.model_picker,
              window.settings_button, window.chat]
    typed = ""
    for n, place in enumerate(places):
        # clicked there, say: letters go to the composer
        _focus(place, qtbot, Qt.FocusReason.MouseFocusReason)
        _type(qtbot, f"m{n}")
        typed += f"m{n}"
        # the window came back to the front with the focus there: a space too
        _focus(place, qtbot, Qt.FocusReason.ActiveWindowFocusReason)
        word = f" w{n}"  # the space first: it must press nothing
        _type(qtbot, word)
        typed += word
        assert window.composer.edit.hasFocus(), place.objectName()
        assert window.composer.edit.toPlainText() == typed
    assert opened == [] and settings == []


def test_space_presses_a_button_the_user_tabbed_to(open_window, qtbot):
    window = open_window()
    _ready(window, qtbot)
    _focus(window.chat_settings_button, qtbot, Qt.FocusReason.MouseFocusReason)
    qtbot.keyClick(window.chat_settings_button, Qt.Key.Key_Tab)
    assert window.settings_button.hasFocus()
    with qtbot.waitSignal(window.settings_requested, timeout=2000):
        qtbot.keyClick(window.settings_button, Qt.Key.Key_Space)
    assert window.composer.edit.toPlainText() == ""


def _tab_to(window, qtbot, target: QWidget) -> None:
    """Reach `target` with the Tab key from the stop before it."""
    stops = [w for w in window.tab_stops() if w.isVisible() and w.isEnabled()]
    before = stops[stops.index(target) - 1]
    _focus(before, qtbot, Qt.FocusReason.MouseFocusReason)
    qtbot.keyClick(before, Qt.Key.Key_Tab)
    assert target.hasFocus(), QApplication.focusWidget().objectName()


def test_continue_by_keyboard_gives_focus_back_to_the_composer(open_window, send, arun, qtbot):
    from wren.engine.records import MessageStatus

    window = open_window("Roses like sun and water. " + " ".join(["slow"] * 200), delay=0.01)
    send(window, "Tell me about roses")
    cid = window.conversations.current_id
    answer = arun(window.engine.conversations.messages(cid))[-1]
    arun(window.engine.db(window.engine.store.update_message, answer.id, content="Roses like",
                          status=MessageStatus.INTERRUPTED))
    window.conversations.new_chat()
    arun(window.conversations.open(cid))
    widget = window.chat.last_answer()
    qtbot.waitUntil(widget.continue_button.isVisible, timeout=5000)
    _ready(window, qtbot)
    window.order_tab_stops()
    _tab_to(window, qtbot, widget.continue_button)
    with qtbot.waitSignal(window.conversations.turn_finished, timeout=15000):
        qtbot.keyClick(widget.continue_button, Qt.Key.Key_Space)
        qtbot.waitUntil(window.composer.stop_button.isEnabled)  # streaming now
        # while it streams, the focus is not on the button that took Continue's place
        assert window.composer.edit.hasFocus(), QApplication.focusWidget().objectName()
        _type(qtbot, " ok")  # a space first: it presses nothing that focus landed on
    assert window.composer.edit.toPlainText() == " ok"


def test_remember_by_keyboard_gives_focus_back_to_the_composer(open_window, send, qtbot):
    window = open_window("Paris is the capital of France.")
    send(window, "What is the capital of France?")
    _ready(window, qtbot)
    answer = window.chat.last_answer()
    _tab_to(window, qtbot, answer.remember_button)
    with qtbot.waitSignal(window.context.remembered, timeout=5000):
        qtbot.keyClick(answer.remember_button, Qt.Key.Key_Space)
    qtbot.waitUntil(window.composer.edit.hasFocus, timeout=2000)
    _type(qtbot, " yes")
    assert window.composer.edit.toPlainText() == " yes"


def test_focus_that_drifts_onto_a_button_goes_back_to_the_composer(open_window, send, qtbot):
    """The focused button is hidden (as a used Continue is): Qt moves focus to the next one,
    which the user never chose, so a space typed next must not press it."""
    window = open_window("An answer.")
    send(window, "A question")
    _ready(window, qtbot)
    answer = window.chat.last_answer()
    _tab_to(window, qtbot, answer.remember_button)
    answer.remember_button.hide()
    qtbot.waitUntil(window.composer.edit.hasFocus, timeout=2000)
    _type(qtbot, " x")
    assert window.composer.edit.toPlainText() == " x"


def test_search_then_enter_opens_the_chat_with_focus_in_the_composer(open_window, arun, qtbot):
    window = open_window()
    tulips = arun(window.engine.conversations.create("Tulips in June"))
    arun(window.engine.conversations.create("Something else"))
    with qtbot.waitSignal(window.conversations.listed):
        window.conversations.refresh()
    _ready(window, qtbot)
    qtbot.keyClick(window.composer.edit, Qt.Key.Key_K, Qt.KeyboardModifier.ControlModifier)
    assert window.sidebar.search_box.hasFocus()
    with qtbot.waitSignal(window.conversations.listed, timeout=5000):
        qtbot.keyClicks(window.sidebar.search_box, "tulips")
    with qtbot.waitSignal(window.conversations.opened) as blocker:
        qtbot.keyClick(window.sidebar.search_box, Qt.Key.Key_Return)
    assert blocker.args[0] == tulips.id
    qtbot.waitUntil(window.composer.edit.hasFocus, timeout=2000)
    _type(qtbot, "more")
    assert window.composer.edit.toPlainText() == "more"


def test_show_wren_from_the_tray_puts_focus_in_the_composer(open_window, qtbot):
    window = open_window()
    _focus(window.settings_button, qtbot, Qt.FocusReason.MouseFocusReason)
    window.hide()
    window.show_and_raise()  # what the tray's "Show Wren" calls
    qtbot.waitUntil(window.isVisible)
    assert window.focusWidget() is window.composer.edit


def test_the_composer_is_the_focus_after_the_welcome_closes(make_engine, arun, qtbot, tmp_path, monkeypatch):
    from wren.desktop.app import WrenApp

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    app = WrenApp(make_engine("Hello."), None, tray=False)
    try:
        with qtbot.waitSignal(app.window.models.loaded, timeout=20000):
            arun(app.start())
        welcome = arun(app.show_welcome())
        welcome.activateWindow()
        # the window behind keeps its own focus widget: a button, as the model took a while
        app.window.sidebar.new_chat_button.setFocus()
        assert app.window.focusWidget() is app.window.sidebar.new_chat_button
        _focus(welcome.close_button, qtbot)
        with qtbot.waitSignal(welcome.finished, timeout=2000):
            qtbot.keyClick(welcome.close_button, Qt.Key.Key_Space)  # "Get started"
        assert app.window.focusWidget() is app.window.composer.edit
    finally:
        arun(app.shutdown())
        app.window.deleteLater()
        app.quick.deleteLater()


# -- shortcuts ---------------------------------------------------------------------------


def _chats(window, arun, qtbot, titles):
    made = [arun(window.engine.conversations.create(t)) for t in titles]
    with qtbot.waitSignal(window.conversations.listed):
        window.conversations.refresh()
    return made


def _press_and_wait_open(window, qtbot, key, mods) -> int:
    with qtbot.waitSignal(window.conversations.opened, timeout=5000) as blocker:
        qtbot.keyClick(QApplication.focusWidget(), key, mods)
    return blocker.args[0]


def test_next_and_previous_chat_keys(open_window, arun, qtbot):
    window = open_window()
    _chats(window, arun, qtbot, ["One", "Two", "Three"])
    ids = window.sidebar.conversation_ids()  # newest first
    _ready(window, qtbot)
    window.focus_composer()
    ctrl, shift = Qt.KeyboardModifier.ControlModifier, Qt.KeyboardModifier.ShiftModifier
    assert _press_and_wait_open(window, qtbot, Qt.Key.Key_Tab, ctrl) == ids[0]
    assert _press_and_wait_open(window, qtbot, Qt.Key.Key_PageDown, ctrl) == ids[1]
    assert _press_and_wait_open(window, qtbot, Qt.Key.Key_Tab, ctrl) == ids[2]
    assert _press_and_wait_open(window, qtbot, Qt.Key.Key_Backtab, ctrl | shift) == ids[1]
    assert _press_and_wait_open(window, qtbot, Qt.Key.Key_PageUp, ctrl) == ids[0]
    assert window.composer.edit.hasFocus()


def test_shift_escape_and_ctrl_l_go_to_the_composer(open_window, qtbot):
    window = open_window()
    _ready(window, qtbot)
    for key, mods in ((Qt.Key.Key_Escape, Qt.KeyboardModifier.ShiftModifier),
                      (Qt.Key.Key_L, Qt.KeyboardModifier.ControlModifier)):
        _focus(window.sidebar.list, qtbot)
        qtbot.keyClick(window.sidebar.list, key, mods)
        assert window.composer.edit.hasFocus()


def test_the_shortcuts_list_names_every_shortcut_of_the_window(open_window, qtbot):
    from PySide6.QtGui import QAction, QKeySequence

    from wren.desktop.window.keyboard import ShortcutsDialog

    window = open_window()
    _ready(window, qtbot)
    window.focus_composer()
    qtbot.keyClick(window.composer.edit, Qt.Key.Key_Slash, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: window.findChild(ShortcutsDialog) is not None and window.findChild(ShortcutsDialog).isVisible())
    shown = dict(window.findChild(ShortcutsDialog).rows())
    native = QKeySequence.SequenceFormat.NativeText
    with_keys = [a for a in window.findChildren(QAction) if a.shortcuts()]
    assert len(with_keys) >= 12
    for action in with_keys:
        name = action.text().replace("&", "").rstrip("…")
        assert name in shown, name
        for seq in action.shortcuts():
            assert seq.toString(native) in shown[name]
    assert "Ctrl+Tab" in shown["Next chat"] and "Shift+Esc" in shown["Go to the message box"]
    assert shown["Send the message"] == "Enter"
    assert "Keyboard shortcuts" in [a.text().replace("&", "") for a in window.menuBar().actions()[-1].menu().actions()]
    # made from the actions themselves: a new one is listed too
    window._action("Something new", lambda: None, "Ctrl+Alt+J", name="somethingNew")
    assert ("Something new", QKeySequence("Ctrl+Alt+J").toString(native)) in ShortcutsDialog(window).rows()


# -- Send's focus ring --------------------------------------------------------------------


def test_send_shows_a_focus_ring_that_stands_out_from_its_fill(open_window, qtbot, qapp):
    from wren.desktop import theme

    palette = qapp.palette()
    theme.apply_theme(qapp, dark=False)
    try:
        window = open_window()
        _ready(window, qtbot)
        send = window.composer.send_button
        window.composer.edit.setPlainText("draft")  # Send is enabled only with text
        _focus(window.composer.edit, qtbot)
        plain = send.grab().toImage()
        _focus(send, qtbot)
        ring = send.grab().toImage()
        assert ring.size() == plain.size()
        x = send.width() // 2
        for y in (0, 1, send.height() - 2):  # the ring's top and bottom edges, mid-width
            a, b = plain.pixelColor(x, y), ring.pixelColor(x, y)
            diff = max(abs(a.red() - b.red()), abs(a.green() - b.green()), abs(a.blue() - b.blue()))
            assert diff > 80, f"no visible ring at y={y}: {a.name()} → {b.name()}"
    finally:
        qapp.setStyleSheet("")
        qapp.setPalette(palette)


# -- the mouse wheel -------------------------------------------------------------------------


def _wheel(widget: QWidget, down: bool = True) -> None:
    from PySide6.QtCore import QPoint, QPointF
    from PySide6.QtGui import QWheelEvent

    at = QPointF(widget.width() / 2, widget.height() / 2)
    event = QWheelEvent(at, QPointF(widget.mapToGlobal(at.toPoint())), QPoint(0, 0), QPoint(0, -120 if down else 120),
                        Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(widget, event)


def _settings_on(window, arun, qtbot, page: QWidget) -> SettingsDialog:
    dialog = window.findChild(SettingsDialog) or SettingsDialog(window.engine, window.tasks, parent=window)
    arun(dialog.load(hotkey_default="Ctrl+Alt+Space"))
    dialog.resize(700, 300)  # short, so its pages scroll
    dialog.show()
    qtbot.waitUntil(dialog.isVisible)
    tabs = dialog.pages
    for i in range(tabs.count()):
        if tabs.widget(i).isAncestorOf(page) or tabs.widget(i) is page:
            tabs.setCurrentIndex(i)
    qtbot.waitUntil(page.isVisible)
    return dialog


def test_spin_and_combo_boxes_take_the_wheel_only_with_focus(open_window, arun, qtbot):
    from PySide6.QtWidgets import QAbstractScrollArea, QAbstractSpinBox, QComboBox

    window = open_window()
    dialog = SettingsDialog(window.engine, window.tasks, parent=window)
    top_k = dialog.sampling_editor.top_k
    _settings_on(window, arun, qtbot, top_k)
    guarded = dialog.findChildren(QAbstractSpinBox) + dialog.findChildren(QComboBox) + [window.model_picker]
    assert len(guarded) > 5
    assert all(w.focusPolicy() == Qt.FocusPolicy.StrongFocus for w in guarded), \
        [w.objectName() for w in guarded if w.focusPolicy() != Qt.FocusPolicy.StrongFocus]

    top_k.setValue(40)
    area = top_k.parentWidget()
    while not isinstance(area, QAbstractScrollArea):
        area = area.parentWidget()
    bar = area.verticalScrollBar()
    bar.setValue(0)
    assert bar.maximum() > 0 and not top_k.hasFocus()
    _wheel(top_k)
    assert top_k.value() == 40  # unchanged ...
    assert bar.value() > 0  # ... and the page scrolled instead
    top_k.setFocus()
    qtbot.waitUntil(top_k.hasFocus)
    _wheel(top_k, down=False)
    assert top_k.value() == 41  # with focus, the wheel changes it


def test_the_mcp_forms_kind_keeps_its_value_under_the_wheel(open_window, arun, qtbot):
    window = open_window()
    dialog = SettingsDialog(window.engine, window.tasks, parent=window)
    kind = dialog.tools_page.kind_picker
    _settings_on(window, arun, qtbot, dialog.tools_page)
    assert kind.count() > 1
    kind.setCurrentIndex(0)
    window.composer.edit.setFocus()
    _wheel(kind)
    assert kind.currentIndex() == 0
