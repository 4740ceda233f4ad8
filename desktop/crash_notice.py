"""The notice at start after Wren crashed (or hit an unexpected error) last time: where
the report is, and buttons to open it or its folder. Nothing is sent anywhere; the report
stays in the data folder (engine/crashreport.py writes it, redacted)."""

from __future__ import annotations

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QMessageBox, QWidget

from wren.engine.crashreport import CrashReport


def notice_text(reports: list[CrashReport]) -> tuple[str, str]:
    """(headline, details) for the newest-first `reports`."""
    newest = reports[0]
    if any(r.crashed for r in reports):
        headline = "Wren closed unexpectedly last time."
    else:
        headline = "Wren ran into an unexpected error last time."
    more = f" ({len(reports)} reports, the newest shown)" if len(reports) > 1 else ""
    details = (f"A crash report was saved at {newest.path}{more}.\n\n"
               "It stays on this computer and was not sent anywhere. It holds no prompts, answers "
               "or memories: only versions, the operating system and where in Wren's code it happened.")
    return headline, details


class CrashNotice(QMessageBox):
    """Non-modal: the window is usable while it shows."""

    def __init__(self, reports: list[CrashReport], parent: QWidget | None = None):
        super().__init__(parent)
        if not reports:
            raise ValueError("a crash notice needs at least one report")
        self.reports = reports
        self.setObjectName("crashNotice")
        self.setWindowTitle("Wren closed unexpectedly" if any(r.crashed for r in reports) else "Wren hit an error")
        # a crash or an error is a warning; Information draws a lightbulb in some icon themes
        self.setIcon(QMessageBox.Icon.Warning)
        headline, details = notice_text(reports)
        self.setText(headline)
        self.setInformativeText(details)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.setWindowModality(Qt.WindowModality.NonModal)
        self.open_button = self.addButton("Open it", QMessageBox.ButtonRole.AcceptRole)
        self.open_button.setObjectName("crashOpenReport")
        self.folder_button = self.addButton("Show folder", QMessageBox.ButtonRole.ActionRole)
        self.folder_button.setObjectName("crashShowFolder")
        self.dismiss_button = self.addButton("Dismiss", QMessageBox.ButtonRole.RejectRole)
        self.dismiss_button.setObjectName("crashDismiss")
        self.setDefaultButton(self.dismiss_button)
        self.setEscapeButton(self.dismiss_button)
        self.open_url = QDesktopServices.openUrl  # tests put a recorder here
        self.buttonClicked.connect(self._clicked)

    def _clicked(self, button) -> None:
        path = self.reports[0].path
        if button is self.open_button:
            self.open_url(QUrl.fromLocalFile(str(path)))
        elif button is self.folder_button:
            self.open_url(QUrl.fromLocalFile(str(path.parent)))
