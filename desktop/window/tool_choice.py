"""The composer's tools menu for the chat the window shows: what it lists and ticks (the
chat's own choice, else the tools new chats start with), the user's picks saved per chat or
for new chats, and the user's decisions on tool calls waiting in an answer."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject

from wren.engine.api import Engine

from .seams import StatusLine, TaskRunner, ToolMenu


class ToolChoice(QObject):
    def __init__(self, engine: Engine, *, tools: ToolMenu, status: StatusLine, tasks: TaskRunner,
                 current_chat: Callable[[], int | None], opening: Callable[[], int], parent: QObject | None = None):
        """Given the menu, the status bar and the task runner by their seams (seams.py), the
        open chat's id and which opening of a chat the window is at (a load for an earlier one
        is dropped)."""
        super().__init__(parent)
        self.engine = engine
        self.tools = tools
        self.status = status
        self.tasks = tasks
        self.current_chat = current_chat
        self.opening = opening
        self._generation = 0
        self._picked = 0  # the user's changes to the menu's ticks, counted
        self._shown_at = -1  # the chat opening the menu's ticks belong to
        tools.refresh_requested.connect(self.load)
        tools.changed.connect(self._chosen)
        tools.default_chosen.connect(self._default_chosen)

    def approve(self, call_id: str, decision: str) -> None:
        """The user's decision on a tool call waiting in an answer (once, always, deny)."""
        self.status.clearMessage()  # "Wren wants to run …" is answered
        try:
            self.engine.tools.approve(call_id, decision)
        except Exception as exc:  # the call ended meanwhile (Stop, the chat was closed)
            self.status.showMessage(f"The tool call is no longer waiting: {exc}", 8000)

    def cancel(self, call_id: str) -> None:
        self.engine.tools.cancel(call_id)

    def load(self, start_servers: bool = False) -> None:
        self.tasks.run(self.load_for(self.current_chat(), start_servers), what="listing the tools")

    async def load_for(self, conversation_id: int | None, start_servers: bool = False) -> None:
        """The tools for the composer's menu and the chat's choice. The menu opening (start_servers)
        refreshes the list only: the ticks stay as the user left them (a new chat's are not saved yet)."""
        self._generation += 1
        generation, picked = self._generation, self._picked
        shown = self.opening()  # which opening of a chat this load is for
        keep = start_servers and self.tools.loaded and self._shown_at == shown
        if start_servers:  # the menu was opened: MCP servers start now, lazily, to list their tools
            await self.engine.tools.prepare_sources()
        tools = await self.engine.tools.list()
        saved = await self.engine.settings.get("tools.default")
        default = [n for n in saved if isinstance(n, str)] if isinstance(saved, list) else []
        support = await self.engine.tools.support()
        chosen = None
        if not keep:
            chosen = await self.engine.tools.for_conversation(conversation_id) if conversation_id is not None else None
            if chosen is None:
                chosen = list(default)
            if not set(chosen) <= {t.name for t in tools}:  # MCP tools of servers not started yet
                await self.engine.tools.prepare_sources(chosen)  # only the servers this chat uses
                tools = await self.engine.tools.list()
        if generation == self._generation and shown == self.opening():
            if keep or picked != self._picked:  # the user ticked meanwhile: theirs stands
                chosen = self.tools.chosen()
            self.tools.set_tools(tools, chosen or [])
            self.tools.set_default(default)
            self.tools.set_support(support.calls_tools if support else None, support.reason if support else "")
            self._shown_at = shown

    def _default_chosen(self, names: list[str]) -> None:
        """The composer's "Use these for new chats": the tools a new chat starts with."""
        self.tools.set_default(names)
        self.tasks.run(self.engine.settings.set("tools.default", list(names) or None), what="saving the tools for new chats")
        self.status.showMessage(f"New chats will start with: {', '.join(names) or 'no tools'}", 5000)

    def picked(self, names: list[str]) -> None:
        """A choice made elsewhere (a new chat's settings) counts as the user's, as a tick does."""
        self._chosen(names)

    def _chosen(self, names: list[str]) -> None:
        self._picked += 1
        current = self.current_chat()
        if current is not None:
            self.tasks.run(self.engine.tools.set_for_conversation(current, names), what="choosing the tools")
