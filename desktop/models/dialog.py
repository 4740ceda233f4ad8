"""The Models page in its own window, opened from the header, the File menu or Settings.

Closing it only hides it: downloads keep going and show their progress when it is opened
again."""

from __future__ import annotations

from PySide6.QtWidgets import QDialog, QDialogButtonBox, QVBoxLayout, QWidget

from wren.engine.api import Engine

from ..bridge import Tasks
from .page import ModelsPage


class ModelsDialog(QDialog):
    def __init__(self, engine: Engine, tasks: Tasks, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("modelsDialog")
        self.setWindowTitle("Models — Wren")
        self.setAccessibleName("Models")
        self.page = ModelsPage(engine, tasks)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.hide)
        layout = QVBoxLayout(self)
        layout.addWidget(self.page, 1)
        layout.addWidget(buttons)
        self.resize(760, 640)

    async def show_page(self) -> None:
        await self.page.load()
        self.show()
        self.raise_()
        self.activateWindow()
        self.page.import_button.setFocus()
