"""Settings → About: Wren's version, where its data lives, the licences of Wren and of what
it is built on, and the licence of the model that answers."""

from __future__ import annotations

import html
from importlib import metadata

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QFormLayout, QLabel, QPushButton, QTextBrowser, QVBoxLayout, QWidget

from wren.engine import __version__
from wren.engine.api import Engine
from wren.engine.errors import WrenError
from wren.engine.paths import data_dir

WREN_LICENCE = "Apache-2.0"
# What Wren is built on and ships with (shown when installed).
COMPONENTS = (("PySide6", "PySide6_Essentials"), "qasync", "torch", "numpy", "tokenizers", "safetensors", "jinja2", "peewee",
              "huggingface_hub", "gguf", "httpx", "starlette", "uvicorn", "mcp", "keyring")


def package_licence(name: str | tuple[str, ...]) -> tuple[str, str] | None:
    """(version, licence) of an installed distribution (the first of several names that is
    installed), None if none is."""
    for candidate in (name,) if isinstance(name, str) else name:
        try:
            meta = metadata.metadata(candidate)
            break
        except metadata.PackageNotFoundError:
            continue
    else:
        return None
    licence = _field(meta, "License-Expression") or ""
    if not licence:
        raw = (_field(meta, "License") or "").strip()
        licence = raw if raw and "\n" not in raw and len(raw) < 60 else ""
    if not licence:
        classifiers = [c.split("::")[-1].strip() for c in meta.get_all("Classifier") or () if c.startswith("License ::")]
        licence = ", ".join(classifiers)
    return _field(meta, "Version") or "?", licence or "see the package"


def _field(meta: metadata.PackageMetadata, key: str) -> str | None:
    """A metadata field's first value, None when the package does not give it."""
    values = meta.get_all(key)
    return values[0] if values else None


NOT_RECORDED = "not recorded with the model; see where it came from"


class AboutPage(QWidget):
    def __init__(self, engine: Engine, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("aboutPage")
        self.engine = engine
        self.version_label = QLabel(f"Wren {__version__}")
        self.version_label.setObjectName("aboutVersion")
        self.version_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.folder_label = QLabel()
        self.folder_label.setObjectName("aboutDataFolder")
        self.folder_label.setWordWrap(True)
        self.folder_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.open_button = QPushButton("Open data folder")
        self.open_button.setObjectName("openDataFolderButton")
        self.open_button.clicked.connect(self.open_folder)
        self.model_label = QLabel()
        self.model_label.setObjectName("aboutModelLicence")
        self.model_label.setWordWrap(True)
        self.model_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.licences = QTextBrowser()
        self.licences.setObjectName("aboutLicences")
        self.licences.setAccessibleName("Licences")
        self.licences.setOpenExternalLinks(True)
        form = QFormLayout()
        form.addRow("Version", self.version_label)
        form.addRow("Data folder", self.folder_label)
        form.addRow("", self.open_button)
        form.addRow("Models' licences", self.model_label)  # the answering one first
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("Wren: a private assistant that runs on this computer."))
        layout.addLayout(form)
        layout.addWidget(QLabel("Licences:"))
        layout.addWidget(self.licences, 1)

    async def load(self) -> None:
        self.folder_label.setText(str(data_dir()))
        rows = [f"<tr><td><b>Wren</b></td><td>{html.escape(__version__)}</td><td>{WREN_LICENCE}</td></tr>"]
        for names in COMPONENTS:
            found = package_licence(names)
            if found is not None:
                version, licence = found
                name = names if isinstance(names, str) else names[0]
                rows.append(f"<tr><td>{html.escape(name)}</td><td>{html.escape(version)}</td>"
                            f"<td>{html.escape(licence)}</td></tr>")
        self.licences.setHtml("<table cellpadding='3'><tr><th align='left'>Component</th><th align='left'>Version</th>"
                              "<th align='left'>Licence</th></tr>" + "".join(rows) + "</table>")
        self.model_label.setText(await self._model_text())

    async def _model_text(self) -> str:
        """The answering (or chosen) model's licence first, then every other installed one's,
        as the engine reads them from each model's own files."""
        current = self.engine.models.current
        name = current.name if current is not None else await self.engine.models.default()  # the starter if unset
        try:
            licences = await self.engine.models.licences()
        except (OSError, WrenError):  # a models folder that cannot be read: say nothing wrong
            licences = {}
        lines = [f"{name}: {licences.get(name) or NOT_RECORDED}"]
        lines += [f"{other}: {licence}" for other, licence in licences.items() if other != name and licence]
        return "\n".join(lines)

    def open_folder(self) -> None:
        QDesktopServices.openUrl(QUrl.fromLocalFile(str(data_dir())))
