"""Loading models in the background, the window's model picker, and load failures."""

from __future__ import annotations

import logging

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QMessageBox, QWidget

from wren.engine.api import Engine

from .seams import ModelPicker, ReadyLine, StatusLine, TaskRunner, UsageMeter

log = logging.getLogger(__name__)


async def installed_models(engine: Engine) -> list:
    """The installed models, without engine.models.list' first-run starter import (a
    multi-second conversion that loading the model already does, in the background)."""
    return await engine.models.installed()


class ModelController(QObject):
    loading = Signal()
    loaded = Signal(object)  # engine.records.ModelStatus
    load_failed = Signal(str)  # what the dialog says
    listed = Signal(list)  # names of the installed models

    def __init__(self, engine: Engine, *, picker: ModelPicker, composer: ReadyLine, status: StatusLine,
                 counter: UsageMeter, tasks: TaskRunner, parent: QWidget):
        """Given the header's model picker, the composer's ready state, the status bar, the token
        counter and the task runner (desktop/window/seams.py); a load failure's dialog opens
        over `parent`."""
        super().__init__(parent)
        self.engine = engine
        self.picker = picker
        self.composer = composer
        self.status = status
        self.counter = counter
        self.tasks = tasks
        self.error_dialog: QMessageBox | None = None
        self.is_loading = False
        self._filling = False
        picker.activated.connect(self._picked)

    async def refresh(self) -> list[str]:
        models = await installed_models(self.engine)
        names = [m.name for m in models]
        names += [m.name for m in await self.engine.providers.models()]  # "provider/model", beside local ones
        self._fill(names)
        self.listed.emit(names)
        return names

    def _fill(self, names: list[str]) -> None:
        self._filling = True
        try:
            self.picker.clear()
            self.picker.addItems(names)
            current = self.engine.models.current
            if current is not None and current.name in names:
                self.picker.setCurrentIndex(names.index(current.name))
            else:
                self.picker.setCurrentIndex(-1)
                self.picker.setPlaceholderText("Choose a model")
        finally:
            self._filling = False

    def _picked(self, index: int) -> None:
        name = self.picker.itemText(index)
        current = self.engine.models.current
        if self._filling or not name or (current is not None and current.name == name):
            return
        self.tasks.run(self._choose(name), what="loading the model")

    async def _choose(self, name: str) -> None:
        await self.engine.settings.set("model", name)
        await self.load(name)

    def load_in_background(self, name: str | None = None, backend: str | None = None) -> None:
        self.tasks.run(self.load(name, backend), what="loading the model")

    async def load(self, name: str | None = None, backend: str | None = None) -> bool:
        """Load a model while the window stays usable; on failure, say which file and why."""
        shown = name or await self.engine.settings.get("model") or "the starter model"
        self.is_loading = True
        self.loading.emit()
        # said once, in the line above the message box; the status bar shows the name beside its
        # busy bar, and the last answer's speed and context are not this model's
        self.composer.set_ready(False, f"Loading {shown}… Wren answers as soon as it is ready.")
        self.status.show_loading(shown)
        self.status.show_speed(None, None)
        self.status.show_context(None)
        self.counter.set_model(None, 0)
        try:
            status = await self.engine.models.load(name, backend=backend)
        except Exception as exc:
            self.is_loading = False
            await self._failed(name or await self.engine.settings.get("model"), exc)
            return False
        self.is_loading = False
        log.info("loaded %s on %s in %.1f s", status.name, status.backend, status.load_seconds)
        self.status.show_model(status.name, status.backend, status.context_length)
        self.composer.set_ready(True)
        self.counter.set_model(self.engine.models.count_tokens, status.context_length)
        try:
            await self.refresh()
        except Exception:  # the list is a convenience; the model itself is ready
            self._fill([status.name])
        self.loaded.emit(status)
        return True

    async def _failed(self, name: str | None, exc: BaseException) -> None:
        path = await self._path_of(name)
        reason = (str(exc) or type(exc).__name__).rstrip(".")
        log.warning("could not load %s (%s): %s", name, path, reason)
        self.status.show_model(None, None, 0)
        self.status.showMessage(f"The model could not be loaded: {reason}", 15000)
        self.composer.set_ready(
            False, f"No model loaded: {reason}. Choose another model in Settings (Ctrl+,)."
        )
        text = f"Wren could not load the model “{name or 'starter model'}”."
        details = f"File: {path or 'unknown'}\nReason: {reason}"
        if self.error_dialog is not None:
            self.error_dialog.close()
        parent = self.parent()
        dialog = QMessageBox(QMessageBox.Icon.Warning, "Model failed to load", text, QMessageBox.StandardButton.Ok,
                             parent if isinstance(parent, QWidget) else None)
        dialog.setObjectName("modelErrorDialog")
        dialog.setInformativeText(details)
        dialog.setAccessibleName("Model failed to load")
        # open(), not exec(): a nested loop here would hold up every other coroutine.
        dialog.open()
        self.error_dialog = dialog
        self.load_failed.emit(f"{text}\n{details}")

    async def _path_of(self, name: str | None) -> str | None:
        try:
            models = await installed_models(self.engine)
        except Exception:
            return None
        for info in models:
            if name is None or info.name == name:
                return str(getattr(info, "path", "") or "") or None
        return None
