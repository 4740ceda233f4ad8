"""The engine core: the database thread, the loaded model session, the answers running now,
the safety policy and the notices. The services (engine/api.py builds them) are each given
this core and use its public members; it knows none of them."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .context import ContextAssembler, MemorySummaries, SummaryStore
from .inference.backend import Backend
from .inference.release import collect_garbage, release_memory
from .inference.select import resolve_backend
from .inference.worker import ModelWorker
from .memory import MemoryService
from .modelhub.registry import ModelRegistry, SweepReport
from .records import EngineNotice, ModelStatus
from .safety import Policy
from .store import Store
from .tokenize import Tokenizer

log = logging.getLogger(__name__)

# Temporary chats live in an in-memory store whose ids start here, so an id alone says
# which store holds it and the user's database never sees them.
TEMPORARY_IDS = 1 << 40


class Core:
    """What every service shares; one per Engine."""

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
        self.memory = MemoryService(store)  # the memory store's logic: call it through db()
        self.backend_factory = backend_factory
        self.tokenizer_factory = tokenizer_factory
        self.temporary: Store | None = None  # temporary chats' in-memory store, made on first use
        self.leftovers = SweepReport()  # what the start-up sweep of models/ removed (Engine.open)
        self.closed = False
        self.load_lock = asyncio.Lock()  # one model load (or unload) at a time
        self._db_pool: ThreadPoolExecutor | None = ThreadPoolExecutor(1, thread_name_prefix="wren-store")
        self._summaries = SummaryStore(store)
        self._worker: ModelWorker | None = None
        self._status: ModelStatus | None = None
        self._assemblers: tuple[ContextAssembler, ContextAssembler] | None = None
        self._active: list[tuple[Any, int]] = []
        self._notices: list[EngineNotice] = []
        self._notice_listeners: list[Callable[[EngineNotice], None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self.summarizer: Callable[..., Any] | None = None  # a long chat's summaries (the chat service's)

    async def close(self) -> None:
        """Stop answers, let the model go, close the database (Engine.close first closes
        the services)."""
        self.closed = True
        self.stop_answers()
        worker, self._worker, self._status = self._worker, None, None
        if worker is not None:
            await asyncio.get_running_loop().run_in_executor(None, worker.close)
        if self._db_pool is None:
            return
        await self.db(self.store.close)  # every connection, whichever thread opened it
        if self.temporary is not None:
            await self.db(self.temporary.close)
        pool, self._db_pool = self._db_pool, None
        pool.shutdown(wait=True)

    # -- the database thread -----------------------------------------------------------

    async def db(self, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        """Run `fn(*args, **kwargs)` on the database thread: every store call runs there, in order."""
        loop = asyncio.get_running_loop()
        assert self._db_pool is not None, "the engine is closed"
        return await loop.run_in_executor(self._db_pool, lambda: fn(*args, **kwargs))

    def store_for(self, record_id: int) -> Store:
        """The store that holds a conversation or message: temporary chats' own, or the user's."""
        if record_id >= TEMPORARY_IDS and self.temporary is not None:
            return self.temporary
        return self.store

    async def temporary_store(self) -> Store:
        """Temporary chats' in-memory store, made on first use."""
        if self.temporary is None:
            self.temporary = await self.db(Store, ":memory:", first_id=TEMPORARY_IDS)
        return self.temporary

    def set_policy(self, policy: Policy, warnings: list[str]) -> None:
        """The safety policy in force from the next check on (the safety service's changes)."""
        self.policy, self.policy_warnings = policy, warnings

    # -- notices: things a front end should tell the user, outside any answer -------------

    def notices(self) -> list[EngineNotice]:
        """Every notice so far, oldest first (damaged model files, disk freed at start)."""
        return list(self._notices)

    def on_notice(self, callback: Callable[[EngineNotice], None]) -> Callable[[], None]:
        """Call `callback(notice)` on the engine's event loop for each new notice; returns
        a function that unsubscribes. Notices from before subscribing: `notices()`."""
        self._notice_listeners.append(callback)
        return lambda: self._notice_listeners.remove(callback) if callback in self._notice_listeners else None

    def notify(self, notice: EngineNotice) -> None:
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

    # -- the loaded model session ------------------------------------------------------

    @property
    def model_status(self) -> ModelStatus | None:
        """The loaded model's name, backend and window; None with none loaded."""
        return self._status

    @property
    def loaded_worker(self) -> ModelWorker | None:
        """The loaded model's worker thread (a remote model's stand-in for one); None."""
        return self._worker

    async def install_model(self, worker: ModelWorker, status: ModelStatus, tokenizer: Tokenizer) -> None:
        """Make a loaded worker the answering one (engine.models and engine.providers load
        it, under `load_lock`, after `unload_current`)."""
        self._loop = asyncio.get_running_loop()
        self._assemblers = await self._loop.run_in_executor(None, self._make_assemblers, tokenizer)
        self._worker, self._status = worker, status

    async def unload_current(self) -> None:
        """Stop every answer of the loaded model and let its worker go (under `load_lock`)."""
        worker, self._worker, self._status = self._worker, None, None
        if worker is not None:
            self.stop_answers()
            loop = asyncio.get_running_loop()
            # The executor's work item outlives the call by a moment in its thread: it must not
            # hold the worker (a bound `worker.close` did), or the collection below can miss it.
            held = [worker]
            del worker
            await loop.run_in_executor(None, lambda: held.pop().close())
            collect_garbage()  # the last reference is gone: collected now, on the loop's thread (release.py)
            await loop.run_in_executor(None, release_memory)

    async def unload(self) -> None:
        """Let the loaded model go (waiting for a load in progress)."""
        async with self.load_lock:
            await self.unload_current()

    def destination(self) -> str:
        """Where text goes: "remote" for a provider's model, else "local" (which column of
        the safety policy applies)."""
        return "remote" if self._status and self._status.backend.startswith("remote") else "local"

    def _make_assemblers(self, tokenizer: Tokenizer) -> tuple[ContextAssembler, ContextAssembler]:
        def make(summaries):
            return ContextAssembler.for_tokenizer(
                tokenizer, summaries=summaries, summarize=self._summarize, run_db=self.db
            )

        # A temporary chat's running summary stays in memory like the chat itself.
        return make(self._summaries), make(MemorySummaries())

    async def _summarize(self, *args: Any, **kwargs: Any) -> Any:
        assert self.summarizer is not None, "the chat service sets the summarizer"
        return await self.summarizer(*args, **kwargs)

    def assembler_for(self, conversation_id: int | None) -> ContextAssembler:
        """The context assembler for a chat (temporary chats keep their summaries in memory);
        None: a chat not made yet."""
        assert self._assemblers is not None
        return self._assemblers[1 if (conversation_id or 0) >= TEMPORARY_IDS else 0]

    # -- the answers running now -------------------------------------------------------

    def answer_started(self, request: Any, conversation_id: int) -> None:
        """An answer (a generation request, or a whole tool-using turn) Stop must reach."""
        self._active.append((request, conversation_id))

    def answer_ended(self, request: Any, conversation_id: int) -> None:
        self._active.remove((request, conversation_id))

    def answering(self, conversation_id: int | None = None) -> bool:
        """Whether an answer is being written (in `conversation_id`, or anywhere)."""
        return any(conversation_id is None or owner == conversation_id for _, owner in self._active)

    def stop_answers(self, conversation_id: int | None = None) -> None:
        """Stop streaming answers (all, or one conversation's) within one token."""
        for request, owner in list(self._active):
            if conversation_id is None or owner == conversation_id:
                request.cancel.set()
