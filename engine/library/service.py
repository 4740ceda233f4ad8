"""`engine.library` and `engine.projects`: the document library as a service of the Engine.

Indexing and watching run on one background thread ("wren-library") at the lowest CPU
priority, pausing between files while an answer streams; its database calls hop to the
engine's database thread like every other store call. The async methods run the library's
blocking calls on the default executor, so the event loop (a window's GUI thread) never waits.

Watching is by polling, not inotify/FSEvents: the standard library only, the same on Linux,
macOS and Windows, right on network and removable drives, and no per-folder watch limit (the
Linux default of 8,192 inotify watches is below a 100,000-file tree's folders on some
systems). A pass costs one stat per file (about 1 s for 100,000 files on these machines,
at nice 19), so the pause between passes is ten times the last pass's length, at least
WATCH_SECONDS and at most MAX_WATCH_SECONDS. A start rescans every source once.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..context.report import PartKind, PartState, report_from_meta
from ..events import Citation, CitedBy, Delta, Event, Finished
from ..memory import embed
from ..store import library as sql
from . import stored
from .cite import citations, cite, slight_quote, without_echo, without_uncited
from .expand import EXPAND_SETTING, Complete
from .expand import expand as expand_query
from .library import LibraryIndex
from .matched import Nearness, best_match, first_match, nearness, sentences, titled
from .projects import DEFAULT_SCOPE, NO_DOCUMENTS, SCOPE_SETTING, SCOPES, Projects, Scope
from .retrieve import Passage

if TYPE_CHECKING:
    from ..core import Core

log = logging.getLogger(__name__)

SCOPE_SECONDS = 5.0
PASSAGES = 6  # passages offered to a Send (the context keeps those that fit)
MAX_TITLED = 2048  # passages' titled vectors kept for the match by meaning (3 MB)
WATCH_SECONDS = 2.0
MAX_WATCH_SECONDS = 60.0


class Library:
    """`engine.library`: sources, indexing progress, search; `start()` begins watching."""

    def __init__(self, core: Core, embedder: Callable[[], Any] = embed.shared_embedder):
        self.e = core
        self._loop: asyncio.AbstractEventLoop | None = None
        self.index = LibraryIndex(core.store.db, self._run_db, embedder, in_memory=core.store.path == ":memory:",
                                  busy=lambda: core.answering())
        self.projects = Projects(self._run_db)
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()
        self._closing = threading.Event()
        self.passes = 0  # indexing passes finished (tests wait on it)
        self._scopes: dict[tuple, tuple[int, float, Scope, bool, bool]] = {}  # see _cached_scope
        self._given: dict[int | None, tuple[str, builtins.list[Passage]]] = {}  # conversation -> (question, passages)
        # (embedder, chunk id) -> the vector of the chunk's `titled` text, for the match by
        # meaning; emptied when the library changes (index.generation)
        self._titled: dict[tuple[str, int], Any] = {}
        self._titled_generation = -1
        # the loaded model's short requests (Turns.complete, set by the Engine): query expansion
        self.complete: Complete | None = None
        self.last_expansion: builtins.list[str] = []  # the phrasings the last expanded search used

    def _run_db(self, fn: Callable[[Any], Any]) -> Any:
        """Run fn(database) on the engine's database thread, from any other thread."""
        assert self._loop is not None, "the library is used through its async methods"
        store = self.e.store
        return asyncio.run_coroutine_threadsafe(self.e.db(fn, store.db), self._loop).result()

    async def _blocking(self, fn: Callable[..., Any], *args: Any) -> Any:
        self._loop = asyncio.get_running_loop()
        return await self._loop.run_in_executor(None, fn, *args)

    # -- sources and search --------------------------------------------------------------

    async def add(self, paths: Sequence[str], watch: bool = False) -> builtins.list[dict[str, Any]]:
        """Add files and folders; they are indexed in the background (`start()` running),
        or by `sync()`."""
        added = await self._blocking(self.index.add, paths, watch)
        self._wake.set()
        return added

    async def list(self) -> builtins.list[dict[str, Any]]:
        return await self._blocking(self.index.sources)

    async def remove(self, target: str) -> dict[str, Any]:
        """Remove a source (path or id) and every trace of its text from the database file."""
        self.index.stop()  # a pass in progress may be reading it; the next pass starts clean
        return await self._blocking(self.index.remove, target)

    async def status(self) -> dict[str, Any]:
        return await self._blocking(self.index.status)

    async def search(self, query: str, limit: int = 5, source_ids: Sequence[int] | None = None,
                     expand: bool = False) -> builtins.list[Passage]:
        """The best `limit` passages for `query`; `expand`: with other phrasings of it by the
        loaded model fused in (engine/library/expand.py; the query alone if that fails)."""
        also = await expand_query(self.complete, query) if expand else []
        self.last_expansion = also
        return await self._blocking(self.index.search, query, limit, source_ids, also)

    async def sync(self) -> dict[str, Any]:
        """One indexing pass now, on the executor; its progress."""
        progress = await self._blocking(self._pass)
        return progress.to_dict()

    def _pass(self) -> Any:
        progress = self.index.sync()
        self.passes += 1
        return progress

    # -- scope: what a Send searches ---------------------------------------------------------

    async def scope(self, conversation_id: int | None, project: str | None = None,
                    library_on: bool | None = None) -> Scope:
        """What a Send searches (engine/library/projects.py Projects.scope), in one trip."""
        return (await self.e.db(self._read_scope, conversation_id, project, library_on))[0]

    def _read_scope(self, conversation_id: int | None, project: str | None,
                    library_on: bool | None) -> tuple[Scope, bool, bool]:
        """On the database thread: the Send's scope, whether any passage is indexed, and
        whether the setting asks for query expansion."""
        db = self.e.store.db
        setting = self.e.store.get_setting(SCOPE_SETTING, DEFAULT_SCOPE)
        scope = Projects(lambda fn: fn(db)).scope(conversation_id, project, library_on,
                                                  setting if setting in SCOPES else DEFAULT_SCOPE)
        return scope, sql.has_chunks(db), self.e.store.get_setting(EXPAND_SETTING, False) is True

    async def passages_for(self, conversation_id: int | None, question: str, documents: bool | None = None,
                           project: str | None = None, expand: bool | None = None,
                           ) -> tuple[builtins.list[Passage], str]:
        """The passages a Send of `question` offers the model, numbered [1]… in this order
        (none when the library is off for it or empty), kept for `given` after the answer,
        and the chat's project instructions. `project`: the chat joins that project.
        `expand`: other phrasings by the model searched too; None: as EXPAND_SETTING says."""
        if conversation_id is not None and project:
            await self._blocking(self.projects.add_chat, project, conversation_id)
            self._scopes.clear()
        scope, has_chunks, expand_setting = await self._cached_scope(conversation_id, project, documents)
        passages: builtins.list[Passage] = []
        if scope.search and has_chunks and question.strip() and (scope.source_ids is None or scope.source_ids):
            passages = await self.search(question, PASSAGES, scope.source_ids,
                                         expand=expand_setting if expand is None else expand)
        self._given[conversation_id] = (question, passages)
        if len(self._given) > 64:
            self._given.pop(next(iter(self._given)))
        return passages, scope.instructions

    async def _cached_scope(self, conversation_id: int | None, project: str | None,
                            documents: bool | None) -> tuple[Scope, bool, bool]:
        """The scope, read at most every SCOPE_SECONDS per chat while this process changed
        nothing (a Send's path keeps its database trips: none for the library most Sends);
        another process's change (`wren docs add` beside the window) shows within that time."""
        if documents is False:
            return NO_DOCUMENTS, False, False
        key = (conversation_id, project, documents)
        now = time.monotonic()
        cached = self._scopes.get(key)
        if cached is None or cached[0] != self.index.generation or now - cached[1] > SCOPE_SECONDS:
            found = await self.e.db(self._read_scope, conversation_id, project, documents)
            if len(self._scopes) > 256:
                self._scopes.clear()
            cached = self._scopes[key] = (self.index.generation, now, *found)
        return cached[2], cached[3], cached[4]

    def given(self, conversation_id: int | None) -> builtins.list[Passage]:
        """The passages the last Send in this conversation offered."""
        return self._given.get(conversation_id, ("", []))[1]

    async def cite(self, events: AsyncIterator[Event], conversation_id: int | None) -> AsyncIterator[Event]:
        """`events` of one answer with its `Citation`s added before its `Finished`: the
        [n] of its text that name a passage its prompt held (its context report says which)."""
        text: builtins.list[str] = []
        async for event in events:
            if isinstance(event, Delta):
                text.append(event.text)
            elif isinstance(event, Finished) and event.message_id is not None and self.given(conversation_id):
                answer = "".join(text)
                cited = await self._citations(answer, conversation_id, event.message_id)
                await self._keep(event.message_id, answer, cited)
                for citation in cited:
                    yield citation
            yield event

    async def _keep(self, message_id: int, answer: str, cited: builtins.list[Citation]) -> None:
        """Keep the citations with the answer (its sources show when the chat is read back)
        and store its text without the markers that named no passage of its prompt: the
        window, a copy, an export and the next turn's history then read what was shown."""
        store = self.e.store_for(message_id)
        if cited:
            await self.e.db(stored.save, store, message_id, cited)
        shown = without_uncited(answer, [c.number for c in cited])
        if shown != answer:
            message = await self.e.db(store.get_message, message_id)
            if message.content == answer:  # the whole answer as stored (not cut by a failed write)
                await self.e.db(store.update_message, message_id, content=shown)

    async def _citations(self, answer: str, conversation_id: int | None, message_id: int) -> builtins.list[Citation]:
        question, passages = self._given.get(conversation_id, ("", []))
        message = await self.e.db(self.e.store_for(message_id).get_message, message_id)
        report = report_from_meta(message.meta)
        held = [p.source_ids[0] for p in (report.parts if report else ())
                if p.kind is PartKind.DOCUMENT and p.state is PartState.INCLUDED and p.source_ids]
        return await self.attribute(answer, question, passages, set(held))

    async def attribute(self, answer: str, question: str, passages: Sequence[Passage],
                        held: set[int]) -> builtins.list[Citation]:
        """The citations of `answer` to `question`, whose prompt offered `passages` (numbered
        from 1) and held those with chunk ids in `held`: its markers, else what it quotes, else
        the passage nearest its meaning (bench/docs_replay.py replays stored answers through it).
        A slight quote (cite.slight_quote) gives way to a clear match with another file; the
        prompt's passage labels echoed without a citation in the prose cite nothing (cite.without_echo)."""
        answer = without_echo(answer, passages)
        found = citations(answer, passages, held, question)
        if found and slight_quote(answer, question, found):
            number = best_match(await self.nearness(answer, passages, held))
            if number is not None and passages[number - 1].path not in {c.path for c in found}:
                return [cite(number, passages[number - 1], CitedBy.MATCHED)]
        return found or await self._matched(answer, passages, held)

    async def _matched(self, answer: str, passages: Sequence[Passage], held: set[int]) -> builtins.list[Citation]:
        """The passage nearest the answer's meaning, as a whole or else by its first sentence
        that matches one clearly (engine/library/matched.py), for an answer that cites none by
        number and quotes none."""
        number = first_match(await self._nearness(answer, passages, held, by_sentence=True))
        return [] if number is None else [cite(number, passages[number - 1], CitedBy.MATCHED)]

    async def nearness(self, answer: str, passages: Sequence[Passage], held: set[int]) -> builtins.list[Nearness]:
        """The cosine of `answer` with each of `passages` (numbered from 1 as the prompt
        numbered them) whose chunk id is in `held`, nearest first; none without the embedder."""
        found = await self._nearness(answer, passages, held, by_sentence=False)
        return found[0] if found else []

    async def _nearness(self, answer: str, passages: Sequence[Passage], held: set[int],
                        by_sentence: bool) -> builtins.list[builtins.list[Nearness]]:
        """The nearness of the whole answer, then (`by_sentence`) of each of its sentences, to
        the held passages as `titled` text: one embedding call for the answer's pieces and
        the passages not embedded so since the library last changed (a passage of up to 256
        tokens takes tens of milliseconds on two busy cores)."""
        text = without_uncited(answer, []).strip()
        chosen = [p for p in passages if p.chunk_id in held]
        embedder = await self._blocking(self.index.embedder) if text and chosen else None
        if embedder is None:
            return []
        pieces = [text, *(s for s in (sentences(text) if by_sentence else []) if s != text)]
        if self._titled_generation != self.index.generation or len(self._titled) > MAX_TITLED:
            self._titled.clear()
            self._titled_generation = self.index.generation
        missing = [p for p in chosen if (embedder.name, p.chunk_id) not in self._titled]
        made = await self._blocking(embedder.embed, [*pieces, *(titled(p) for p in missing)])
        self._titled.update(((embedder.name, p.chunk_id), v) for p, v in zip(missing, made[len(pieces):]))
        vectors = {p.chunk_id: self._titled[(embedder.name, p.chunk_id)] for p in chosen}
        return [nearness(vector, vectors, passages, held) for vector in made[:len(pieces)]]

    # -- watching ------------------------------------------------------------------------

    async def start(self) -> None:
        """Rescan every source now and keep watching them (front ends call this once)."""
        self._loop = asyncio.get_running_loop()
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="wren-library", daemon=True)
            self._thread.start()

    def _watch(self) -> None:
        self.index.indexer.lower_priority()
        while not self._closing.is_set():
            began = time.monotonic()
            try:
                self._pass()
            except Exception:  # the next pass tries again; the log says what went wrong
                if self._closing.is_set():
                    return
                log.exception("library pass failed")
            pause = min(max(WATCH_SECONDS, 10 * (time.monotonic() - began)), MAX_WATCH_SECONDS)
            self._wake.wait(pause)
            self._wake.clear()

    async def close(self) -> None:
        self._closing.set()
        self.index.stop()
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            await asyncio.get_running_loop().run_in_executor(None, thread.join, 30)


class ProjectsService:
    """`engine.projects`: projects (a name, instructions, library sources, chats), async."""

    def __init__(self, library: Library):
        self._library = library
        self._projects = library.projects

    async def create(self, name: str, instructions: str = "") -> dict[str, Any]:
        return await self._library._blocking(self._projects.create, name, instructions)

    async def list(self) -> builtins.list[dict[str, Any]]:
        return await self._library._blocking(self._projects.list)

    async def remove(self, name: str) -> dict[str, Any]:
        return await self._library._blocking(self._projects.remove, name)

    async def set_instructions(self, name: str, text: str) -> dict[str, Any]:
        return await self._library._blocking(self._projects.set_instructions, name, text)

    async def add_sources(self, name: str, source_ids: builtins.list[int]) -> dict[str, Any]:
        return await self._library._blocking(self._projects.add_sources, name, source_ids)

    async def add_chat(self, name: str, conversation_id: int) -> None:
        await self._library._blocking(self._projects.add_chat, name, conversation_id)
