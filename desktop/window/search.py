"""Searching chats from the sidebar: each result shows where it matched; opening one shows
the chat at the matching message, highlighted, and clears the filter."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from wren.engine.api import Engine

from ..chat.view import ChatView
from ..sidebar.sidebar import Sidebar
from ..sidebar.snippets import Hit, find_hit, search_terms
from .seams import TaskRunner

MAX_SNIPPETS = 40  # results given a snippet (each reads its chat's messages)


class ChatSearch(QObject):
    """Follows the sidebar's search: snippets after each listing, the match after each open."""

    hits_shown = Signal()  # the listed results have their snippets
    revealed = Signal(object)  # the message id an opened result was scrolled to

    def __init__(self, engine: Engine, sidebar: Sidebar, chat: ChatView, tasks: TaskRunner,
                 parent: QObject | None = None):
        super().__init__(parent)
        self.engine, self.sidebar, self.chat, self.tasks = engine, sidebar, chat, tasks
        self._pending: tuple[int, Hit] | None = None  # a result being opened, and where it matched
        self._generation = 0

    def listed(self) -> None:
        """The list shows the results of a search (or all chats): find where each matched."""
        self._generation += 1
        query = self.sidebar.query()
        if query:
            self.tasks.run(self._find_hits(query, self._generation), what="finding search matches")

    async def _find_hits(self, query: str, generation: int) -> None:
        hits: dict[int, Hit] = {}
        for conversation_id in self.sidebar.conversation_ids()[:MAX_SNIPPETS]:
            messages = await self.engine.conversations.messages(conversation_id)
            if generation != self._generation:
                return  # listed again meanwhile
            hit = find_hit(messages, query)
            if hit is not None:
                hits[conversation_id] = hit
        self.sidebar.show_hits(hits)
        self.hits_shown.emit()

    def selected(self, conversation_id: int) -> None:
        """A chat chosen from the list: if it is a search result, its match is shown once it
        opens, and the filter is cleared."""
        if not self.sidebar.query():
            self._pending = None
            return
        hit = self.sidebar.hit_for(conversation_id)
        if hit is None:  # listed, but its snippet not found yet: look for it as it opens
            hit = Hit(None, "", search_terms(self.sidebar.query()))
        self._pending = (conversation_id, hit)
        self.sidebar.clear_search()

    def opened(self, conversation_id: int) -> None:
        pending, self._pending = self._pending, None
        if pending is None or pending[0] != conversation_id:
            return
        hit = pending[1]
        if hit.message_id is None:  # only its title matched, or not looked at yet
            widgets = self.chat.message_widgets()
            lowered = [(w.message_id, w.text().lower()) for w in widgets]
            message_id = next((mid for mid, text in lowered if mid is not None and hit.terms
                               and all(t in text for t in hit.terms)), None)
        else:
            message_id = hit.message_id
        if message_id is not None and self.chat.reveal(message_id, hit.terms):
            self.revealed.emit(message_id)
