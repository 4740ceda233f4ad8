"""Settings → Diagnostics: open the log folder; save a redacted diagnostics bundle for a
support request and put it (and its path) on the clipboard."""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import QMimeData, Qt, QUrl
from PySide6.QtGui import QDesktopServices, QGuiApplication
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QLabel, QLineEdit, QPushButton, QVBoxLayout, QWidget

from wren.engine.api import Engine

from ..bridge import Tasks


class DiagnosticsPage(QWidget):
    def __init__(self, engine: Engine, tasks: Tasks, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("diagnosticsPage")
        self.engine = engine
        self.tasks = tasks
        self.folder_edit = QLineEdit()
        self.folder_edit.setObjectName("logsFolder")
        self.folder_edit.setAccessibleName("Log folder")
        self.folder_edit.setReadOnly(True)
        self.open_button = QPushButton("Open log folder")
        self.open_button.setObjectName("openLogsButton")
        self.bundle_button = QPushButton("Save diagnostics bundle…")
        self.bundle_button.setObjectName("saveBundleButton")
        self.bundle_button.setAccessibleName("Save a redacted diagnostics bundle")
        self.status_label = QLabel()
        self.status_label.setObjectName("diagnosticsStatus")
        self.status_label.setWordWrap(True)
        self.status_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        note = QLabel(
            "Wren's logs hold timings, token counts, errors and safety decisions — never your prompts or "
            "answers, and secrets or personal data are masked. The bundle is a zip of those logs and facts "
            "about this computer (system, Python and library versions). Nothing is sent anywhere: attach it "
            "to a support request yourself."
        )
        note.setWordWrap(True)
        folder_row = QHBoxLayout()
        folder_row.addWidget(self.folder_edit, 1)
        folder_row.addWidget(self.open_button)
        layout = QVBoxLayout(self)
        layout.addWidget(note)
        layout.addWidget(QLabel("Log folder:"))
        layout.addLayout(folder_row)
        bundle_row = QHBoxLayout()
        bundle_row.addWidget(self.bundle_button)
        bundle_row.addStretch(1)
        layout.addLayout(bundle_row)
        layout.addWidget(self.status_label)
        layout.addStretch(1)
        self.open_button.clicked.connect(self.open_folder)
        self.bundle_button.clicked.connect(self._pick_path)

    def load(self) -> None:
        self.folder_edit.setText(str(self.engine.settings.logs_folder()))

    def open_folder(self) -> bool:
        folder = self.engine.settings.logs_folder()
        opened = QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder)))
        if not opened:
            self.status_label.setText(f"No file manager could open {folder}; the path above can be copied.")
        return opened

    def _pick_path(self) -> None:
        default = Path.home() / f"wren-diagnostics-{time.strftime('%Y%m%d-%H%M%S')}.zip"
        path, _ = QFileDialog.getSaveFileName(self, "Save diagnostics bundle", str(default), "Zip archives (*.zip)")
        if path:
            self.tasks.run(self.save_bundle(Path(path)), what="saving the diagnostics bundle")

    async def save_bundle(self, path: Path) -> Path | None:
        self.bundle_button.setEnabled(False)
        self.status_label.setText("Collecting the logs…")
        try:
            data = await self.engine.settings.diagnostics_bundle()
            path.write_bytes(data)
        except OSError as exc:
            self.status_label.setText(f"Could not save the bundle to {path}: {exc.strerror or exc}")
            return None
        finally:
            self.bundle_button.setEnabled(True)
        # Both forms: a file manager or mail client pastes the file, a text field its path.
        mime = QMimeData()
        mime.setUrls([QUrl.fromLocalFile(str(path))])
        mime.setText(str(path))
        QGuiApplication.clipboard().setMimeData(mime)
        self.status_label.setText(f"Saved {path} ({len(data) / 1024:,.0f} KB). The file is on the clipboard.")
        return path
