"""Light/dark appearance: follow the system colour scheme and apply Wren's style sheet."""

from __future__ import annotations

from importlib import resources

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QIcon, QPalette
from PySide6.QtWidgets import QApplication, QWidget


def is_dark(widget: QWidget | None = None) -> bool:
    palette = widget.palette() if widget is not None else QGuiApplication.palette()
    return palette.color(QPalette.ColorRole.Window).lightness() < 128


def _dark_palette() -> QPalette:
    p = QPalette()
    role, group = QPalette.ColorRole, QPalette.ColorGroup
    colors = {
        role.Window: "#1e1f22", role.WindowText: "#e6e6e6", role.Base: "#25262a",
        role.AlternateBase: "#2b2d31", role.ToolTipBase: "#2b2d31", role.ToolTipText: "#e6e6e6",
        role.Text: "#e6e6e6", role.Button: "#2b2d31", role.ButtonText: "#e6e6e6",
        role.BrightText: "#ffffff", role.Highlight: "#3d6fd9", role.HighlightedText: "#ffffff",
        role.Link: "#7aa7ff", role.PlaceholderText: "#8b8d93", role.Mid: "#3a3c42",
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


def style_sheet() -> str:
    return resources.files("wren.resources").joinpath("desktop/wren.qss").read_text(encoding="utf-8")


def app_icon() -> QIcon:
    with resources.as_file(resources.files("wren.resources").joinpath("desktop/wren.svg")) as path:
        return QIcon(str(path))


def apply_theme(app: QApplication, *, dark: bool | None = None) -> None:
    """Fusion with the system's light or dark scheme, and again whenever the scheme changes
    (`dark` forces one, for screenshots).

    Fusion everywhere keeps the chat's look (bubbles, code blocks) the same on every
    platform; only its colours follow the system.
    """
    app.setStyle("Fusion")
    light = app.style().standardPalette()

    def follow(*_args) -> None:
        wanted = _wants_dark(app) if dark is None else dark
        app.setPalette(_dark_palette() if wanted else light)

    follow()
    app.setStyleSheet(style_sheet())
    app.styleHints().colorSchemeChanged.connect(follow)
