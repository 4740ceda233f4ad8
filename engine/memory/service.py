"""`MemoryService`: the one object the Engine, the CLI and the settings page use for memory.

Synchronous and database-bound: the Engine calls it through its one database thread.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable

from ..store import Store
from ..store import memories as memory_rows
from . import intents
from . import settings as memory_settings
from .embed import Embedder
from .records import (
    IntentKind,
    MemoryInfo,
    MemoryRefused,
    Origin,
    Retrieved,
    Suggestion,
    TurnOutcome,
)
from .retrieve import RetrievalSettings, Retriever
from .settings import MemorySettings
from .store import MemoryStore, clean_text
from .suggest import suggest

PAST_CHAT_SHARE = 0.4  # of the memory budget, when "reference chat history" is on
# A proposal this close (cosine) to a saved memory says the same thing in other words.
# Measured with all-MiniLM-L6-v2 on 11 pairs: rewordings of one fact 0.76-0.94 ("I work as a
# nurse" / "I'm a nurse" 0.89), different facts on one subject 0.50-0.84 ("I'm vegan" /
# "I'm vegetarian" 0.84). Set above the latter: a missed duplicate costs one extra proposal,
# a wrong one hides a new fact.
SAME_FACT_COSINE = 0.86


class MemoryService:
    def __init__(self, store: Store, *, embedder: Embedder | None = None,
                 retrieval: RetrievalSettings | None = None):
        self.store = store
        self.memories = MemoryStore(store)
        self.retriever = Retriever(self.memories, embedder, retrieval)
        # Called (on the database thread) after a memory is saved or edited: the Engine embeds
        # it in the background (engine/memory/facade.py).
        self.on_saved: Callable[[], None] | None = None

    def _saved(self) -> None:
        if self.on_saved is not None:
            self.on_saved()

    def use_embedder(self, embedder: Embedder | None) -> None:
        """Attach the optional embedder once it has loaded (slow: load it off the loop)."""
        self.retriever.embedder = embedder
        self.retriever.reset()

    # -- settings ------------------------------------------------------------------

    def settings(self) -> MemorySettings:
        return memory_settings.load(self.store)

    def update_settings(self, **changes) -> MemorySettings:
        updated = self.settings().with_(**changes)
        memory_settings.save(self.store, updated)
        return updated

    def _off_reason(self, conversation_settings: dict | None, prefs: MemorySettings) -> str:
        if memory_settings.is_temporary(conversation_settings):
            return "temporary chat: memories are neither used nor saved"
        if (conversation_settings or {}).get("memory") is False:  # the chat settings panel's switch
            return "memory is off for this chat"
        if not prefs.enabled:
            return "memory is turned off in settings"
        return ""

    # -- a turn --------------------------------------------------------------------

    def handle_message(self, text: str, *, conversation_id: int | None = None,
                       message_id: int | None = None,
                       conversation_settings: dict | None = None) -> TurnOutcome:
        """Act on "remember …"/"forget …" in a user message; propose facts if enabled.

        Call it after the user message is committed and before assembling the context, so a
        forget takes effect in the same turn.
        """
        found = intents.detect(text)
        prefs = self.settings()
        skipped = self._off_reason(conversation_settings, prefs)
        if skipped:
            return TurnOutcome(skipped=skipped, intents=tuple(found))
        saved: list[MemoryInfo] = []
        forgotten: list[MemoryInfo] = []
        refused: list[tuple[str, str]] = []
        unmatched: list[str] = []
        clear_all = False
        for intent in found:
            if intent.kind is IntentKind.REMEMBER:
                try:
                    saved.append(self.memories.add(
                        intent.text, origin=Origin.CHAT, conversation_id=conversation_id,
                        message_id=message_id,
                    ))
                except MemoryRefused as exc:
                    refused.append((intent.text, str(exc)))
            elif intent.kind is IntentKind.FORGET:
                gone = self.forget_topic(intent.topic)
                forgotten.extend(gone)
                if not gone:
                    unmatched.append(intent.topic)
            else:
                clear_all = True
        proposals: list[Suggestion] = []
        if not found and prefs.suggest:
            proposals = self.suggestions(text, message_id=message_id)
        if saved:
            self._saved()
        return TurnOutcome(
            saved=tuple(saved), forgotten=tuple(forgotten), refused=tuple(refused),
            unmatched_forgets=tuple(unmatched), confirm_clear_all=clear_all,
            suggestions=tuple(proposals), intents=tuple(found),
        )

    def suggestions(self, text: str, *, message_id: int | None = None) -> list[Suggestion]:
        """Facts stated in `text` worth proposing, less those already saved: the same words,
        or (with the embedder) the same fact in other words."""
        candidates = suggest(text, message_id=message_id)
        if not candidates:
            return []
        known = {m.text.lower() for m in self.memories.search(" ".join(c.text for c in candidates), 100)}
        fresh = [c for c in candidates if c.text.lower() not in known]
        retriever = self.retriever
        embedder = retriever.embedder
        if fresh and embedder is not None:  # hybrid retrieval
            retriever.load_vectors()
            if len(retriever.vectors.ids):
                vectors = embedder.embed([c.text for c in fresh])
                fresh = [c for c, v in zip(fresh, vectors)
                         if float(retriever.vectors.cosines(v).max()) < SAME_FACT_COSINE]
        return fresh

    def retrieve(self, query: str, *, budget_tokens: int, count: Callable[[str], int],
                 conversation_id: int | None = None, conversation_settings: dict | None = None,
                 exclude: Iterable[int] = (), query_vector=None) -> list[Retrieved]:
        """Memories (and, if enabled, past-chat excerpts) for a turn, within `budget_tokens`.

        Does not count them as used: call `mark_used(report.memory_ids)` with what the
        assembled prompt really included. `query_vector`: the query's embedding, made off
        this thread by the caller (else, with an embedder attached, it is made here).
        """
        prefs = self.settings()
        if self._off_reason(conversation_settings, prefs):
            return []
        past_budget = int(budget_tokens * PAST_CHAT_SHARE) if prefs.reference_history else 0
        found = self.retriever.for_turn(
            query, budget_tokens=budget_tokens - past_budget, count=count, top_k=prefs.top_k,
            exclude=exclude, mark_used=False, query_vector=query_vector,
        )
        if past_budget and prefs.past_chat_items:
            found += self.retriever.past_chats(
                query, conversation_id=conversation_id, budget_tokens=past_budget, count=count,
                limit=prefs.past_chat_items, query_vector=query_vector,
            )
        return found

    def mark_used(self, memory_ids: Iterable[int]) -> None:
        self.memories.mark_used(memory_ids)

    # -- the settings page, the "Remember this" action, the CLI --------------------

    def list(self, limit: int | None = None, offset: int = 0) -> list[MemoryInfo]:
        return self.memories.list(limit, offset)

    def count(self) -> int:
        return self.memories.count()

    def search(self, query: str, limit: int = 50) -> builtins.list[MemoryInfo]:
        return self.memories.search(query, limit)

    def get(self, memory_id: int) -> MemoryInfo:
        return self.memories.get(memory_id)

    def get_many(self, memory_ids: Iterable[int]) -> dict[int, MemoryInfo]:
        """What is left of a past answer's memories: missing ids were forgotten since."""
        return self.memories.get_many(memory_ids)

    def add(self, text: str, *, origin: Origin = Origin.MANUAL, conversation_id: int | None = None,
            message_id: int | None = None) -> MemoryInfo:
        saved = self.memories.add(text, origin=origin, conversation_id=conversation_id, message_id=message_id)
        self._saved()
        return saved

    def remember_message(self, message_id: int, text: str | None = None) -> MemoryInfo:
        """The "Remember this" action on a message; `text` is the user's edit of it, if any."""
        message = self.store.get_message(message_id)
        saved = self.memories.add(
            text if text is not None else message.content, origin=Origin.ACTION,
            conversation_id=message.conversation_id, message_id=message.id,
        )
        self._saved()
        return saved

    def accept(self, suggestion: Suggestion, *, conversation_id: int | None = None) -> MemoryInfo:
        saved = self.memories.add(
            suggestion.text, origin=Origin.SUGGESTION, conversation_id=conversation_id,
            message_id=suggestion.source_message_id,
        )
        self._saved()
        return saved

    def edit(self, memory_id: int, text: str) -> MemoryInfo:
        edited = self.memories.edit(memory_id, text)
        self._saved()
        return edited

    def delete(self, memory_id: int) -> MemoryInfo:
        return self.memories.delete(memory_id)

    def clear(self) -> int:
        return self.memories.clear()

    def forget_topic(self, topic: str) -> builtins.list[MemoryInfo]:
        """Delete every memory containing all topic words of `topic`; returns them (for undo)."""
        return self.memories.delete_many(self.memories.matching_all(topic))

    def restore(self, memory: MemoryInfo) -> MemoryInfo:
        """Undo a forget: the memory comes back with its id, so old provenance still points at it."""
        clean_text(memory.text)
        with self.memories._bound():
            if memory_rows.memory_row(memory.id) is not None:
                return self.memories.get(memory.id)
            # The chat it came from may have been purged since; the memory outlives it.
            memory_rows.restore_memory(
                id=memory.id, text=memory.text, created_at=memory.created_at,
                updated_at=memory.updated_at,
                source_conversation_id=self._exists("conversation", memory.source_conversation_id),
                source_message_id=self._exists("message", memory.source_message_id),
                last_used_at=memory.last_used_at, times_used=memory.times_used,
                origin=memory.origin.value,
            )
            self.memories.generation += 1
        self._saved()
        return self.memories.get(memory.id)

    def _exists(self, table: str, row_id: int | None) -> int | None:
        if row_id is None:
            return None
        return row_id if memory_rows.row_exists(self.store.db, table, row_id) else None
