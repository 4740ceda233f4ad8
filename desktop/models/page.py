"""The Models page: installed models (make default, delete, import a file) and the catalog of
models Wren can download, each with whether it fits this computer's memory.

Every change takes effect at once (there is no Save): `changed` tells the window to refresh
its model picker, `default_changed` that another model should answer from now on.
"""

from __future__ import annotations

import asyncio
import errno
import threading
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from wren.engine.api import Engine
from wren.engine.errors import WrenError
from wren.engine.models import DownloadCancelled

from ..bridge import Tasks
from ..confirm import ask_first
from ..settings.importer import import_model
from .rows import CatalogRow, DownloadState, InstalledRow, human_size

STYLE = """
#modelsHeading { font-size: 15px; font-weight: 600; padding-top: 6px; }
#modelsNote, #modelRowDetails, #modelGpuFit, #downloadProgressText, #importStatus { color: palette(placeholder-text); }
#installedModelRow, #catalogModelRow { border: 1px solid palette(mid); border-radius: 8px; }
#modelRowTitle { font-weight: 600; }
#defaultMarker { background: palette(highlight); color: palette(highlighted-text); border-radius: 4px;
                 padding: 0 6px; font-size: 11px; }
#fitBadge { border-radius: 4px; padding: 0 6px; font-size: 11px; background: rgba(46, 160, 67, 45); }
#fitBadge[fits="false"] { background: rgba(230, 160, 0, 55); }
#downloadError, #modelsError, #modelProblem { color: #d64545; }
"""


def relay_progress(callback: Callable[[int, int], None]) -> Callable[[int, int], None]:
    """A progress callback for a worker thread. Reports are coalesced: at most one waits on
    the GUI thread at a time and it shows the newest figures, so a download that reports
    every chunk neither floods the loop nor leaves the bar behind."""
    loop = asyncio.get_running_loop()
    latest: list[tuple[int, int]] = []
    pending = threading.Event()

    def show() -> None:
        pending.clear()
        callback(*latest[-1])

    def report(done: int, total: int) -> None:
        latest[:] = [(done, total)]
        if not pending.is_set():
            pending.set()
            loop.call_soon_threadsafe(show)

    return report


def plain_reason(exc: BaseException) -> str:
    """What went wrong, in words a person can act on."""
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return "There is not enough free disk space. Free some space, then try again."
    if isinstance(exc, (ConnectionError, TimeoutError)) or type(exc).__module__.split(".")[0] in ("urllib", "http"):
        return "Wren could not reach Hugging Face. Check the internet connection, then try again."
    reason = (str(exc) or type(exc).__name__).rstrip(".")
    return reason[:1].upper() + reason[1:] + "."


def _heading(text: str) -> QLabel:
    label = QLabel(text)
    label.setObjectName("modelsHeading")
    return label


class ModelsPage(QWidget):
    changed = Signal()  # installed models or the default changed: refresh model pickers
    default_changed = Signal(str)  # the model that should answer from now on

    def __init__(self, engine: Engine, tasks: Tasks, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("modelsPage")
        self.setAccessibleName("Models")
        self.setStyleSheet(STYLE)
        self.engine = engine
        self.tasks = tasks
        self.installed_rows: dict[str, InstalledRow] = {}
        self.catalog_rows: dict[str, CatalogRow] = {}
        self.downloads: dict[str, threading.Event] = {}
        self.confirm_box: QMessageBox | None = None

        self.import_button = QPushButton("Import a file…")
        self.import_button.setObjectName("importModelFileButton")
        self.import_button.setAccessibleName("Import a GGUF model file")
        self.import_button.clicked.connect(self._pick_file)
        self.import_progress = QProgressBar()
        self.import_progress.setObjectName("importProgress")
        self.import_progress.setAccessibleName("Import progress")
        self.import_progress.hide()
        self.import_status = QLabel()
        self.import_status.setObjectName("importStatus")
        self.import_status.setWordWrap(True)
        self._status_model: str | None = None  # the model import_status speaks of
        self.error_label = QLabel()
        self.error_label.setObjectName("modelsError")
        self.error_label.setWordWrap(True)
        self.error_label.hide()
        self.installed_box = QVBoxLayout()
        self.installed_box.setSpacing(6)
        self.memory_note = QLabel()
        self.memory_note.setObjectName("modelsNote")
        self.memory_note.setWordWrap(True)
        self.catalog_box = QVBoxLayout()
        self.catalog_box.setSpacing(6)

        top = QHBoxLayout()
        top.addWidget(_heading("Installed models"), 1)
        top.addWidget(self.import_button)
        content = QWidget()
        content.setObjectName("modelsContent")
        column = QVBoxLayout(content)
        column.addLayout(top)
        column.addWidget(self.error_label)
        column.addLayout(self.installed_box)
        column.addWidget(self.import_progress)
        column.addWidget(self.import_status)
        column.addSpacing(8)
        column.addWidget(_heading("Download a model"))
        column.addWidget(self.memory_note)
        column.addLayout(self.catalog_box)
        self.sections = QVBoxLayout()  # what other parts of the window add (the voice models)
        column.addLayout(self.sections)
        column.addStretch(1)
        self.scroll_area = QScrollArea()
        self.scroll_area.setObjectName("modelsScroll")
        self.scroll_area.setAccessibleName("Models list")  # a Tab stop: a reader must say what it is
        self.scroll_area.setWidgetResizable(True)
        self.scroll_area.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll_area.setWidget(content)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.scroll_area)

    # -- filling --------------------------------------------------------------------

    async def load(self) -> None:
        await self.refresh_installed()
        await self.refresh_catalog()
        for i in range(self.sections.count()):
            item = self.sections.itemAt(i)
            section = item.widget() if item is not None else None
            if section is not None and hasattr(section, "refresh"):
                section.refresh()

    def add_section(self, section: QWidget) -> None:
        """A further section under the catalog, refreshed whenever the page loads."""
        self.sections.addWidget(section)

    async def refresh_installed(self) -> None:
        models = await self.engine.models.installed()
        default = await self.engine.models.default()
        gpu = await self.engine.models.gpu_plans(models)
        current = self.engine.models.current
        for row in self.installed_rows.values():
            row.setParent(None)
            row.deleteLater()
        self.installed_rows.clear()
        for info in models:
            row = InstalledRow(info, is_default=info.name == default, gpu=gpu.get(info.name),
                               in_use=current is not None and current.name == info.name)
            row.default_requested.connect(self.request_default)
            row.delete_requested.connect(self.confirm_delete)
            self.installed_box.addWidget(row)
            self.installed_rows[info.name] = row
        if self._status_model is not None and self._status_model not in self.installed_rows:
            self._say_about(None, "")  # "Imported X" is no longer true once X is gone
        if not models:
            self.import_status.setText("No models are installed yet: download one below or import a GGUF file.")
        self._order_tabs()

    async def refresh_catalog(self) -> None:
        entries = await self.engine.models.catalog()
        total = self.engine.models.system_memory_bytes()
        self.memory_note.setText(
            f"This computer has {human_size(total)} of memory. “RAM needed” counts the model and "
            "a 4,096-token conversation." if total else
            "Wren could not tell how much memory this computer has; the memory badges assume too little.")
        for entry in entries:
            row = self.catalog_rows.get(entry.id)
            if row is None:
                row = CatalogRow(entry)
                row.download_requested.connect(self.start_download)
                row.cancel_requested.connect(self.cancel_download)
                self.catalog_box.addWidget(row)
                self.catalog_rows[entry.id] = row
            else:
                row.set_entry(entry)
        self._order_tabs()

    def _order_tabs(self) -> None:
        """Tab goes through the page top to bottom: import, each installed model's buttons,
        then each catalog model's buttons."""
        chain: list[QWidget] = [self.import_button]
        for row in self.installed_rows.values():
            chain += [row.default_button, row.delete_button]
        for entry in self.catalog_rows.values():
            chain += [entry.download_button, entry.cancel_button]
        for first, second in zip(chain, chain[1:]):
            QWidget.setTabOrder(first, second)

    def _said(self, text: str) -> None:
        self.error_label.setText(text)
        self.error_label.setVisible(bool(text))

    # -- downloads ------------------------------------------------------------------

    def start_download(self, entry_id: str):
        if entry_id in self.downloads:
            return None
        self.catalog_rows[entry_id].started()  # at once: the button becomes Cancel
        return self.tasks.run(self.download(entry_id), what="downloading the model")

    def cancel_download(self, entry_id: str) -> None:
        cancel = self.downloads.get(entry_id)
        if cancel is not None:
            cancel.set()

    async def download(self, entry_id: str):
        """Download and install a catalog model; a cancel leaves it resumable."""
        row = self.catalog_rows[entry_id]
        cancel = threading.Event()
        self.downloads[entry_id] = cancel
        row.started()
        try:
            info = await self.engine.models.pull(row.entry.spec, progress=relay_progress(row.set_progress),
                                                cancel=cancel)
        except DownloadCancelled:
            row.paused()
            return None
        except Exception as exc:
            if cancel.is_set():
                row.paused()
            else:
                row.failed(plain_reason(exc))
            return None
        finally:
            self.downloads.pop(entry_id, None)
        row.set_progress(info.size_bytes, info.size_bytes)
        self._say_about(info.name, f"Installed “{info.name}”. Make it the default to chat with it.")
        await self._changed()
        return info

    # -- installed models -------------------------------------------------------------

    def request_default(self, name: str) -> None:
        self.tasks.run(self.make_default(name), what="changing the default model")

    async def make_default(self, name: str) -> bool:
        try:
            await self.engine.models.set_default(name)
        except WrenError as exc:
            self._said(plain_reason(exc))
            return False
        self._said("")
        await self.refresh_installed()
        self.changed.emit()
        self.default_changed.emit(name)
        return True

    def confirm_delete(self, name: str) -> QMessageBox:
        self.confirm_box = ask_first(
            self, f"Delete {name}?",
            f"“{name}” will be removed from this computer. Downloading or importing it again brings it back.",
            yes="Delete", name="deleteModelConfirm",
            on_yes=lambda: self.tasks.run(self.delete(name), what="deleting the model"))
        return self.confirm_box

    async def delete(self, name: str) -> bool:
        try:
            await self.engine.models.remove(name)
        except WrenError as exc:
            self._said(plain_reason(exc))
            return False
        self._said("")
        await self._changed()
        return True

    async def _changed(self) -> None:
        await self.load()
        self.changed.emit()

    # -- import -----------------------------------------------------------------------

    def _pick_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Import a GGUF model", str(Path.home()), "GGUF models (*.gguf)")
        if path:
            self.tasks.run(self.import_from(Path(path)), what="importing the model")

    async def import_from(self, path: Path):
        self.import_button.setEnabled(False)
        self.import_progress.setRange(0, 0)
        self.import_progress.show()
        self.import_status.setText(f"Importing {path.name}…")
        try:
            info = await import_model(self.engine, path, self._import_progress)
        except Exception as exc:
            self.import_status.setText(f"Could not import {path.name}: {plain_reason(exc)}")
            return None
        finally:
            self.import_progress.hide()
            self.import_button.setEnabled(True)
        self._say_about(info.name, f"Imported “{info.name}”.")
        await self._changed()
        return info

    def _say_about(self, name: str | None, text: str) -> None:
        """The status line under Import, about the model `name` (cleared when it is deleted)."""
        self._status_model = name
        self.import_status.setText(text)

    def _import_progress(self, done: int, total: int) -> None:
        if total > 0:
            self.import_progress.setRange(0, 1000)
            self.import_progress.setValue(int(1000 * min(done, total) / total))

    def downloading(self) -> list[str]:
        """Catalog ids being downloaded now."""
        return [entry_id for entry_id, row in self.catalog_rows.items() if row.state is DownloadState.DOWNLOADING]
