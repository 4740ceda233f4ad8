"""The Engine's model library: the installed models, importing, downloading and removing
them, the default, and the curated catalog with what fits this computer. Loading a model to
answer with is the Engine's own (engine/api.py)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import InvalidRequest, WrenError
from .logs import log_event
from .modelhub.catalog import CatalogEntry, load_catalog, system_memory_bytes, with_fit
from .modelhub.registry import RECORD_FILE, STARTER_NAME, ModelInfo, ModelRegistry, ModelSource

if TYPE_CHECKING:
    from .providers import RemoteModelInfo


class DownloadCancelled(WrenError):
    """A model download stopped by its cancel event; what was fetched is kept, and pulling
    the same model again resumes from there."""


class ModelLibrary:
    """Engine's model methods (a mixin: `registry`, `_status` and the settings are the Engine's)."""

    if TYPE_CHECKING:  # the Engine's (only declared here: a stub would shadow a later mixin's method)
        registry: ModelRegistry
        _status: Any  # the loaded model's ModelStatus, or None

        async def get_setting(self, key: str, default: Any = None) -> Any: ...
        async def set_setting(self, key: str, value: Any) -> None: ...
        async def remote_models(self) -> list[RemoteModelInfo]: ...

    async def list_models(self) -> list[ModelInfo | RemoteModelInfo]:
        """Installed models, importing the starter model first if this is a fresh install."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.registry.ensure_starter)
        local = await loop.run_in_executor(None, self.registry.list)
        return [*local, *await self.remote_models()]  # providers' models, "provider/model"

    async def installed_models(self) -> list[ModelInfo]:
        """Installed models as they are now (no first-run import)."""
        return await asyncio.get_running_loop().run_in_executor(None, self.registry.list)

    async def import_model(self, path: Path | str, *, name: str | None = None,
                           progress: Callable[[int, int], None] | None = None) -> ModelInfo:
        """Install a GGUF file (converted) or register a model folder; `progress(done, total)`
        is called from a worker thread."""
        path = Path(path)
        loop = asyncio.get_running_loop()
        if path.is_dir():
            return await loop.run_in_executor(None, lambda: self.registry.register_folder(path, name))
        return await loop.run_in_executor(None, lambda: self.registry.import_gguf(path, name, progress=progress))

    # -- model management (the Models page) ---------------------------------------

    async def pull_model(self, spec: str, *, quant: str | None = None, name: str | None = None,
                         progress: Callable[[int, int], None] | None = None,
                         cancel: threading.Event | None = None) -> ModelInfo:
        """Download a GGUF model from the Hugging Face hub and install it.

        `spec` is a catalog id (installed under that id unless `name` says otherwise) or what
        the hub resolver reads (a repository, optionally with a file or quantization).
        `progress(done_bytes, total_bytes)` is called from a worker thread. Setting `cancel`
        stops the download and raises DownloadCancelled; the partial file is kept and the
        next pull of the same model resumes it. Cancelling the awaiting task does the same."""
        from .modelhub import pull as hub  # the hub client is imported only when used

        entry = next((e for e in load_catalog() if e.id == spec), None)
        if entry is not None:
            name = name or entry.id
        cancel = cancel if cancel is not None else threading.Event()

        def work() -> ModelInfo:
            plan = _catalog_plan(hub, entry) if entry is not None else (
                hub.resolve(spec) if quant is None else hub.resolve(spec, quant))
            return hub.pull(self.registry, plan, name=name, progress=progress, cancel=cancel)

        try:
            info = await asyncio.get_running_loop().run_in_executor(None, work)
        except asyncio.CancelledError:
            cancel.set()
            raise
        except Exception as exc:
            if cancel.is_set():
                raise DownloadCancelled(f"the download of {spec} was cancelled; pull it again to resume") from exc
            raise
        log_event("model.pulled", model=info.name, size_bytes=info.size_bytes)
        return info

    async def remove_model(self, name: str) -> None:
        """Delete an installed model. The model answering now is refused (switch to another
        first); if it was the default, the default goes back to the starter model. The starter
        model can be removed too: it is imported again from its bundled file the next time
        Wren needs it (no model chosen, or `list_models`)."""
        current = self._status
        if current is not None and current.name == name:
            raise InvalidRequest(f"“{name}” is the model answering now; choose another model before removing it")
        await asyncio.get_running_loop().run_in_executor(None, self.registry.remove, name)
        if await self.get_setting("model") == name:
            await self.set_setting("model", None)
        log_event("model.removed", model=name)

    async def set_default_model(self, name: str) -> ModelInfo:
        """The model Wren loads at start and for new chats (the "model" setting); it must be
        installed. Loading it now is the caller's choice (`load_model`)."""
        info = await asyncio.get_running_loop().run_in_executor(None, self.registry.get, name)
        await self.set_setting("model", info.name)
        return info

    async def default_model(self) -> str:
        """The name of the model Wren loads by default."""
        return await self.get_setting("model") or STARTER_NAME

    async def model_catalog(self) -> list[CatalogEntry]:
        """The curated models Wren offers, each with whether it fits this computer's memory
        and whether it is installed already."""
        total = self.system_memory_bytes()
        entries, installed, origins = await asyncio.get_running_loop().run_in_executor(None, self._catalog_state)
        return [with_fit(e, total, e.id in installed or e.file in origins) for e in entries]

    def _catalog_state(self) -> tuple[list[CatalogEntry], set[str], set[str]]:
        names, origins = set(), set()
        for info in self.registry.list():
            names.add(info.name)
            if info.source is ModelSource.GGUF:
                try:
                    origin = json.loads((self.registry.root / info.name / RECORD_FILE).read_text("utf-8")).get("origin")
                except (OSError, ValueError, AttributeError):
                    origin = None
                if isinstance(origin, str):  # a download's path, or hf://REPO/FILE
                    origins.add(Path(origin).name)
        return load_catalog(), names, origins

    def system_memory_bytes(self) -> int:
        """This computer's physical memory (0 when the system does not say)."""
        return system_memory_bytes()


def _catalog_plan(hub: Any, entry: CatalogEntry) -> Any:
    """The download plan for a catalog entry: its own file, whatever the resolver's default."""
    return hub.resolve(f"{entry.repo}:{entry.file}")
