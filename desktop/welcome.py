"""The welcome shown at Wren's first start (and from Help → Welcome): what Wren is, where
its data lives, that nothing leaves the computer, which model answers, a way to the Models
page, and starting with the system in the tray.

It is a window of its own beside the main one, never modal: the window (and the packaged
start-up check) go on while it is open.
"""

from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtCore import Qt, QUrl, Signal
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from wren.engine.api import Engine
from wren.engine.modelhub.registry import STARTER_NAME as STARTER_MODEL

from .autostart import Autostart
from .bridge import Tasks

WELCOME_SEEN = "desktop.welcome_seen"  # set once the welcome was shown at a start

INTRO = ("Wren is an AI assistant that runs on this computer. Ask it questions, have it draft or "
         "rewrite text, or just chat. It remembers what you ask it to; Settings → Memory shows "
         "and deletes what it keeps.")
LOCAL_ONLY = ("Nothing leaves this computer: no account, no telemetry, no cloud. The one exception "
              "is a remote provider, if you add one in Settings → Providers: what you send to its "
              "models goes to it.")


class WelcomeDialog(QDialog):
    models_requested = Signal()

    def __init__(self, engine: Engine, tasks: Tasks, data_folder: Path, *, autostart: Autostart | None = None,
                 model_loading=lambda: False, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("welcomeDialog")
        self.setWindowTitle("Welcome to Wren")
        self.setAccessibleName("Welcome to Wren")
        self.setModal(False)
        self.engine = engine
        self.tasks = tasks
        self.data_folder = data_folder
        self.autostart = autostart or Autostart()
        self._model_loading = model_loading  # is the window loading a model right now?
        self.open_url = QDesktopServices.openUrl  # tests put a recorder here

        title = QLabel("Welcome to Wren")
        title.setObjectName("welcomeTitle")
        title.setStyleSheet("font-size: 20px; font-weight: 600;")
        intro = self._label(INTRO, "welcomeIntro")
        self.folder_label = self._label("", "welcomeDataFolder")
        self.folder_label.setText(f"Your conversations, memories, settings and models are kept here, readable "
                                  f"by you alone:<br><b>{html.escape(str(data_folder))}</b>")
        self.folder_button = QPushButton("Show folder")
        self.folder_button.setObjectName("welcomeShowFolder")
        self.folder_button.clicked.connect(lambda: self.open_url(QUrl.fromLocalFile(str(self.data_folder))))
        self.privacy_label = self._label(LOCAL_ONLY, "welcomePrivacy")
        self.model_label = self._label("", "welcomeModel")
        self.models_button = QPushButton("Open Models…")
        self.models_button.setObjectName("welcomeModelsButton")
        self.models_button.setToolTip("Download, import or choose the model that answers")
        self.models_button.clicked.connect(self._open_models)
        self.autostart_box = QCheckBox("Start Wren when I log in, in the tray")
        self.autostart_box.setObjectName("welcomeAutostart")
        self.autostart_note = self._label("", "welcomeAutostartNote")
        self.autostart_note.hide()
        self._sync_autostart()
        self.autostart_box.toggled.connect(self._autostart_toggled)
        self.close_button = QPushButton("Get started")
        self.close_button.setObjectName("welcomeClose")
        self.close_button.setDefault(True)
        self.close_button.clicked.connect(self.accept)

        folder_row = QHBoxLayout()
        folder_row.addWidget(self.folder_label, 1)
        folder_row.addWidget(self.folder_button, 0, Qt.AlignmentFlag.AlignBottom)
        model_row = QHBoxLayout()
        model_row.addWidget(self.model_label, 1)
        model_row.addWidget(self.models_button, 0, Qt.AlignmentFlag.AlignVCenter)
        buttons = QHBoxLayout()
        buttons.addWidget(self.autostart_box)
        buttons.addStretch(1)
        buttons.addWidget(self.close_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(24, 20, 24, 18)
        layout.setSpacing(14)
        layout.addWidget(title)
        layout.addWidget(intro)
        layout.addLayout(folder_row)
        layout.addWidget(self.privacy_label)
        layout.addLayout(model_row)
        layout.addWidget(self.autostart_note)
        layout.addLayout(buttons)
        for button in (self.folder_button, self.models_button, self.close_button):
            button.setMinimumWidth(button.sizeHint().width() + 8)  # a wrapped label beside it must not squeeze it
        self.close_button.setFocus()
        self.setMinimumWidth(560)
        self.resize(600, 0)

    @staticmethod
    def _label(text: str, name: str) -> QLabel:
        label = QLabel(text)
        label.setObjectName(name)
        label.setWordWrap(True)
        label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        return label

    # -- what it says ------------------------------------------------------------------

    async def refresh(self) -> None:
        """The model that answers and the remote providers, as they are now."""
        providers = [p.name for p in await self.engine.providers.list()]
        if providers:
            names = ", ".join(providers)
            self.privacy_label.setText(
                f"Nothing leaves this computer, except what you send to the models of the remote "
                f"provider{'s' if len(providers) > 1 else ''} you added ({names}). No account, no telemetry.")
        else:
            self.privacy_label.setText(LOCAL_ONLY)
        self.model_label.setText(await self._model_text())
        self._fit()

    def _fit(self) -> None:
        """Tall enough for its wrapped text at its width (the text changes after it is built)."""
        layout = self.layout()
        if layout is None:
            return
        needed = layout.totalHeightForWidth(self.width()) if layout.hasHeightForWidth() else layout.sizeHint().height()
        if needed > self.height():
            self.resize(self.width(), needed)

    async def _model_text(self) -> str:
        current = self.engine.models.current
        if current is not None:
            return (f"The model answering is <b>{html.escape(current.name)}</b> ({html.escape(current.backend)}). "
                    "Larger models answer better; the Models page has more.")
        name = await self.engine.models.default()
        installed = {m.name for m in await self.engine.models.installed()}
        if name == STARTER_MODEL and name not in installed:
            what = (f"Wren sets up its small starter model, <b>{STARTER_MODEL}</b>, which comes with it; "
                    "nothing is downloaded.")
        else:
            what = f"Wren uses <b>{html.escape(name)}</b>."
        if self._model_loading():
            return f"{what} It is loading now. Larger models answer better; the Models page has more."
        return f"{what} No model is loaded yet: the Models page lets you choose one."

    def model_changed(self) -> None:
        """The window loaded (or failed to load) a model: say what answers now."""
        if self.isVisible():
            self.tasks.run(self.refresh(), what="updating the welcome")

    # -- actions -----------------------------------------------------------------------

    def _open_models(self) -> None:
        self.models_requested.emit()
        self.accept()

    def _sync_autostart(self) -> None:
        self.autostart_box.blockSignals(True)
        self.autostart_box.setChecked(self.autostart.enabled())
        self.autostart_box.blockSignals(False)
        self.autostart_box.setVisible(self.autostart.supported)
        self.autostart_box.setToolTip(str(self.autostart.path) if self.autostart.path else self.autostart.why_not)

    def _autostart_toggled(self, on: bool) -> None:
        try:
            self.autostart.set_enabled(on)
        except (OSError, RuntimeError) as exc:
            self.autostart_note.setText(f"Wren could not {'add' if on else 'remove'} its login item: {exc}")
            self.autostart_note.show()
            self._sync_autostart()
            return
        self.autostart_note.hide()

    def showEvent(self, event) -> None:
        self._sync_autostart()  # changed elsewhere since (by hand, or another Wren)
        self._fit()
        super().showEvent(event)
