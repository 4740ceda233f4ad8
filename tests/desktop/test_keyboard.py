"""The whole window by keyboard: Tab order, a visible focus ring at every stop, the chat list
that does not switch chats while tabbing or arrowing, search results opened with Enter, and
the Regenerate shortcut."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QApplication, QWidget

from wren.desktop import theme


@pytest.fixture
def styled(qapp):
    """Wren's own style sheet, as the app runs with it; taken off again afterwards."""
    palette = qapp.palette()
    theme.apply_theme(qapp, dark=False)
    yield
    qapp.setStyleSheet("")
    qapp.setPalette(palette)


def _name(widget: QWidget) -> str:
    return widget.objectName() or type(widget).__name__


def _image(widget: QWidget) -> QImage:
    return widget.grab().toImage()


def _focus_shows(widget: QWidget, qtbot) -> bool:
    """The widget looks different with focus than without: a focus ring is drawn."""
    focused = _image(widget)
    widget.clearFocus()
    qtbot.waitUntil(lambda: not widget.hasFocus())
    plain = _image(widget)
    widget.setFocus(Qt.FocusReason.TabFocusReason)
    qtbot.waitUntil(widget.hasFocus)
    return focused != plain


def _tab_round(window, qtbot, start: QWidget, limit: int = 60) -> list[QWidget]:
    start.setFocus(Qt.FocusReason.TabFocusReason)
    qtbot.waitUntil(start.hasFocus)
    order = [start]
    for _ in range(limit):
        qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_Tab)
        now = QApplication.focusWidget()
        if now is start:
            return order
        assert now is not None and window.isAncestorOf(now), "Tab left the window"
        order.append(now)
    raise AssertionError(f"Tab never came back to the start: {[_name(w) for w in order]}")


def _ready(window, qtbot) -> None:
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)


def test_tab_goes_through_the_whole_window_in_order_with_focus_always_visible(styled, open_window, send, qtbot):
    window = open_window("An answer.")
    send(window, "A question")
    window.conversations.new_chat()
    window.composer.clear()
    _ready(window, qtbot)
    order = _tab_round(window, qtbot, window.sidebar.new_chat_button)
    assert [_name(w) for w in order] == [
        "newChatButton", "searchBox", "newProjectButton", "conversationList", "modelPicker", "temporaryChatButton",
        "libraryButton", "modelsButton", "chatSettingsButton", "settingsButton", "chatView", "composer", "micButton", "sendButton", "toolsButton",
        "attachFileButton",
    ]
    window.composer.edit.setPlainText("draft")  # Send is enabled only with text to send
    for widget in order:
        widget.setFocus(Qt.FocusReason.TabFocusReason)
        qtbot.waitUntil(widget.hasFocus)
        assert _focus_shows(widget, qtbot), f"no visible focus on {_name(widget)}"


def test_a_chats_own_buttons_come_between_the_header_and_the_composer(open_window, send, qtbot):
    window = open_window("An answer.")
    send(window, "A question")
    _ready(window, qtbot)
    order = [_name(w) for w in _tab_round(window, qtbot, window.sidebar.new_chat_button)]
    chat, composer = order.index("chatView"), order.index("composer")
    between = order[chat + 1 : composer]
    assert "regenerateButton" in between and "editMessageButton" in between
    assert between.index("editMessageButton") < between.index("regenerateButton")  # question first
    assert order[composer + 1 : composer + 3] == ["micButton", "sendButton"] and order[-2:] == ["toolsButton", "attachFileButton"]


def test_tabbing_and_arrows_in_the_chat_list_do_not_switch_chats(open_window, arun, qtbot):
    window = open_window()
    a = arun(window.engine.conversations.create("Alpha"))
    b = arun(window.engine.conversations.create("Beta"))
    with qtbot.waitSignal(window.conversations.listed):
        window.conversations.refresh()
    _ready(window, qtbot)
    opened = []
    window.conversations.opened.connect(opened.append)
    window.sidebar.search_box.setFocus()
    qtbot.keyClick(window.sidebar.search_box, Qt.Key.Key_Tab)
    new_project = window.library.projects.add_button  # the Projects section sits above the chats
    assert new_project.hasFocus()
    qtbot.keyClick(new_project, Qt.Key.Key_Tab)
    chats = window.sidebar.list
    assert chats.hasFocus()
    qtbot.keyClick(chats, Qt.Key.Key_Down)
    qtbot.keyClick(chats, Qt.Key.Key_Up)
    qtbot.wait(100)
    assert opened == [] and window.conversations.current_id is None
    qtbot.keyClick(chats, Qt.Key.Key_Down)
    with qtbot.waitSignal(window.conversations.opened) as blocker:
        qtbot.keyClick(chats, Qt.Key.Key_Space)
    assert blocker.args[0] == a.id  # Beta is newest and first; Down went to Alpha
    with qtbot.waitSignal(window.conversations.opened) as blocker:
        qtbot.keyClick(chats, Qt.Key.Key_Up)
        qtbot.keyClick(chats, Qt.Key.Key_Return)
    assert blocker.args[0] == b.id


def test_search_results_open_with_the_arrow_keys_and_enter(open_window, arun, qtbot):
    window = open_window()
    arun(window.engine.conversations.create("Roses in June"))
    tulips = arun(window.engine.conversations.create("Tulips in June"))
    arun(window.engine.conversations.create("Something else"))
    with qtbot.waitSignal(window.conversations.listed):
        window.conversations.refresh()
    _ready(window, qtbot)
    window.focus_search()
    with qtbot.waitSignal(window.conversations.listed, timeout=5000):
        qtbot.keyClicks(window.sidebar.search_box, "june")
    assert len(window.sidebar.conversation_ids()) == 2
    qtbot.keyClick(window.sidebar.search_box, Qt.Key.Key_Down)  # into the results
    assert window.sidebar.list.hasFocus() and window.conversations.current_id is None
    first = window.sidebar.conversation_ids()[0]
    with qtbot.waitSignal(window.conversations.opened) as blocker:
        qtbot.keyClick(window.sidebar.list, Qt.Key.Key_Return)
    assert blocker.args[0] == first
    assert window.sidebar.search_box.text() == ""  # opening a result clears the filter
    # Enter in the search box opens the first result once the results are shown.
    window.focus_search()
    with qtbot.waitSignal(window.conversations.listed, timeout=5000):
        window.sidebar.search_box.setText("tulips")
    with qtbot.waitSignal(window.conversations.opened) as blocker:
        qtbot.keyClick(window.sidebar.search_box, Qt.Key.Key_Return)
    assert blocker.args[0] == tulips.id


def test_ctrl_r_regenerates_the_last_answer(open_window, send, qtbot, arun):
    answers = iter(["First answer.", "Second answer."])
    window = open_window(lambda prompt: "A title" if "Write a title" in prompt else next(answers, "More."))
    send(window, "Question")
    _ready(window, qtbot)
    window.composer.edit.setFocus()
    with qtbot.waitSignal(window.conversations.turn_finished, timeout=10000):
        qtbot.keyClick(window.composer.edit, Qt.Key.Key_R, Qt.KeyboardModifier.ControlModifier)
    assert window.chat.last_answer().text() == "Second answer."
    assert window.findChild(type(window.regenerate_action), "regenerateAction").shortcut().toString() == "Ctrl+R"


def test_focus_stays_in_the_composer_after_send_and_stop_by_mouse(open_window, qtbot):
    window = open_window(" ".join(["slow"] * 200), delay=0.01)
    _ready(window, qtbot)
    composer = window.composer
    composer.edit.setPlainText("Tell me a long story")
    with qtbot.waitSignal(window.conversations.turn_finished, timeout=15000):
        qtbot.mouseClick(composer.send_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: window.chat.last_answer() is not None and len(window.chat.last_answer().text()) > 10)
        assert composer.edit.hasFocus(), _name(QApplication.focusWidget())
        qtbot.mouseClick(composer.stop_button, Qt.MouseButton.LeftButton)
    assert composer.edit.hasFocus(), _name(QApplication.focusWidget())


def test_escape_closes_the_models_dialog(open_window, qtbot):
    window = open_window()
    dialog = window.open_models()
    qtbot.waitUntil(dialog.isVisible)
    dialog.activateWindow()
    qtbot.waitUntil(dialog.isActiveWindow)
    qtbot.keyClick(QApplication.focusWidget() or dialog, Qt.Key.Key_Escape)
    qtbot.waitUntil(lambda: not dialog.isVisible())
