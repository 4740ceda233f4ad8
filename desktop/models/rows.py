"""One row per installed model and per catalog model on the Models page."""

from __future__ import annotations

from enum import Enum
from typing import Protocol

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QProgressBar, QPushButton, QVBoxLayout, QWidget

from wren.engine.modelhub.catalog import CatalogEntry
from wren.engine.modelhub.registry import ModelInfo
from wren.engine.modelhub.sizing import human_size


def human_parameters(n: int) -> str:
    if n >= 10**9:
        return f"{n / 10**9:.1f}B parameters"
    if n >= 10**6:
        return f"{n / 10**6:,.0f}M parameters"
    return f"{n / 10**3:,.0f}K parameters"


def fit_text(entry: CatalogEntry) -> str:
    if entry.fits:
        return "Fits this computer"
    more = max(entry.shortfall_bytes / 10**9, 0.1)
    return f"Needs {more:.1f} GB more RAM"


class GpuFit(Protocol):
    """What the row shows of a model's GPU plan (engine.models.gpu_plans' values)."""

    device: str
    layers: int
    gpu_layers: int
    kv_context: int
    requested_context: int


def gpu_fit_text(plan: GpuFit) -> str:
    """How many of the model's layers the GPU holds, in a few words."""
    if plan.gpu_layers == 0:
        return "Too big for the GPU: runs on the CPU"
    if plan.gpu_layers == plan.layers:
        text = f"All {plan.layers} layers on the GPU"
    else:
        text = f"{plan.gpu_layers} of {plan.layers} layers on the GPU, the rest on the CPU"
    if plan.kv_context < plan.requested_context:
        text += f" ({plan.kv_context:,}-token context)"
    return text


class InstalledRow(QFrame):
    """An installed model: what it is, whether it is the default, Make default and Delete."""

    default_requested = Signal(str)
    delete_requested = Signal(str)

    def __init__(self, info: ModelInfo, *, is_default: bool, in_use: bool, gpu: GpuFit | None = None,
                 parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("installedModelRow")
        self.name = info.name
        self.is_default = is_default
        title = QLabel(info.name)
        title.setObjectName("modelRowTitle")
        self.marker = QLabel("default")
        self.marker.setObjectName("defaultMarker")
        self.marker.setAccessibleName(f"{info.name} is the default model")
        self.marker.setVisible(is_default)
        parts = [info.architecture, human_parameters(info.parameters) if info.parameters else "",
                 info.quantization or "", human_size(info.size_bytes) if info.size_bytes else ""]
        if in_use:
            parts.append("answering now")
        self.details = QLabel(" · ".join(p for p in parts if p))
        self.details.setObjectName("modelRowDetails")
        self.details.setToolTip(str(info.path))
        # a file it needs is gone (its registered folder moved, say): said, and it cannot be
        # made the default; Delete takes it off the list
        problem = getattr(info, "problem", None)
        self.problem_label = QLabel(f"Cannot load: {problem}" if problem else "")
        self.problem_label.setObjectName("modelProblem")
        self.problem_label.setWordWrap(True)
        self.problem_label.setVisible(bool(problem))
        # with a GPU: how many layers it holds (as llama.cpp's -ngl would place them)
        self.gpu_label = QLabel(gpu_fit_text(gpu) if gpu is not None else "")
        self.gpu_label.setObjectName("modelGpuFit")
        self.gpu_label.setVisible(gpu is not None)
        if gpu is not None:
            self.gpu_label.setToolTip(gpu.device)
            self.gpu_label.setAccessibleName(f"{info.name}: {gpu_fit_text(gpu)}")
        self.default_button = QPushButton("Make default")
        self.default_button.setObjectName("makeDefaultButton")
        self.default_button.setAccessibleName(f"Make {info.name} the default model")
        self.default_button.setEnabled(not is_default and not problem)
        self.delete_button = QPushButton("Delete")
        self.delete_button.setObjectName("deleteModelButton")
        self.delete_button.setAccessibleName(f"Delete {info.name}")
        if in_use:
            self.delete_button.setEnabled(False)
            self.delete_button.setToolTip("This model is answering now; choose another one before deleting it")
        self.default_button.clicked.connect(lambda: self.default_requested.emit(self.name))
        self.delete_button.clicked.connect(lambda: self.delete_requested.emit(self.name))

        heading = QHBoxLayout()
        heading.addWidget(title)
        heading.addWidget(self.marker)
        heading.addStretch(1)
        text = QVBoxLayout()
        text.addLayout(heading)
        text.addWidget(self.details)
        text.addWidget(self.problem_label)
        text.addWidget(self.gpu_label)
        row = QHBoxLayout(self)
        row.setContentsMargins(10, 6, 10, 6)
        row.addLayout(text, 1)
        row.addWidget(self.default_button)
        row.addWidget(self.delete_button)


class DownloadState(Enum):
    IDLE = "idle"
    DOWNLOADING = "downloading"
    PAUSED = "paused"  # cancelled: the part fetched is kept, Resume continues it
    FAILED = "failed"
    INSTALLED = "installed"


class CatalogRow(QFrame):
    """A catalog model: size, licence, memory needed and whether it fits; Download with a
    progress bar and Cancel; a cancelled download offers Resume; failures are said inline."""

    download_requested = Signal(str)
    cancel_requested = Signal(str)

    def __init__(self, entry: CatalogEntry, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("catalogModelRow")
        self.entry = entry
        self.state = DownloadState.IDLE
        self.title = QLabel(entry.name)
        self.title.setObjectName("modelRowTitle")
        self.badge = QLabel()
        self.badge.setObjectName("fitBadge")
        self.details = QLabel(" · ".join((
            human_size(entry.size_bytes), entry.quant, f"licence: {entry.license}",
            f"needs {human_size(entry.ram_bytes_4k)} RAM",
        )))
        self.details.setObjectName("modelRowDetails")
        self.details.setToolTip(f"{entry.repo} · {entry.file}" + (f"\n{entry.notes}" if entry.notes else ""))
        self.progress = QProgressBar()
        self.progress.setObjectName("downloadProgress")
        self.progress.setAccessibleName(f"Download progress of {entry.name}")
        self.progress.setRange(0, 1000)
        self.progress.setTextVisible(False)
        self.progress_label = QLabel()
        self.progress_label.setObjectName("downloadProgressText")
        self.error_label = QLabel()
        self.error_label.setObjectName("downloadError")
        self.error_label.setWordWrap(True)
        self.download_button = QPushButton("Download")
        self.download_button.setObjectName("downloadButton")
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setObjectName("cancelDownloadButton")
        self.cancel_button.setAccessibleName(f"Cancel the download of {entry.name}")
        self.download_button.clicked.connect(lambda: self.download_requested.emit(self.entry.id))
        self.cancel_button.clicked.connect(lambda: self.cancel_requested.emit(self.entry.id))

        heading = QHBoxLayout()
        heading.addWidget(self.title)
        heading.addWidget(self.badge)
        heading.addStretch(1)
        bar = QHBoxLayout()
        bar.addWidget(self.progress, 1)
        bar.addWidget(self.progress_label)
        text = QVBoxLayout()
        text.addLayout(heading)
        text.addWidget(self.details)
        text.addLayout(bar)
        text.addWidget(self.error_label)
        row = QHBoxLayout(self)
        row.setContentsMargins(10, 6, 10, 6)
        row.addLayout(text, 1)
        row.addWidget(self.download_button)
        row.addWidget(self.cancel_button)
        self.set_entry(entry)

    def set_entry(self, entry: CatalogEntry) -> None:
        """New figures for the same model (installed or not, memory badge)."""
        self.entry = entry
        self.badge.setText(fit_text(entry))
        self.badge.setProperty("fits", entry.fits)
        self.badge.setAccessibleName(fit_text(entry))
        self.badge.style().polish(self.badge)  # the colour follows the "fits" property
        if entry.installed:
            self._show(DownloadState.INSTALLED)
        elif self.state is DownloadState.INSTALLED:
            self._show(DownloadState.IDLE)  # removed since
        else:
            self._show(self.state)

    def started(self) -> None:
        self.error_label.clear()
        self.progress.setRange(0, 0)  # busy until the first report says how big it is
        self.progress_label.setText("Starting…")
        self._show(DownloadState.DOWNLOADING)

    def set_progress(self, done: int, total: int) -> None:
        if self.state is not DownloadState.DOWNLOADING:
            return
        if total > 0:
            self.progress.setRange(0, 1000)
            self.progress.setValue(int(1000 * min(done, total) / total))
            self.progress_label.setText(
                f"{human_size(done)} of {human_size(total)} ({100 * min(done, total) // total}%)")
        else:
            self.progress_label.setText(human_size(done))

    def paused(self) -> None:
        self.progress_label.setText(f"Paused at {self.progress_label.text().split(' of ')[0]}"
                                    if " of " in self.progress_label.text() else "Paused")
        self._show(DownloadState.PAUSED)

    def failed(self, reason: str) -> None:
        self.error_label.setText(reason)
        self._show(DownloadState.FAILED)

    def _show(self, state: DownloadState) -> None:
        self.state = state
        name = self.entry.name
        busy = state is DownloadState.DOWNLOADING
        self.progress.setVisible(busy or state is DownloadState.PAUSED)
        self.progress_label.setVisible(busy or state is DownloadState.PAUSED)
        self.error_label.setVisible(state is DownloadState.FAILED and bool(self.error_label.text()))
        self.cancel_button.setVisible(busy)
        self.download_button.setVisible(not busy)
        self.download_button.setEnabled(state is not DownloadState.INSTALLED)
        label, accessible = {
            DownloadState.IDLE: ("Download", f"Download {name}"),
            DownloadState.PAUSED: ("Resume", f"Resume the download of {name}"),
            DownloadState.FAILED: ("Try again", f"Try downloading {name} again"),
            DownloadState.INSTALLED: ("Installed", f"{name} is installed"),
            DownloadState.DOWNLOADING: ("Download", f"Download {name}"),
        }[state]
        self.download_button.setText(label)
        self.download_button.setAccessibleName(accessible)
