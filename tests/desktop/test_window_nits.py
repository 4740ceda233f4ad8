"""The visual nits of issue 34, each measured: a focused button's label is not clipped; a
tab's table is not framed twice; at 800 px the chat's title keeps its room (the header's buttons fold into "⋯");
block quotes have a bar; the developer-only Tokens button is not in the composer's row."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QHBoxLayout,
    QPushButton,
    QStyle,
    QStyleOptionButton,
    QTableWidget,
    QTabWidget,
    QToolButton,
    QWidget,
)

from wren.desktop import theme

TITLE = "A Gift for Mum's seventieth birthday"


@pytest.fixture
def styled(qapp):
    """Wren's own style sheet, as the app runs with it; taken off again afterwards."""
    palette = qapp.palette()
    theme.apply_theme(qapp, dark=False)
    yield
    qapp.setStyleSheet("")
    qapp.setPalette(palette)


@pytest.mark.parametrize("label", ["Import a file…", "Test connection", "Get started", "OK"])
def test_a_focused_button_still_holds_its_whole_label(styled, qtbot, label):
    host = QWidget()
    qtbot.addWidget(host)
    button = QPushButton(label)
    row = QHBoxLayout(host)
    row.addWidget(button)
    row.addStretch(1)
    host.show()
    qtbot.waitExposed(host)
    laid_out = button.width()  # sized while unfocused, as every button first is
    host.activateWindow()
    button.setFocus(Qt.FocusReason.TabFocusReason)
    qtbot.waitUntil(button.hasFocus)
    option = QStyleOptionButton()
    button.initStyleOption(option)
    assert option.state & QStyle.StateFlag.State_HasFocus
    contents = button.style().subElementRect(QStyle.SubElement.SE_PushButtonContents, option, button)
    assert button.width() == laid_out
    assert contents.width() >= button.fontMetrics().horizontalAdvance(label)  # not "mport a file.."


def test_a_table_that_is_a_tabs_page_has_no_frame_of_its_own(styled, qtbot):
    tabs = QTabWidget()
    qtbot.addWidget(tabs)
    table = QTableWidget(2, 2)
    tabs.addTab(table, "Parts")
    framed = QTableWidget(2, 2)  # the same table outside a tab keeps its frame
    qtbot.addWidget(framed)
    tabs.show()
    framed.show()
    qtbot.waitExposed(tabs)
    assert table.frameWidth() == 0 and framed.frameWidth() > 0


def test_at_800_px_the_title_keeps_its_room_and_the_buttons_fold_into_more(open_window, send, arun, qtbot):
    window = open_window("Fine.")
    send(window, "Hello")
    arun(window.conversations.rename(window.conversations.current_id, TITLE))
    window.resize(1400, 700)
    qtbot.waitUntil(lambda: window.width() == 1400)
    header = window.header
    qtbot.waitUntil(lambda: not header.folded)
    assert window.settings_button.isVisible() and not header.more_button.isVisible()
    window.resize(800, 600)
    qtbot.waitUntil(lambda: window.width() == 800)
    label = window.title_label
    qtbot.waitUntil(lambda: header.folded, timeout=3000)
    qtbot.wait(50)
    assert window.sidebar.width() >= 180  # never narrower than its least
    assert not window.settings_button.isVisible() and header.more_button.isVisible()
    assert len(label.shown_text().rstrip("…")) >= 20, label.shown_text()  # "A Gift for Mum's sev…", not "A Gi…"
    window.resize(1400, 700)
    qtbot.waitUntil(lambda: not header.folded, timeout=3000)
    assert window.settings_button.isVisible() and not header.more_button.isVisible()


def test_the_folded_buttons_are_reached_by_keyboard_from_more(open_window, qtbot):
    window = open_window("Fine.")
    window.resize(800, 600)
    header = window.header
    qtbot.waitUntil(lambda: header.folded, timeout=3000)
    header.title_label.setText("x")  # a short title wants little room: the buttons come back
    header.fit()
    assert not header.folded
    header.title_label.setText(TITLE)
    header.fit()
    assert header.folded
    menu = header.more_button.menu()
    header.more_button.setFocus()
    qtbot.waitUntil(header.more_button.hasFocus)
    seen: list[str] = []

    def choose_temporary() -> None:  # runs inside the menu's own loop
        qtbot.waitUntil(menu.isVisible, timeout=5000)
        seen.extend(a.text() for a in menu.actions())
        temporary = menu.actions()[0]
        assert temporary.isCheckable()
        menu.setActiveAction(temporary)
        qtbot.keyClick(menu, Qt.Key.Key_Return)  # the same as clicking Temporary

    QTimer.singleShot(0, choose_temporary)
    qtbot.keyClick(header.more_button, Qt.Key.Key_Space)  # opens the menu; its loop runs here
    assert seen[0] == "Temporary chat" and "Library" in seen and seen[-1] == "Settings", seen
    qtbot.waitUntil(window.temporary_button.isChecked, timeout=3000)


def test_a_block_quote_has_a_bar(styled, qtbot):
    from wren.desktop.chat.body import MarkdownBody
    from wren.desktop.chat.quotes import quote_bars
    from wren.desktop.chat.segments import ProseSegment

    body = MarkdownBody("Before.\n\n> Gardens are not made by sitting in the shade.\n\nAfter.")
    qtbot.addWidget(body)
    body.resize(500, 200)
    body.show()
    qtbot.waitExposed(body)
    prose = body.findChildren(ProseSegment)[0]
    bars = quote_bars(prose.document())
    assert len(bars) == 1
    bar = bars[0].toRect()
    image = prose.viewport().grab().toImage()
    mid = prose.palette().color(QPalette.ColorRole.Mid)
    assert image.pixelColor(bar.center()).name() == mid.name()
    assert image.pixelColor(bar.center().x(), 3).name() != mid.name()  # beside "Before.", no bar


def test_the_tokens_button_left_the_composer_for_the_chat_menu(open_window):
    window = open_window()
    row = [b.text() for b in window.composer.findChildren(QToolButton) if b.isVisible()]
    assert "Tokens" not in row and not hasattr(window.composer, "tokens_button")
    action = window.tokens_action
    assert action.shortcut().toString() == "Ctrl+Shift+K"
    chat_menu = next(m for m in (a.menu() for a in window.menuBar().actions()) if m and action in m.actions())
    assert chat_menu.title().replace("&", "") == "Chat"
