"""Settings → Privacy: the offline lock and the network ledger (network.py), export
everything to one zip, or delete all your data (confirmed)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QFileDialog,
    QLabel,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from wren.engine.api import Engine
from wren.engine.errors import WrenError
from wren.engine.privacy import EraseReport

from ..bridge import Tasks
from .network import NetworkSection

EXPLAINER = (
    "Wren keeps everything on this computer, in files only your account can read. "
    "A deleted chat can be restored for a few seconds; then its text is removed from the "
    "database for good. \"Delete permanently\" in a chat's menu removes it at once.")


class PrivacyPage(QWidget):
    exported = Signal(str)  # the zip's path
    erased = Signal()  # everything is gone: the window reloads its chat list and memories
    failed = Signal(str)

    def __init__(self, engine: Engine, tasks: Tasks, parent: QWidget | None = None):
        super().__init__(parent)
        self.engine = engine
        self.tasks = tasks
        # Swappable for tests: where to export, and whether the user confirmed the erase.
        self.choose_export_path: Callable[[], str] = self._ask_export_path
        self.confirm_erase: Callable[[bool], bool] = self._ask_confirmation
        intro = QLabel(EXPLAINER)
        intro.setWordWrap(True)
        self.export_button = QPushButton("Export everything…")
        self.export_button.setObjectName("privacyExportButton")
        self.export_button.setToolTip("Conversations (JSON and Markdown), memories and settings in one "
                                      "zip file; no models and no keys")
        self.export_button.clicked.connect(self._export_clicked)
        self.erase_button = QPushButton("Delete all my data…")
        self.erase_button.setObjectName("privacyEraseButton")
        self.erase_button.setToolTip("Conversations, memories, settings, logs and caches; asks first")
        self.erase_button.clicked.connect(self._erase_clicked)
        self.erase_models = QCheckBox("Also delete the installed models")
        self.erase_models.setObjectName("privacyEraseModels")
        self.status = QLabel()
        self.status.setObjectName("privacyStatus")
        self.status.setWordWrap(True)
        self.network = NetworkSection(engine, tasks)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addWidget(self.network, 1)
        layout.addSpacing(12)
        layout.addWidget(self.export_button)
        layout.addSpacing(12)
        layout.addWidget(self.erase_button)
        layout.addWidget(self.erase_models)
        layout.addWidget(self.status)

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.tasks.run(self.network.load(), what="reading the network ledger")

    # -- export ---------------------------------------------------------------------

    def _ask_export_path(self) -> str:
        path, _ = QFileDialog.getSaveFileName(self, "Export everything", str(Path.home() / "wren-export.zip"),
                                              "Zip files (*.zip)")
        return path

    def _export_clicked(self) -> None:
        path = self.choose_export_path()
        if path:
            self.tasks.run(self.export_to(path), what="exporting your data")

    async def export_to(self, path: str | Path) -> Path | None:
        self._busy(True, "Exporting…")
        try:
            out = await self.engine.privacy.export_all(path)
        except (WrenError, OSError) as exc:
            self._fail(f"Nothing was exported: {exc}")
            return None
        finally:
            self._busy(False)
        self.status.setText(f"Exported to {out} (readable by you alone).")
        self.exported.emit(str(out))
        return out

    # -- erase ----------------------------------------------------------------------

    def _ask_confirmation(self, models: bool) -> bool:
        what = "conversations, memories, settings, logs and caches"
        if models:
            what += ", and every installed model"
        box = QMessageBox(QMessageBox.Icon.Warning, "Delete all my data",
                          f"Delete all your {what}? This cannot be undone.", parent=self)
        delete = box.addButton("Delete everything", QMessageBox.ButtonRole.DestructiveRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        box.exec()
        return box.clickedButton() is delete

    def _erase_clicked(self) -> None:
        models = self.erase_models.isChecked()
        if self.confirm_erase(models):
            self.tasks.run(self.erase(models=models), what="deleting your data")
        else:
            self.status.setText("Nothing was deleted.")

    async def erase(self, *, models: bool = False) -> EraseReport | None:
        self._busy(True, "Deleting…")
        try:
            report = await self.engine.privacy.erase_all(keep_models=not models)
        except (WrenError, OSError) as exc:
            self._fail(f"Not everything was deleted: {exc}")
            return None
        finally:
            self._busy(False)
        self.status.setText("All your data was deleted" + ("." if models else "; the models were kept."))
        self.erased.emit()
        return report

    def _busy(self, busy: bool, text: str = "") -> None:
        self.export_button.setEnabled(not busy)
        self.erase_button.setEnabled(not busy)
        if text:
            self.status.setText(text)

    def _fail(self, text: str) -> None:
        self.status.setText(text)
        self.failed.emit(text)
        return None
