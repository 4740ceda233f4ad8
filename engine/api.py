"""Engine: the one facade the desktop window, the CLI and the tests use."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import paths

# Plain types and constants the desktop uses, re-exported so that desktop/ imports the
# engine through this module alone (tests/test_import_contract.py).
from .context import ContextAssembler, ContextReport, MemorySummaries, SummaryStore, report_from_meta
from .context import ContextOverflow as ContextOverflow
from .context import ContextPart as ContextPart
from .context import ContextSettings as ContextSettings
from .context import Instructions as Instructions
from .context import PartKind as PartKind
from .context import PartState as PartState
from .crashreport import (  # noqa: F401  re-exported for the desktop (its crash hooks and notice)
    CrashReport,
    asyncio_exception_handler,
    crash_reports_dir,
    install_crash_hooks,
    mark_crash_reports_seen,
    pending_crash_reports,
    write_crash_report,
)
from .errors import InvalidRequest, ModelNotLoaded, WrenError
from .events import Event, Finished, FinishReason
from .ghost import CHAT_SAMPLING_PRESETS, GhostText, Suggestion  # noqa: F401  re-exported for the desktop
from .ghost import ENABLED_KEY as GHOST_ENABLED_KEY  # noqa: F401  re-exported for the desktop
from .ghost import TEMPORARY_ENABLED_KEY as GHOST_TEMPORARY_KEY  # noqa: F401  re-exported for the desktop
from .inference.backend import Backend
from .inference.constrain import Constraint
from .inference.presets import (  # noqa: F401  PRESET_FIELDS: re-exported for the desktop
    PRESET_FIELDS,
    PRESETS_KEY,
    check_layer,
    check_presets,
    model_defaults,
    resolve,
)
from .inference.sampling import SamplingParams
from .inference.select import BACKEND_NAMES, resolve_backend  # noqa: F401  BACKEND_NAMES: re-exported for the desktop
from .inference.worker import GenerationRequest, ModelWorker, WarmRequest
from .logs import log_event
from .memory import MAX_MEMORY_CHARS as MAX_MEMORY_CHARS
from .memory import TEMPORARY_KEY, MemoryService
from .memory import MemoryInfo as MemoryInfo
from .memory import MemoryRefused as MemoryRefused
from .memory import MemorySettings as MemorySettings
from .memory.facade import MemoryEmbeddings
from .model_library import DownloadCancelled as DownloadCancelled
from .model_library import ModelLibrary
from .modelhub.catalog import CatalogEntry as CatalogEntry
from .modelhub.registry import STARTER_NAME, ModelRegistry, SweepReport, WeightCheck
from .modelhub.registry import ModelInfo as ModelInfo
from .paths import data_dir as data_dir
from .preferences import Preferences
from .privacy import EraseReport, Privacy, purge_conversations  # noqa: F401  EraseReport: re-exported for the desktop
from .providers import KEY_STORES, KeyStoreError, ProviderInfo, RemoteModelInfo  # noqa: F401  re-exported for the desktop
from .providers.facade import ProviderCheck, Providers  # noqa: F401  ProviderCheck: re-exported
from .records import ORIGIN_KEY as ORIGIN_KEY
from .records import TERMINAL_ORIGIN as TERMINAL_ORIGIN
from .records import ConversationInfo, EngineNotice, MessageInfo, Role, check_unicode, clean_title
from .safety import Finding as Finding
from .safety import Policy, ScanResult, scan
from .safety.care import Care, CareMessage, HelpLine, is_care_category, needs_care  # noqa: F401 (for front ends)
from .safety.scanner import placeholder as placeholder
from .server.serving import Serving
from .store import Store
from .token_view import TokenPiece, TokenView  # noqa: F401  TokenPiece: re-exported for the desktop
from .token_view import visible as visible
from .threadloop import wait_event
from .tokenize import Tokenizer
from .tools.facade import Tools
from .tools.mcp_facade import McpFacade, McpServerInfo  # noqa: F401  McpServerInfo: re-exported for the desktop
from .tools.registry import ToolInfo, ToolSpec  # noqa: F401  re-exported for the desktop
from .turns import Turns, can_continue, memory_notice, notice_fields  # noqa: F401  can_continue: re-exported for the desktop

log = logging.getLogger(__name__)

STARTER_MODEL = STARTER_NAME
# Empty: the model's own chat template supplies its default system text, which is what
# small models were tuned on; a user's system prompt (settings) replaces it.
DEFAULT_SYSTEM_PROMPT = ""
MAX_MESSAGE_CHARS = 2_000_000  # beyond this a paste is a mistake, not a question
# Temporary chats live in an in-memory store whose ids start here, so an id alone says
# which store holds it and the user's database never sees them.
TEMPORARY_IDS = 1 << 40


@dataclass(frozen=True)
class SendOptions:
    sampling: SamplingParams | None = None  # None: the conversation's, else the defaults
    system_prompt: str | None = None  # None: the conversation's, else the setting, else the model's own
    tools: tuple[str, ...] | None = None  # tool names; None: the conversation's "tools" setting (docs/tools.md)
    tool_choice: str = "auto"  # "auto", "none" or a tool's name (forces that call)
    attachments: tuple[str, ...] = ()  # file paths the user attached: the read_attachment tool reads only these
    # OpenAI's response_format: {"type": "json_schema", "json_schema": {"schema": {...}}} or
    # {"type": "json_object"} constrains the answer to valid JSON (engine.inference.constrain);
    # checked here, so a bad schema is refused before anything is stored.
    response_format: dict | None = None
    constraint: Constraint | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "constraint", Constraint.from_response_format(self.response_format))


@dataclass(frozen=True)
class ModelStatus:
    name: str
    backend: str
    context_length: int
    load_seconds: float


class Engine(ModelLibrary, Preferences, Serving, Providers, Tools, McpFacade, Care, MemoryEmbeddings, TokenView, GhostText,
             Privacy):
    """Conversations, models, memories and streaming answers; use from one asyncio loop.
    Memory, instruction, safety and diagnostics settings come from `Preferences`; the
    server's stateless answers (nothing stored) from `Serving`."""

    def __init__(
        self,
        store: Store,
        registry: ModelRegistry,
        *,
        backend_factory: Callable[[str], Backend] = resolve_backend,
        tokenizer_factory: Callable[[Path], Tokenizer] = Tokenizer.from_dir,
        policy: Policy | None = None,
    ):
        if policy is None:
            policy, warnings = Policy.load()
        else:
            warnings = []
        self.policy = policy
        self.policy_warnings: list[str] = warnings  # shown in settings; the shipped policy is in force
        self.store = store
        self.registry = registry
        self.memory = MemoryService(store)  # call through _db: it runs on the database thread
        self._summaries = SummaryStore(store)
        self._temp: Store | None = None
        self._backend_factory = backend_factory
        self._tokenizer_factory = tokenizer_factory
        self._db_pool = ThreadPoolExecutor(1, thread_name_prefix="wren-store")
        self._worker: ModelWorker | None = None
        self._status: ModelStatus | None = None
        self._assemblers: tuple[ContextAssembler, ContextAssembler] | None = None
        self._load_lock = asyncio.Lock()
        self._active: list[tuple[GenerationRequest, int]] = []
        self._warm: WarmRequest | None = None
        self._closed = False
        self._turns = Turns(self)
        self._notices: list[EngineNotice] = []
        self._notice_listeners: list[Callable[[EngineNotice], None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._weight_check: tuple[threading.Event, Any] | None = None
        self._question_tokenizers: dict[Path, Tokenizer] = {}
        self.leftovers = SweepReport()  # what the start-up sweep of models/ removed (Engine.open)
        self._init_memory_embeddings()  # sentence vectors for retrieval, made off the loop

    @classmethod
    def open(cls, home: Path | None = None, **kwargs: Any) -> Engine:
        """The engine over the user's data dir (or `home`)."""
        if home is not None:
            os.environ["WREN_HOME"] = str(home)
        from .engine_sockets import release_model

        registry = ModelRegistry(paths.models_dir(), before_remove=release_model)  # resident engines let go first
        leftovers = registry.sweep_leftovers()
        engine = cls(Store(paths.database_path()), registry, **kwargs)
        engine.leftovers = leftovers
        purge_conversations(engine.store, older_than=engine.undo_seconds)  # undo windows closed since
        if leftovers.removed:
            log_event("models.leftovers_removed", folders=list(leftovers.removed), bytes_freed=leftovers.bytes_freed)
            engine._notify(EngineNotice(
                "disk_freed",
                f"removed {len(leftovers.removed)} unfinished model folder(s) left by an interrupted "
                f"import or download, freeing {leftovers.bytes_freed / 2**20:,.1f} MB",
                str(registry.root),
            ))
        return engine

    async def close(self) -> None:
        """Stop answers, unload the model, close the database; calling it again is harmless."""
        if self._closed:
            return
        self._closed = True
        self.stop()
        await self._stop_weight_check()
        worker, self._worker, self._status = self._worker, None, None
        if worker is not None:
            await asyncio.get_running_loop().run_in_executor(None, worker.close)
        await self._close_mcp()  # every MCP server stops with Wren
        await self._close_memory_embeddings()
        await self._close_privacy()  # deleted chats leave the disk (engine/privacy.py)
        await self._db(self.store.close)  # every connection, whichever thread opened it
        if self._temp is not None:
            await self._db(self._temp.close)
        self._db_pool.shutdown(wait=True)

    # -- notices: things a front end should tell the user, outside any answer -------------

    def notices(self) -> list[EngineNotice]:
        """Every notice so far, oldest first (damaged model files, disk freed at start)."""
        return list(self._notices)

    def on_notice(self, callback: Callable[[EngineNotice], None]) -> Callable[[], None]:
        """Call `callback(notice)` on the engine's event loop for each new notice; returns
        a function that unsubscribes. Notices from before subscribing: `notices()`."""
        self._notice_listeners.append(callback)
        return lambda: self._notice_listeners.remove(callback) if callback in self._notice_listeners else None

    def _notify(self, notice: EngineNotice) -> None:
        """Record a notice and tell the listeners (from any thread)."""
        loop = self._loop

        def deliver() -> None:
            self._notices.append(notice)
            for listener in list(self._notice_listeners):
                try:
                    listener(notice)
                except Exception:  # a front end's bug must not stop the engine
                    log.exception("notice listener failed")

        if loop is not None and not loop.is_closed() and threading.current_thread() is not threading.main_thread():
            loop.call_soon_threadsafe(deliver)
        else:
            deliver()

    async def weight_check(self) -> WeightCheck | None:
        """Wait for the background check of the loaded model's weights (None: none ran)."""
        check = self._weight_check
        if check is None:
            return None
        return await asyncio.wrap_future(check[1])

    def _start_weight_check(self, name: str) -> None:
        import concurrent.futures

        cancel = threading.Event()
        self._loop = asyncio.get_running_loop()
        future: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            try:
                result = self.registry.verify_weights(name, cancel)
            except Exception as exc:  # a record that cannot be read: the load already said so
                result = WeightCheck(name, None, message=f"the weights of {name} could not be checked: {exc}")
            if result.ok is False:
                log_event("model.damaged", model=name, files=list(result.damaged))
                log.warning("%s", result.message)
                self._notify(EngineNotice("model_damaged", result.message, result.damaged[0] if result.damaged else None))
            future.set_result(result)

        # A plain daemon-less thread at its own pace; close() stops it within one 8 MB chunk.
        threading.Thread(target=run, name="wren-weight-check", daemon=True).start()
        self._weight_check = (cancel, future)

    async def _stop_weight_check(self) -> None:
        check, self._weight_check = self._weight_check, None
        if check is not None:
            check[0].set()
            await asyncio.wrap_future(check[1])

    async def _db(self, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        """Every database call runs on one worker thread, in order."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._db_pool, lambda: fn(*args, **kwargs))

    def _store_for(self, record_id: int) -> Store:
        if record_id >= TEMPORARY_IDS and self._temp is not None:
            return self._temp
        return self.store

    # -- settings ------------------------------------------------------------------

    async def get_setting(self, key: str, default: Any = None) -> Any:
        return await self._db(self.store.get_setting, key, default)

    async def set_setting(self, key: str, value: Any) -> None:
        """Save a setting (None clears it); bad sampling defaults are refused, not saved."""
        if key == "sampling" and value is not None:
            SamplingParams.from_dict(value)
        if key == PRESETS_KEY:
            check_presets(value)
        await self._db(self.store.set_setting, key, value)

    async def default_sampling(self, model: str | None = None, *, overrides: dict | None = None,
                               preset: bool = True) -> SamplingParams:
        """The sampling settings for an answer from `model` (default: the loaded model, else the
        chosen one): Wren's built-in defaults, overlaid field by field by the model's own (its
        card's advice, then its generation_config.json), the settings for every model (setting
        "sampling"), this model's preset (setting "sampling.models"; left out with
        preset=False, which gives what "reset to model defaults" shows) and `overrides` (a
        conversation's own)."""
        if model is None:
            model = (self._status.name if self._status else None) or await self.get_setting("model") or STARTER_MODEL
        loop = asyncio.get_running_loop()
        try:
            folder = (await loop.run_in_executor(None, self.registry.get, model)).path
        except WrenError:
            folder = None  # not installed (yet): it has no config of its own to read
        generation = await loop.run_in_executor(None, model_defaults, model, folder)
        everywhere = check_layer(await self.get_setting("sampling"), "the saved sampling settings")
        own = check_presets(await self.get_setting(PRESETS_KEY)).get(model) if preset else None
        return resolve(generation, everywhere, own, check_layer(overrides, "the conversation's sampling settings"))

    # -- conversations -------------------------------------------------------------

    async def create_conversation(self, title: str = "", *, settings: dict | None = None,
                                  temporary: bool = False) -> ConversationInfo:
        """A new chat. A temporary one is kept in memory only: never written to disk, and it
        uses and creates no memories."""
        model = self._status.name if self._status else None
        title = clean_title(title)
        if temporary:
            if self._temp is None:
                self._temp = await self._db(Store, ":memory:", first_id=TEMPORARY_IDS)
            settings = {**(settings or {}), TEMPORARY_KEY: True}
            return await self._db(self._temp.create_conversation, title, model, settings)
        return await self._db(self.store.create_conversation, title, model, settings)

    async def list_conversations(self, query: str | None = None) -> list[ConversationInfo]:
        return await self._db(self.store.list_conversations, query)

    async def get_conversation(self, conversation_id: int) -> ConversationInfo:
        return await self._db(self._store_for(conversation_id).get_conversation, conversation_id)

    async def rename_conversation(self, conversation_id: int, title: str) -> ConversationInfo:
        """Rename a chat; the title is put on one line and cut at TITLE_MAX_CHARS with "…"."""
        title = clean_title(title)
        if not title:
            raise InvalidRequest("a conversation title cannot be empty")
        store = self._store_for(conversation_id)
        return await self._db(store.update_conversation, conversation_id, title=title)

    async def pin_conversation(self, conversation_id: int, pinned: bool = True) -> ConversationInfo:
        return await self._db(self._store_for(conversation_id).update_conversation, conversation_id, pinned=pinned)

    async def delete_conversation(self, conversation_id: int, *, permanently: bool = False) -> None:
        """Hide a chat, restorable for `undo_seconds`, then purged from disk (engine/privacy.py);
        `permanently`: purged at once. A temporary chat is gone at once."""
        self.stop(conversation_id)
        store = self._store_for(conversation_id)
        await self._db(store.delete_conversation, conversation_id)
        if store is self._temp:
            await self._db(store.purge_deleted)
        elif permanently:
            await self.purge_deleted_conversations(ids=[conversation_id])
        else:
            self._schedule_purge()

    async def restore_conversation(self, conversation_id: int) -> ConversationInfo:
        return await self._db(self.store.restore_conversation, conversation_id)

    async def messages(self, conversation_id: int) -> list[MessageInfo]:
        """The visible branch of a conversation, oldest first."""
        return await self._db(self._store_for(conversation_id).messages, conversation_id)

    async def get_message(self, message_id: int) -> MessageInfo:
        return await self._db(self._store_for(message_id).get_message, message_id)

    async def switch_branch(self, message_id: int) -> list[MessageInfo]:
        """Show the branch through `message_id` (a sibling picked with `< 2/3 >`)."""
        store = self._store_for(message_id)
        msg = await self._db(store.get_message, message_id)
        await self._db(store.switch_to, message_id)
        return await self.messages(msg.conversation_id)

    async def sibling(self, message_id: int, step: int) -> list[MessageInfo]:
        """Move to the previous (-1) or next (+1) sibling of a message and show its branch."""
        siblings = await self._db(self._store_for(message_id).siblings, message_id)
        index = min(max(siblings.index(message_id) + step, 0), len(siblings) - 1)
        return await self.switch_branch(siblings[index])

    async def export(self, conversation_id: int, fmt: str = "markdown") -> str:
        """A conversation as Markdown or JSON text, every branch (engine/export.py)."""
        from . import export

        if fmt not in ("markdown", "json"):
            raise InvalidRequest(f"unknown export format {fmt!r}; use markdown or json")
        return await self._db(export.render, self._store_for(conversation_id), conversation_id, fmt)

    async def context_report(self, message_id: int) -> ContextReport | None:
        """What the model saw for an answer: every part, its tokens, and the exact prompt."""
        msg = await self.get_message(message_id)
        return report_from_meta(msg.meta)

    @property
    def current_model(self) -> ModelStatus | None:
        return self._status

    async def load_model(self, name: str | None = None, *, backend: str | None = None, dtype: str = "auto",
                         progress: Callable[[int, int], None] | None = None) -> ModelStatus:
        """Load a model on its own inference thread; the previous one is unloaded.
        `progress(done, total)` reports the first-run starter import, from a worker thread."""
        async with self._load_lock:
            loop = asyncio.get_running_loop()
            if name is None:
                name = await self.get_setting("model")
            remote = await self._load_remote(name)  # "provider/model": engine.providers
            if remote is not None:
                return remote
            if backend is None:
                backend = await self.get_setting("backend", "auto")
            if name is None or name == STARTER_MODEL:
                info = await loop.run_in_executor(None, self.registry.ensure_starter, progress)
            else:
                info = await loop.run_in_executor(None, self.registry.get, name)
            chosen = self._backend_factory(backend)
            started = time.perf_counter()
            tokenizer = await loop.run_in_executor(None, self._tokenizer_factory, info.path)
            await self._unload()
            performance = await self.performance_settings()
            worker = ModelWorker(info.name, chosen, info.path, tokenizer, dtype=dtype,
                                 cache_budget_bytes=performance.prefix_cache_mb * 2**20,
                                 slots=performance.parallel_sequences)
            try:
                model = await asyncio.wrap_future(worker.loaded)
            except BaseException:
                worker.close()
                raise
            self._assemblers = await loop.run_in_executor(None, self._make_assemblers, tokenizer)
            self._worker = worker
            self._status = ModelStatus(info.name, model.backend, model.context_length, time.perf_counter() - started)
            await self._stop_weight_check()
            self._start_weight_check(info.name)  # in the background: a damaged file is a notice
            log_event("model.loaded", model=info.name, backend=model.backend,
                      load_seconds=round(self._status.load_seconds, 3))
            return self._status

    def _make_assemblers(self, tokenizer: Tokenizer) -> tuple[ContextAssembler, ContextAssembler]:
        def make(summaries):
            return ContextAssembler.for_tokenizer(
                tokenizer, summaries=summaries, summarize=self._turns.summarize, run_db=self._db
            )

        # A temporary chat's running summary stays in memory like the chat itself.
        return make(self._summaries), make(MemorySummaries())

    def _assembler_for(self, conversation_id: int) -> ContextAssembler:
        assert self._assemblers is not None
        return self._assemblers[1 if conversation_id >= TEMPORARY_IDS else 0]

    async def decode_mode(self, wait: bool = False) -> str | None:
        """How the loaded model decodes ("eager", "compiling", "compiled", "cuda-graph"; None
        with no model loaded or a backend that does not say). wait=True first waits for a
        background compile of the decode step to finish."""
        worker = self._worker
        model = worker.model if worker is not None else None
        if model is None:
            return None
        if wait:
            while model.decode_mode == "compiling":  # polled: a blocking wait would hold an executor thread
                await asyncio.sleep(0.05)
        return model.decode_mode

    async def unload_model(self) -> None:
        async with self._load_lock:
            await self._unload()

    async def _unload(self) -> None:
        worker, self._worker, self._status = self._worker, None, None
        if worker is not None:
            for request, _ in self._active:
                request.cancel.set()
            await asyncio.get_running_loop().run_in_executor(None, worker.close)

    async def _ensure_model(self) -> ModelWorker:
        if self._worker is None:
            await self.load_model()
        assert self._worker is not None
        return self._worker

    async def count_tokens(self, text: str) -> int:
        """Exact token count with the loaded model's tokenizer (off the caller's thread)."""
        worker = self._worker
        if worker is None:
            raise ModelNotLoaded("no model is loaded yet; token counts need its tokenizer")
        return await asyncio.get_running_loop().run_in_executor(None, worker.tokenizer.count, text)

    # -- sending -------------------------------------------------------------------

    def stop(self, conversation_id: int | None = None) -> None:
        """Stop streaming answers (all, or one conversation's) within one token."""
        for request, owner in list(self._active):
            if conversation_id is None or owner == conversation_id:
                request.cancel.set()

    async def scan_input(self, text: str) -> ScanResult:
        """What the safety policy says about `text` before it is sent (off the loop thread)."""
        return await asyncio.get_running_loop().run_in_executor(None, scan, text, self.policy, self._destination())

    def _destination(self) -> str:
        return "remote" if self._status and self._status.backend.startswith("remote") else "local"

    # -- the seam the answering half uses (engine/turns.py's TurnHost) -------------------

    db = _db
    store_for = _store_for
    ensure_model = _ensure_model
    destination = _destination

    @property
    def model_status(self) -> ModelStatus | None:
        return self._status

    @property
    def loaded_worker(self) -> ModelWorker | None:
        return self._worker

    def assembler_for(self, conversation_id: int | None) -> ContextAssembler:
        """The context assembler for a chat (temporary chats keep their summaries in memory);
        None: a chat not made yet."""
        return self._assembler_for(conversation_id if conversation_id is not None else 0)

    def answer_started(self, request: Any, conversation_id: int) -> None:
        """An answer (a generation request, or a whole tool-using turn) Stop must reach."""
        self._active.append((request, conversation_id))

    def answer_ended(self, request: Any, conversation_id: int) -> None:
        self._active.remove((request, conversation_id))

    async def prepare(self, conversation_id: int | None, draft: str, options: SendOptions | None = None) -> int | None:
        """Pre-warm while the user types: assemble the prompt this draft would make and
        prefill it into the KV cache at low priority, so after Send only what changed runs.
        A newer call cancels the older one. Returns the draft prompt's token count (None when
        no model is loaded or the draft is empty); raises ContextOverflow early for a draft
        that cannot fit. `conversation_id` None: the first message of a new chat (the system
        prompt and the draft's memories are known before the chat exists)."""
        self._cancel_warm()
        worker = self._worker
        if worker is None or not draft.strip() or any(owner == conversation_id for _, owner in self._active):
            return None  # while an answer streams, its text is not final: nothing to warm yet
        shown = await self.messages(conversation_id) if conversation_id is not None else []
        _, ids = await self._turns.assemble(
            conversation_id, shown, draft, None, options or SendOptions(), worker, allow_summarize=False
        )
        if self._worker is not worker:
            return None  # the model changed meanwhile
        self._cancel_warm()
        self._warm = WarmRequest(ids)
        worker.submit(self._warm)
        return len(ids)

    async def prepared(self, timeout: float = 30.0) -> int:
        """Wait for the latest pre-warm to finish; the number of its prompt tokens cached."""
        warm = self._warm
        if warm is None:
            return 0
        await wait_event(warm.done, timeout)
        return warm.prefilled

    def _cancel_warm(self) -> None:
        if self._warm is not None:
            self._warm.cancel.set()
            self._warm = None

    async def check_question(self, text: str, model: str | None = None) -> int:
        """Refuse a question before anything is stored or loaded: not text, empty, too long,
        or more tokens than the model (`model`, else the loaded one, else the default) can
        read. Counts with the model's tokenizer alone (loaded in well under a second, not
        the model). Returns the token count (0 when the model is not installed yet)."""
        _check_text(text)
        worker = self._worker
        if worker is not None and (model is None or model == worker.name):
            tokenizer = worker.tokenizer
            window = self._status.context_length if self._status else 0
        else:
            name = model or await self.default_model()
            loop = asyncio.get_running_loop()
            try:
                info = await loop.run_in_executor(None, self.registry.get, name)
            except WrenError:
                return 0  # not installed yet (the starter before its first import): checked after loading
            cached = self._question_tokenizers.get(info.path)
            if cached is None:
                cached = await loop.run_in_executor(None, self._tokenizer_factory, info.path)
                self._question_tokenizers = {info.path: cached}
            tokenizer = cached
            window = info.context_length
        tokens = await asyncio.get_running_loop().run_in_executor(None, tokenizer.count, text)
        if window > 0:
            from .context import load_settings
            from .context.assemble import _refuse_oversize

            reserve = (await self._db(load_settings, self.store)).reserve(window)
            _refuse_oversize(tokens, 0, window - reserve, window, reserve)
        return tokens

    async def send_new(self, text: str, options: SendOptions | None = None, *, title: str | None = None,
                       settings: dict | None = None, temporary: bool = False,
                       model: str | None = None) -> AsyncIterator[Event]:
        """Start a new chat with its first question: the question is checked first
        (`check_question`) and the chat is made only once it is accepted; a chat whose
        question is refused later (the whole prompt does not fit, a safety block) is
        deleted again, so no empty chat is left. The first event, Started, carries the new
        conversation's id; a blocked question ends with Finished(BLOCKED) and no chat."""
        await self.check_question(text, model)
        conv = await self.create_conversation(" ".join(text.split())[:60] if title is None else title,
                                              settings=settings, temporary=temporary)
        store = self._store_for(conv.id)
        try:
            async for event in self.send(conv.id, text, options):
                yield event
        finally:
            await asyncio.shield(self._db(store.discard_if_empty, conv.id))

    async def send(self, conversation_id: int, text: str, options: SendOptions | None = None) -> AsyncIterator[Event]:
        """Scan and commit the user message, then stream the answer as typed events.

        A blocked message is not stored and nothing is sent (SafetyNotice events, then
        Finished(BLOCKED)); a redacted one is stored and sent redacted; warnings pass with
        their notices (front ends ask first with `scan_input`). A message that cannot fit
        the context window raises ContextOverflow before anything is stored."""
        _check_text(text)
        shown = await self.messages(conversation_id)  # NotFound before any write
        async for event in self._ask(conversation_id, shown[-1].id if shown else None, text, options):
            yield event

    async def edit_and_resend(self, message_id: int, text: str, options: SendOptions | None = None) -> AsyncIterator[Event]:
        """A new branch: the edited question beside the original, then its answer."""
        _check_text(text)
        msg = await self.get_message(message_id)
        if msg.role is not Role.USER:
            raise InvalidRequest(f"message {message_id} is not a question; only questions can be edited")
        async for event in self._ask(msg.conversation_id, msg.parent_id, text, options):
            yield event

    async def regenerate(self, message_id: int, options: SendOptions | None = None) -> AsyncIterator[Event]:
        """A new sibling answer for the user message that `message_id` answered."""
        msg = await self.get_message(message_id)
        if msg.role is Role.ASSISTANT:
            if msg.parent_id is None:
                raise InvalidRequest(f"message {message_id} has no question to answer again")
            msg = await self.get_message(msg.parent_id)
        if msg.role is not Role.USER:
            raise InvalidRequest(f"message {message_id} is not an answer or a question")
        async for event in self._turns.answer(msg, options or SendOptions()):
            yield event

    async def replay(self, message_id: int) -> AsyncIterator[Event]:
        """Answer the same question again with the answer's own model, settings and seed (a
        new sibling): with the same prompt, the same text, bit for bit."""
        msg = await self.get_message(message_id)
        if msg.role is not Role.ASSISTANT or msg.parent_id is None:
            raise InvalidRequest(f"message {message_id} is not an answer; only answers can be replayed")
        if not msg.sampling:
            raise InvalidRequest(f"answer {message_id} has no stored sampling settings to replay")
        worker = await self._ensure_model()
        if msg.model and worker.name != msg.model:
            raise InvalidRequest(f"answer {message_id} was written by {msg.model}; load it to replay "
                                 f"(the loaded model is {worker.name})")
        question = await self.get_message(msg.parent_id)
        params = SamplingParams.from_dict(msg.sampling)
        async for event in self._turns.answer(question, SendOptions(sampling=params)):
            yield event

    async def continue_answer(self, message_id: int) -> AsyncIterator[Event]:
        """Extend an answer that ended stopped, interrupted or at the length limit: the same
        message grows, its prompt and text so far reused from the KV cache (engine/turns.py)."""
        async for event in self._turns.continue_answer(message_id):
            yield event

    async def _ask(self, conversation_id: int, parent_id: int | None, text: str,
                   options: SendOptions | None) -> AsyncIterator[Event]:
        options = options or SendOptions()
        self._cancel_warm()  # what it cached stays cached; a stale draft must not follow
        checked = await self.scan_input(text)
        notices = checked.notices("input")
        for notice in notices:
            yield notice
        if checked.blocked:
            log_event("send.blocked", conversation_id=conversation_id, safety=notice_fields(notices))
            yield Finished(FinishReason.BLOCKED)
            return
        text = checked.redacted_text
        try:
            worker = await self._ensure_model()
        except WrenError:
            worker = None  # the question is still saved; the answer reports the failure
        if worker is not None:
            await self._turns.check_fits(conversation_id, parent_id, text, options, worker)
        store = self._store_for(conversation_id)
        meta = {"safety": notice_fields(notices)} if notices else {}

        def commit() -> tuple[MessageInfo, Any]:
            # one trip to the database thread: every trip costs the first token about a millisecond
            user = store.add_message(conversation_id, Role.USER, text, parent_id=parent_id, meta=meta)
            settings = store.get_conversation(conversation_id).settings
            return user, self.memory.handle_message(text, conversation_id=conversation_id, message_id=user.id,
                                                    conversation_settings=settings)

        user, outcome = await self._db(commit)
        if not outcome.empty or (outcome.skipped and outcome.intents):
            yield memory_notice(outcome)
        async for event in self._turns.answer(user, options, outcome):
            yield event

    async def generate_title(self, conversation_id: int) -> str:
        """A short title from the first exchange; saved and returned."""
        shown = await self.messages(conversation_id)
        first = next((m.content for m in shown if m.role is Role.USER), "")[:1000]
        if not first:
            raise InvalidRequest(f"conversation {conversation_id} has no messages to name it by")
        # the one being written beside the first answer, if any (engine/titles.py)
        answer = next((m.content for m in shown if m.role is Role.ASSISTANT), "")
        return await self._turns.titles.generate(conversation_id, first, answer)


def _check_text(text: str) -> None:
    check_unicode(text, "the message")
    if not isinstance(text, str) or not text.strip():
        raise InvalidRequest("the message is empty; type something to send")
    if len(text) > MAX_MESSAGE_CHARS:
        raise InvalidRequest(f"the message is {len(text):,} characters long; the limit is {MAX_MESSAGE_CHARS:,}")
