"""The models service (`engine.models`): the installed models, importing, downloading and
removing them, the default, the curated catalog with what fits this computer, loading one
to answer with, its tokens, and the background check of its weights."""

from __future__ import annotations

import asyncio
import builtins
import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import InvalidRequest, ModelNotFound, ModelNotLoaded, WrenError
from .inference.placement import GpuPlan, gpu_budget, gpu_layers_from_env, plan_for_folder
from .inference.speculative import DEFAULT_DRAFTER, DRAFT_MODELS_KEY, DRAFTER_KEY
from .inference.worker import ModelWorker
from .logs import log_event
from .modelhub.catalog import CatalogEntry, load_catalog, system_memory_bytes, with_fit
from .modelhub.registry import RECORD_FILE, STARTER_NAME, ModelInfo, ModelSource, WeightCheck
from .records import EngineNotice, ModelStatus, ThinkingSupport
from .token_view import TokenPiece, pieces

if TYPE_CHECKING:
    from .core import Core
    from .providers import RemoteModelInfo
    from .providers.facade import Providers
    from .settings import Settings
    from .tokenize import Tokenizer

log = logging.getLogger(__name__)


class DownloadCancelled(WrenError):
    """A model download stopped by its cancel event; what was fetched is kept, and pulling
    the same model again resumes from there."""


class Models:
    """`engine.models`: the installed models, importing, downloading and removing them, the
    default, the curated catalog with what fits this computer, and loading one to answer
    with (the loaded model itself is the engine core's session)."""

    def __init__(self, core: Core, settings: Settings, providers: Providers):
        self.e = core
        self.settings = settings
        self.providers = providers
        self._weight_check: tuple[threading.Event, Any] | None = None
        self._tokenizers: dict[Path, Tokenizer] = {}  # the last tokenizer loaded without its model

    async def list(self) -> builtins.list[ModelInfo | RemoteModelInfo]:
        """Installed models, importing the starter model first if this is a fresh install."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.e.registry.ensure_starter)
        local = await loop.run_in_executor(None, self.e.registry.list)
        return [*local, *await self.providers.models()]  # providers' models, "provider/model"

    async def installed(self) -> builtins.list[ModelInfo]:
        """Installed models as they are now (no first-run import)."""
        return await asyncio.get_running_loop().run_in_executor(None, self.e.registry.list)

    async def import_model(self, path: Path | str, *, name: str | None = None,
                           progress: Callable[[int, int], None] | None = None) -> ModelInfo:
        """Install a GGUF file (converted) or register a model folder; `progress(done, total)`
        is called from a worker thread."""
        path = Path(path)
        loop = asyncio.get_running_loop()
        if path.is_dir():
            return await loop.run_in_executor(None, lambda: self.e.registry.register_folder(path, name))
        return await loop.run_in_executor(None, lambda: self.e.registry.import_gguf(path, name, progress=progress))

    # -- model management (the Models page) ---------------------------------------

    async def pull(self, spec: str, *, quant: str | None = None, name: str | None = None,
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
            return hub.pull(self.e.registry, plan, name=name, progress=progress, cancel=cancel)

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

    async def remove(self, name: str) -> None:
        """Delete an installed model. The model answering now is refused (switch to another
        first); if it was the default, the default goes back to the starter model. The starter
        model can be removed too: it is imported again from its bundled file the next time
        Wren needs it (no model chosen, or `list_models`)."""
        current = self.e.model_status
        if current is not None and current.name == name:
            raise InvalidRequest(f"“{name}” is the model answering now; choose another model before removing it")
        remote = await self.remote_model_note(name)
        if remote is not None:
            raise InvalidRequest(remote)
        await asyncio.get_running_loop().run_in_executor(None, self.e.registry.remove, name)
        if await self.settings.get("model") == name:
            await self.settings.set("model", None)
        log_event("model.removed", model=name)

    async def remote_model_note(self, name: str) -> str | None:
        """Why `name`, a provider's model ("provider/model"), cannot be removed as an installed
        one, and what removes it; None for any other name."""
        if "/" not in name or not any(m.name == name for m in await self.providers.models()):
            return None
        provider = name.partition("/")[0]
        return (f"“{name}” is a model of the provider {provider}, on its server, not installed here; "
                f"`wren providers rm {provider}` removes the provider")

    async def set_default(self, name: str) -> ModelInfo:
        """The model Wren loads at start and for new chats (the "model" setting); it must be
        installed. Loading it now is the caller's choice (`load_model`)."""
        info = await asyncio.get_running_loop().run_in_executor(None, self.e.registry.get, name)
        await self.settings.set("model", info.name)
        return info

    async def default(self) -> str:
        """The name of the model Wren loads by default."""
        return await self.settings.get("model") or STARTER_NAME

    async def catalog(self) -> builtins.list[CatalogEntry]:
        """The curated models Wren offers, each with whether it fits this computer's memory
        and whether it is installed already."""
        total = self.system_memory_bytes()
        entries, installed, origins = await asyncio.get_running_loop().run_in_executor(None, self._catalog_state)
        return [with_fit(e, total, e.id in installed or e.file in origins) for e in entries]

    async def licences(self) -> dict[str, str | None]:
        """Each installed model's licence as its own files (or, for the starter, its package)
        record it, else its catalog entry's; None where nothing says."""
        def work() -> dict[str, str | None]:
            from .modelhub.licence import model_licence

            by_id = {e.id: e.license for e in load_catalog()}
            return {info.name: model_licence(info) or by_id.get(info.name) for info in self.e.registry.list()}

        return await asyncio.get_running_loop().run_in_executor(None, work)

    def _catalog_state(self) -> tuple[builtins.list[CatalogEntry], set[str], set[str]]:
        names, origins = set(), set()
        for info in self.e.registry.list():
            names.add(info.name)
            if info.source is ModelSource.GGUF:
                try:
                    origin = json.loads((self.e.registry.root / info.name / RECORD_FILE).read_text("utf-8")).get("origin")
                except (OSError, ValueError, AttributeError):
                    origin = None
                if isinstance(origin, str):  # a download's path, or hf://REPO/FILE
                    origins.add(Path(origin).name)
        return load_catalog(), names, origins

    def system_memory_bytes(self) -> int:
        """This computer's physical memory (0 when the system does not say)."""
        return system_memory_bytes()

    async def gpu_plans(self, models: builtins.list[ModelInfo]) -> dict[str, GpuPlan]:
        """How each of `models` would sit on this computer's CUDA GPU (or on one of
        WREN_GPU_MEMORY's size): layers there, context its cache holds (engine.inference.
        placement); {} without a GPU. Models whose files cannot be planned are left out."""

        def work() -> dict[str, GpuPlan]:
            budget = gpu_budget()
            if budget is None:
                return {}
            plans = {}
            for info in models:
                try:
                    plans[info.name] = plan_for_folder(info.path, budget[1], budget[0],
                                                       gpu_layers=gpu_layers_from_env())
                except (WrenError, ValueError) as exc:
                    log.info("no GPU plan for %s: %s", info.name, exc)
            return plans

        return await asyncio.get_running_loop().run_in_executor(None, work)

    @property
    def current(self) -> ModelStatus | None:
        """The loaded model's name, backend, window and load time; None with none loaded."""
        return self.e.model_status

    async def load(self, name: str | None = None, *, backend: str | None = None, dtype: str = "auto",
                   progress: Callable[[int, int], None] | None = None) -> ModelStatus:
        """Load a model on its own inference thread; the previous one is unloaded.
        `progress(done, total)` reports the first-run starter import, from a worker thread."""
        async with self.e.load_lock:
            loop = asyncio.get_running_loop()
            if name is None:
                name = await self.settings.get("model")
            remote = await self.providers.load_remote(name)  # "provider/model": engine.providers
            if remote is not None:
                return remote
            if backend is None:
                backend = await self.settings.get("backend", "auto")
            if name is None or name == STARTER_NAME:
                info = await loop.run_in_executor(None, self.e.registry.ensure_starter, progress)
            else:
                info = await self._installed(name)
            chosen = self.e.backend_factory(backend)
            started = time.perf_counter()
            tokenizer = await loop.run_in_executor(None, self.e.tokenizer_factory, info.path)
            await self.e.unload_current()
            performance = await self.settings.performance()
            drafter, draft_dir = await self._drafter(info.name)
            worker = ModelWorker(info.name, chosen, info.path, tokenizer, dtype=dtype,
                                 cache_budget_bytes=performance.prefix_cache_mb * 2**20,
                                 slots=performance.parallel_sequences, drafter=drafter, draft_dir=draft_dir)
            try:
                model = await asyncio.wrap_future(worker.loaded)
            except BaseException:
                worker.close()
                raise
            status = ModelStatus(info.name, model.backend, model.context_length, time.perf_counter() - started)
            await self.e.install_model(worker, status, tokenizer)
            await self._stop_weight_check()
            self._start_weight_check(info.name)  # in the background: a damaged file is a notice
            log_event("model.loaded", model=info.name, backend=model.backend, load_seconds=round(status.load_seconds, 3))
            return status

    async def _drafter(self, name: str) -> tuple[str, Path | None]:
        """The drafter setting for speculative decoding and `name`'s draft model's folder
        (setting "draft_models"; None where none is set or it is not installed)."""
        drafter = await self.settings.get(DRAFTER_KEY) or DEFAULT_DRAFTER
        draft = (await self.settings.get(DRAFT_MODELS_KEY) or {}).get(name)
        if not draft or drafter in ("off", "prompt-lookup"):
            return drafter, None
        try:
            return drafter, (await self._installed(draft)).path
        except ModelNotFound as exc:
            log.warning("the draft model for %s is not there (%s): drafting by prompt lookup", name, exc)
            return ("auto" if drafter == "auto" else "prompt-lookup"), None

    async def _installed(self, name: str) -> ModelInfo:
        """The installed model `name`; not found, an error naming every model Wren could
        load instead: the installed ones, the starter (imported on first use) and the
        configured providers' remote models."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(None, self.e.registry.get, name)
        except ModelNotFound:
            local = [info.name for info in await loop.run_in_executor(None, self.e.registry.list)]
            if STARTER_NAME not in local:
                local.append(f"{STARTER_NAME} (the starter)")
            remote = [m.name for m in await self.providers.models()]
            choices = "; remote: ".join(filter(None, [", ".join(local), ", ".join(remote)]))
            raise ModelNotFound(f"no model named {name!r} is installed; you can use {choices} "
                                f"(`wren models` lists them; `wren models pull` or `import` adds one)") from None

    async def decode_mode(self, wait: bool = False) -> str | None:
        """How the loaded model decodes ("eager", "compiling", "compiled", "cuda-graph"; None
        with no model loaded or a backend that does not say). wait=True first waits for a
        background compile of the decode step to finish."""
        worker = self.e.loaded_worker
        model = worker.model if worker is not None else None
        if model is None:
            return None
        if wait:
            while model.decode_mode == "compiling":  # polled: a blocking wait would hold an executor thread
                await asyncio.sleep(0.05)
        return model.decode_mode

    def thinking(self) -> ThinkingSupport | None:
        """Whether the loaded model thinks apart from its answer, and the thinking choices
        (records.THINKING_CHOICES) its template takes for a chat's "thinking" setting;
        None with no model loaded."""
        from .turn.thinking import support_of

        worker = self.e.loaded_worker
        return None if worker is None else support_of(worker)

    async def unload(self) -> None:
        """Let the loaded model go (after a load in progress)."""
        await self.e.unload()

    async def ensure_loaded(self) -> ModelWorker:
        """The loaded model's worker, loading the default model first if none is."""
        if self.e.loaded_worker is None:
            await self.load()
        worker = self.e.loaded_worker
        assert worker is not None
        return worker

    async def count_tokens(self, text: str) -> int:
        """Exact token count with the loaded model's tokenizer (off the caller's thread)."""
        worker = self.e.loaded_worker
        if worker is None:
            raise ModelNotLoaded("no model is loaded yet; token counts need its tokenizer")
        return await asyncio.get_running_loop().run_in_executor(None, worker.tokenizer.count, text)

    async def tokens(self, text: str, model: str | None = None) -> builtins.list[TokenPiece]:
        """`text` as tokens of the loaded model (or `model`, else the default one). Loads
        only that model's tokenizer, never the model; runs off the caller's thread."""
        loop = asyncio.get_running_loop()
        tokenizer = await self.tokenizer_for(model)
        return await loop.run_in_executor(None, pieces, tokenizer, text)

    async def tokenizer_for(self, model: str | None) -> Tokenizer:
        """The loaded model's tokenizer for it (or for None), else `model`'s (the default one's), loading
        only the tokenizer; the starter is imported first on a fresh install."""
        worker = self.e.loaded_worker
        if worker is not None and (model is None or model == worker.name):
            return worker.tokenizer
        name = model or await self.default()
        loop = asyncio.get_running_loop()
        if name == STARTER_NAME and not await loop.run_in_executor(None, self._has_model, name):
            await loop.run_in_executor(None, self.e.registry.ensure_starter)  # first run: import it (no model load)
        info = await loop.run_in_executor(None, self.e.registry.get, name)
        return await self.tokenizer_of(info)

    async def tokenizer_of(self, info: ModelInfo) -> Tokenizer:
        """An installed model's tokenizer without the model (the last one loaded is kept)."""
        tokenizer = self._tokenizers.get(info.path)
        if tokenizer is None:
            tokenizer = await asyncio.get_running_loop().run_in_executor(None, self.e.tokenizer_factory, info.path)
            self._tokenizers = {info.path: tokenizer}
        return tokenizer

    @property
    def tokenizers_apart(self) -> builtins.list[Path]:
        """The model folders whose tokenizer is held without its model (the last one
        `tokenizer_of` loaded to count or show tokens; none while the loaded model's serves)."""
        return builtins.list(self._tokenizers)

    def _has_model(self, name: str) -> bool:
        return any(m.name == name for m in self.e.registry.list())

    async def weight_check(self) -> WeightCheck | None:
        """Wait for the background check of the loaded model's weights (None: none ran)."""
        check = self._weight_check
        if check is None:
            return None
        return await asyncio.wrap_future(check[1])

    def _start_weight_check(self, name: str) -> None:
        import concurrent.futures

        cancel = threading.Event()
        future: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            try:
                result = self.e.registry.verify_weights(name, cancel)
            except Exception as exc:  # a record that cannot be read: the load already said so
                result = WeightCheck(name, None, message=f"the weights of {name} could not be checked: {exc}")
            if result.ok is False:
                log_event("model.damaged", model=name, files=list(result.damaged))
                log.warning("%s", result.message)
                self.e.notify(EngineNotice("model_damaged", result.message, result.damaged[0] if result.damaged else None))
            future.set_result(result)

        # A plain daemon-less thread at its own pace; close() stops it within one 8 MB chunk.
        threading.Thread(target=run, name="wren-weight-check", daemon=True).start()
        self._weight_check = (cancel, future)

    async def close(self) -> None:
        """Stop the background weight check (Engine.close)."""
        await self._stop_weight_check()

    async def _stop_weight_check(self) -> None:
        check, self._weight_check = self._weight_check, None
        if check is not None:
            check[0].set()
            await asyncio.wrap_future(check[1])


def _catalog_plan(hub: Any, entry: CatalogEntry) -> Any:
    """The download plan for a catalog entry: its own file, whatever the resolver's default."""
    return hub.resolve(f"{entry.repo}:{entry.file}")
