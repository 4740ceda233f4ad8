"""The window follows a system that asks for more contrast (or WREN_HIGH_CONTRAST=1) and
the system's text size: palettes whose text/background pairs reach WCAG's 7:1 (AAA) in high
contrast and 4.5:1 (AA) otherwise, no see-through fills in high contrast, and the style
sheet's font sizes scaled from the system font instead of fixed pixels."""

from __future__ import annotations

import re

import pytest
from PySide6.QtGui import QColor, QFont, QPalette
from PySide6.QtWidgets import QWidget

from wren.desktop import theme

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
