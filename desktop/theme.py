"""Light/dark appearance: follow the system colour scheme and apply Wren's style sheet."""

from __future__ import annotations

import os
import re
from importlib import resources
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QIcon, QPalette
from PySide6.QtWidgets import QApplication, QWidget


def is_dark(widget: QWidget | None = None) -> bool:
    palette = widget.palette() if widget is not None else QGuiApplication.palette()
    return palette.color(QPalette.ColorRole.Window).lightness() < 128


# The placeholder colour, which quiet text uses, for light and dark: 4.5:1 (WCAG AA) or more
# on the window, the base, the sidebar and every translucent fill of wren.qss laid over them
# (the user's bubble, a hovered row, memory notes, the undo bar).
QUIET_TEXT = {False: "#5f5f5f", True: "#a8aab0"}

# Help under a setting: quieter than its label, in the placeholder colour (so 4.5:1 too).
HELP_STYLE = "color: palette(placeholder-text)"


def _dark_palette() -> QPalette:
    p = QPalette()
    role, group = QPalette.ColorRole, QPalette.ColorGroup
    colors = {
        role.Window: "#1e1f22", role.WindowText: "#e6e6e6", role.Base: "#25262a",
        role.AlternateBase: "#2b2d31", role.ToolTipBase: "#2b2d31", role.ToolTipText: "#e6e6e6",
        role.Text: "#e6e6e6", role.Button: "#2b2d31", role.ButtonText: "#e6e6e6",
        role.BrightText: "#ffffff", role.Highlight: "#3d6fd9", role.HighlightedText: "#ffffff",
        role.Link: "#7aa7ff", role.PlaceholderText: QUIET_TEXT[True], role.Mid: "#3a3c42",
        role.Midlight: "#33353a", role.Dark: "#141518", role.Light: "#45474d", role.Shadow: "#000000",
    }
    for r, c in colors.items():
        p.setColor(r, QColor(c))
    for r in (role.Text, role.WindowText, role.ButtonText):
        p.setColor(group.Disabled, r, QColor("#6c6e74"))
    return p


def _wants_dark(app: QApplication) -> bool:
    scheme = app.styleHints().colorScheme()
    if scheme == Qt.ColorScheme.Unknown:
        return is_dark()
    return scheme == Qt.ColorScheme.Dark


BASE_PX = 13.0  # wren.qss's pixel font sizes are written for a 13 px (10 pt) system font


def style_sheet(base_point_size: float | None = None) -> str:
    """Wren's style sheet; with the system font's point size, its font sizes scaled to it
    (a user who asks for larger text gets larger titles too, not fixed pixels)."""
    text = resources.files("wren.resources").joinpath("desktop/wren.qss").read_text(encoding="utf-8")
    if base_point_size is None or base_point_size <= 0:
        return text
    scale = base_point_size / (BASE_PX * 0.75)
    return re.sub(r"font-size:\s*(\d+(?:\.\d+)?)px",
                  lambda m: f"font-size: {float(m.group(1)) * 0.75 * scale:.1f}pt", text)


def app_icon() -> QIcon:
    with resources.as_file(resources.files("wren.resources").joinpath("desktop/wren.svg")) as path:
        return QIcon(str(path))


def apply_theme(app: QApplication, *, dark: bool | None = None, high_contrast: bool | None = None) -> None:
    """Fusion with the system's light or dark scheme, and again whenever the scheme or the
    contrast preference changes (`dark`, `high_contrast` force one, for screenshots).

    Fusion everywhere keeps the chat's look (bubbles, code blocks) the same on every
    platform; only its colours follow the system. A system asking for more contrast (or
    WREN_HIGH_CONTRAST=1) gets plain black-and-white palettes and no see-through fills; text
    sizes follow the system's font size.
    """
    app.setStyle("Fusion")
    light = app.style().standardPalette()
    # Fusion's selection blue (#308cc6) under white text is 3.7:1, below WCAG AA's 4.5:1
    light.setColor(QPalette.ColorRole.Highlight, QColor("#2364aa"))
    # Quiet text (a message's buttons, the token count, help under a setting, a search
    # result's snippet) is the placeholder colour: Fusion's is black at half opacity, 3.9:1
    # on white. This grey keeps 4.5:1 on every fill it is drawn over (bubbles, hovered rows).
    light.setColor(QPalette.ColorRole.PlaceholderText, QColor(QUIET_TEXT[False]))

    def follow(*_args) -> None:
        wanted = _wants_dark(app) if dark is None else dark
        contrast = wants_high_contrast(app) if high_contrast is None else high_contrast
        if contrast:
            app.setPalette(_contrast_palette(wanted))
        else:
            app.setPalette(_dark_palette() if wanted else light)
        app.setStyleSheet(style_sheet(app.font().pointSizeF()) + (CONTRAST_SHEET if contrast else ""))

    follow()
    app.styleHints().colorSchemeChanged.connect(follow)
    _accessibility(app).contrastPreferenceChanged.connect(follow)


def wants_high_contrast(app: QApplication) -> bool:
    if os.environ.get("WREN_HIGH_CONTRAST", "") not in ("", "0"):
        return True
    return _accessibility(app).contrastPreference() == Qt.ContrastPreference.HighContrast


_HINTS: dict[int, Any] = {}


def _accessibility(app: QApplication) -> Any:
    """The app's QAccessibilityHints, fetched once and kept with its QStyleHints: under
    PySide 6.11, `app.styleHints().accessibility()` as one expression left a wrapper whose C++
    object was already deleted ("Internal C++ object already deleted")."""
    key = id(app)
    if key not in _HINTS:
        style_hints = app.styleHints()  # held too: a collected wrapper of it took its child along
        _HINTS[key] = (style_hints, style_hints.accessibility())
    return _HINTS[key][1]


def _contrast_palette(dark: bool) -> QPalette:
    """Black on white (or white on black), a strong highlight; every pair 7:1 or more."""
    p = QPalette()
    role, group = QPalette.ColorRole, QPalette.ColorGroup
    ink, paper = ("#ffffff", "#000000") if dark else ("#000000", "#ffffff")
    highlight, on_highlight = ("#ffd700", "#000000") if dark else ("#00008b", "#ffffff")
    for r in (role.Window, role.Base, role.AlternateBase, role.Button, role.ToolTipBase):
        p.setColor(r, QColor(paper))
    for r in (role.WindowText, role.Text, role.ButtonText, role.ToolTipText, role.BrightText):
        p.setColor(r, QColor(ink))
    # A hint, not text: set apart from what was typed (in the text colour, an empty box read
    # as a filled one), and still 7:1 (#595959 on white, #c0c0c0 on black)
    p.setColor(role.PlaceholderText, QColor("#c0c0c0" if dark else "#595959"))
    p.setColor(role.Highlight, QColor(highlight))
    p.setColor(role.HighlightedText, QColor(on_highlight))
    p.setColor(role.Link, QColor("#9fd3ff" if dark else "#0000cc"))
    for r in (role.Mid, role.Midlight, role.Dark, role.Light, role.Shadow):
        p.setColor(r, QColor(ink))
    for r in (role.Text, role.WindowText, role.ButtonText):
        p.setColor(group.Disabled, r, QColor("#c0c0c0" if dark else "#595959"))
    return p


# Appended in high contrast: the see-through fills of bubbles, notes and panels become borders.
CONTRAST_SHEET = """
#userMessage, #memoryNote, #undoBar, #temporaryBanner, #safetyPanel, #policyWarnings {
    background: palette(base); border: 2px solid palette(text); }
#chatNotice, #messageStatus[problem="true"], #tokenCount[over="true"], #safetyError { color: palette(text); font-weight: 700; }
#searchBox { border: 2px solid palette(text); padding: 2px; }
"""
