"""Settings → Privacy's network part: the offline lock's switch, what Wren connected to (the
network ledger, newest last) and the privacy report (engine.network)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtWidgets import (
    QCheckBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from wren.engine.api import Engine
from wren.engine.errors import WrenError

from ..bridge import Tasks

SHOWN_ENTRIES = 200  # the newest; the report holds them all
LOCK_TEXT = "Offline lock: refuse every connection beyond this computer"


class NetworkSection(QWidget):
    def __init__(self, engine: Engine, tasks: Tasks, parent: QWidget | None = None):
        super().__init__(parent)
        self.engine, self.tasks = engine, tasks
        self.choose_report_path: Callable[[], str] = self._ask_report_path  # swappable for tests
        self.lock_box = QCheckBox(LOCK_TEXT)
        self.lock_box.setObjectName("privacyOfflineLock")
        self.lock_box.setToolTip("Model downloads, remote providers and MCP servers beyond this computer are "
                                 "refused, and say so; also `wren privacy offline on|off` and WREN_OFFLINE=1")
        self.lock_box.toggled.connect(self._lock_toggled)
        self.lock_note = QLabel()
        self.lock_note.setObjectName("privacyLockNote")
        self.lock_note.setWordWrap(True)
        self.ledger_view = QPlainTextEdit()
        self.ledger_view.setObjectName("privacyLedger")
        self.ledger_view.setAccessibleName("Network ledger: every connection Wren opened or refused")
        self.ledger_view.setReadOnly(True)
        self.ledger_view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.setObjectName("privacyLedgerRefresh")
        self.refresh_button.clicked.connect(lambda: self.tasks.run(self.load(), what="reading the network ledger"))
        self.report_button = QPushButton("Save privacy report…")
        self.report_button.setObjectName("privacyReportButton")
        self.report_button.setToolTip("The ledger and the lock's state: JSON for a .json file, else readable text")
        self.report_button.clicked.connect(self._report_clicked)
        self.status = QLabel()
        self.status.setObjectName("privacyNetworkStatus")
        self.status.setWordWrap(True)
        buttons = QHBoxLayout()
        buttons.addWidget(self.refresh_button)
        buttons.addWidget(self.report_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.lock_box)
        layout.addWidget(self.lock_note)
        layout.addWidget(QLabel("What Wren connected to (newest last):"))
        layout.addWidget(self.ledger_view, 1)
        layout.addLayout(buttons)
        layout.addWidget(self.status)
        self._showing = False  # set while load() puts the stored state in the box: not a user's toggle

    async def load(self) -> None:
        state = await self.engine.network.lock_state()
        entries = await self.engine.network.entries()
        self._show_lock(state)
        lines = [self.engine.network.entry_line(e) for e in entries[-SHOWN_ENTRIES:]]
        self.ledger_view.setPlainText("\n".join(lines) or "No connections recorded.")
        self.ledger_view.verticalScrollBar().setValue(self.ledger_view.verticalScrollBar().maximum())

    def _show_lock(self, state) -> None:
        self._showing = True
        try:
            self.lock_box.setChecked(state.on)
        finally:
            self._showing = False
        managed = state.source == "environment"
        self.lock_box.setEnabled(not managed)  # WREN_OFFLINE keeps it on; Wren cannot turn that off
        note = "Off: Wren connects only where you ask it to (see below)."
        if state.on:
            note = ("On, set by WREN_OFFLINE=1 on this machine." if managed else "On.") + " " + \
                self.engine.network.children_note() + "."
        self.lock_note.setText(note)

    def _lock_toggled(self, on: bool) -> None:
        if not self._showing:
            self.tasks.run(self.set_offline(on), what="changing the offline lock")

    async def set_offline(self, on: bool) -> None:
        try:
            self._show_lock(await self.engine.network.set_offline(on))
        except WrenError as exc:
            self.status.setText(f"The offline lock was not changed: {exc}")
            self._show_lock(await self.engine.network.lock_state())
            return
        self.status.setText("The offline lock is on." if on else "The offline lock is off.")

    def _ask_report_path(self) -> str:
        path, _ = QFileDialog.getSaveFileName(self, "Save privacy report", str(Path.home() / "wren-privacy.txt"),
                                              "Text (*.txt);;JSON (*.json)")
        return path

    def _report_clicked(self) -> None:
        path = self.choose_report_path()
        if path:
            self.tasks.run(self.save_report(path), what="saving the privacy report")

    async def save_report(self, path: str | Path) -> Path | None:
        try:
            out = await self.engine.network.export_report(path)
        except (WrenError, OSError) as exc:
            self.status.setText(f"Nothing was saved: {exc}")
            return None
        self.status.setText(f"Saved the privacy report to {out}.")
        return out
