"""The window follows a system that asks for more contrast (or WREN_HIGH_CONTRAST=1) and
the system's text size: palettes whose text/background pairs reach WCAG's 7:1 (AAA) in high
contrast and 4.5:1 (AA) otherwise, no see-through fills in high contrast, and the style
sheet's font sizes scaled from the system font instead of fixed pixels. Quiet text (the
sidebar's group names, a message's buttons, the token count, help under a setting) reaches
4.5:1 too, measured on the pixels the window paints."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from PySide6.QtCore import QRect, Qt
from PySide6.QtGui import QColor, QFont, QPalette
from PySide6.QtWidgets import QLabel, QScrollArea, QWidget

from wren.desktop import theme
from wren.desktop.settings.dialog import SettingsDialog
from wren.engine.records import ORIGIN_KEY, TERMINAL_ORIGIN

PAIRS = [(QPalette.ColorRole.Window, QPalette.ColorRole.WindowText), (QPalette.ColorRole.Base, QPalette.ColorRole.Text),
         (QPalette.ColorRole.Button, QPalette.ColorRole.ButtonText),
         (QPalette.ColorRole.Highlight, QPalette.ColorRole.HighlightedText)]


def contrast(a: QColor, b: QColor) -> float:
    def luminance(c: QColor) -> float:
        def channel(v: float) -> float:
            return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4
        return 0.2126 * channel(c.redF()) + 0.7152 * channel(c.greenF()) + 0.0722 * channel(c.blueF())
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


@pytest.fixture
def restore(qapp):
    font, palette, sheet = qapp.font(), qapp.palette(), qapp.styleSheet()
    yield qapp
    qapp.setFont(font)
    theme.apply_theme(qapp, dark=False, high_contrast=False)
    qapp.setPalette(palette)
    qapp.setStyleSheet(sheet)


@pytest.mark.parametrize("dark", [False, True])
def test_high_contrast_palettes_reach_aaa_and_drop_see_through_fills(restore, dark):
    theme.apply_theme(restore, dark=dark, high_contrast=True)
    palette = restore.palette()
    for back, fore in PAIRS:
        assert contrast(palette.color(back), palette.color(fore)) >= 7.0, (back, fore)
    assert "#userMessage, #memoryNote" in restore.styleSheet()
    # a placeholder is told from typed text, and still reaches 7:1
    hint, text, base = (palette.color(r) for r in (QPalette.ColorRole.PlaceholderText, QPalette.ColorRole.Text,
                                                  QPalette.ColorRole.Base))
    assert hint != text and contrast(hint, base) >= 7.0
    assert "#searchBox { border: 2px solid" in restore.styleSheet()  # the search box is drawn as a box


@pytest.mark.parametrize("dark", [False, True])
def test_the_usual_palettes_reach_aa(restore, dark):
    theme.apply_theme(restore, dark=dark, high_contrast=False)
    palette = restore.palette()
    for back, fore in PAIRS:
        assert contrast(palette.color(back), palette.color(fore)) >= 4.5, (back, fore)


def test_the_environment_asks_for_high_contrast(restore, monkeypatch):
    monkeypatch.setenv("WREN_HIGH_CONTRAST", "1")
    assert theme.wants_high_contrast(restore)
    theme.apply_theme(restore, dark=False)
    assert restore.palette().color(QPalette.ColorRole.Window) == QColor("#ffffff")
    assert restore.palette().color(QPalette.ColorRole.Text) == QColor("#000000")


def test_font_sizes_follow_the_system_font(restore, open_window):
    restore.setFont(QFont(restore.font().family(), 20))
    theme.apply_theme(restore, dark=False, high_contrast=False)
    assert not re.search(r"font-size:\s*\d+px", restore.styleSheet())
    window = open_window()
    title = window.findChild(QWidget, "conversationTitle")
    sizes = [float(m) for m in re.findall(r"font-size: (\d+\.\d)pt", restore.styleSheet())]
    assert sizes and min(sizes) > 20  # the larger texts stay larger than the (now 20 pt) body text
    assert title is not None and title.font().pointSizeF() > 20


def painted_contrast(window: QWidget, widget: QWidget, area: QRect | None = None) -> float:
    """The contrast of the text in `widget` (in `area` of it) as `window` paints it: the
    commonest colour there is the background (translucent fills already laid over what is
    under them), the colour farthest from it the text's. Edges of letters are blended, so
    this never reads more than the text's own colour gives."""
    image = window.grab().toImage()
    area = area if area is not None else widget.rect()
    scale = image.devicePixelRatio()
    at = widget.mapTo(window, area.topLeft())
    crop = image.copy(QRect(round(at.x() * scale), round(at.y() * scale),
                            round(area.width() * scale), round(area.height() * scale)))
    pixels = Counter(crop.pixel(x, y) for x in range(crop.width()) for y in range(crop.height()))
    assert len(pixels) > 2, "nothing drawn there"
    background = QColor.fromRgb(pixels.most_common(1)[0][0])
    return max(contrast(QColor.fromRgb(p), background) for p in pixels)


@pytest.mark.parametrize("dark", [False, True])
def test_quiet_text_reaches_aa_as_painted(restore, dark, open_window, send, arun, qtbot):
    theme.apply_theme(restore, dark=dark, high_contrast=False)
    window = open_window("An answer.")
    send(window, "A question")
    arun(window.engine.conversations.create("Asked in a terminal", settings={ORIGIN_KEY: TERMINAL_ORIGIN}))
    arun(window.conversations.refresh_list())
    window.composer.edit.setPlainText("A draft to count")
    qtbot.waitUntil(lambda: "token" in window.composer.token_label.text())

    chats = window.sidebar.list
    headers = [chats.item(row) for row in range(chats.count()) if chats.item(row).flags() == Qt.ItemFlag.NoItemFlags]
    assert [h.text() for h in headers] == ["Today", "Terminal"]
    for header in headers:
        ratio = painted_contrast(window, chats.viewport(), chats.visualItemRect(header))
        assert ratio >= 4.5, (header.text(), ratio)
        # set apart by weight, never chosen, and as large as a chat's name
        assert header.font().weight() >= QFont.Weight.DemiBold
        assert header.font().pointSizeF() == chats.font().pointSizeF()

    buttons = [b for w in window.chat.message_widgets() for b in (w.copy_button, w.action_button)]
    assert len(buttons) == 4  # Copy and Edit on the question, Copy and Regenerate on the answer
    for button in buttons:
        assert button.isVisible()
        ratio = painted_contrast(window, button)
        assert ratio >= 4.5, (button.objectName(), button.parent().objectName(), ratio)
    ratio = painted_contrast(window, window.composer.token_label)
    assert ratio >= 4.5, ("token count", ratio)

    dialog = SettingsDialog(window.engine, window.tasks, parent=window)
    arun(dialog.load(hotkey_default="Ctrl+Alt+Space"))
    dialog.show()
    helps = [label for label in dialog.findChildren(QLabel) if label.objectName().endswith("Help")]
    assert len(helps) >= 8  # the five sampling settings, longest answer, seed, stop strings
    for label in helps:
        page = next(dialog.pages.widget(i) for i in range(dialog.pages.count())
                    if dialog.pages.widget(i).isAncestorOf(label))
        dialog.pages.setCurrentWidget(page)
        scroll = label.parentWidget()
        while scroll is not None and not isinstance(scroll, QScrollArea):
            scroll = scroll.parentWidget()
        if scroll is not None:
            scroll.ensureWidgetVisible(label)
        qtbot.waitUntil(label.isVisible)
        ratio = painted_contrast(dialog, label)
        assert ratio >= 4.5, (label.objectName(), ratio)
    dialog.close()
