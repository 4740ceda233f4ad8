"""The Engine's settings-page half: memories, custom instructions, context and safety
settings, diagnostics. Every call runs off the caller's loop thread."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import paths
from .context import ContextSettings, Instructions, load_instructions, load_settings, save_instructions
from .context.settings import SETTING_KEY as CONTEXT_KEY
from .errors import InvalidRequest
from .events import SafetyAction
from .keep_alive import DEFAULT_KEEP_ALIVE, KEEP_ALIVE_SETTING, seconds
from .memory import MemoryInfo, MemorySettings, Suggestion
from .performance import PARALLEL_KEY, PREFIX_CACHE_KEY, PerformanceSettings
from .records import check_unicode
from .safety import Policy, user_policy

if TYPE_CHECKING:
    from .store import Store


class Preferences:
    """Mixed into `Engine`; relies on its `store`, `memory`, `policy` and `_db`."""

    store: Store

    # -- memories --------------------------------------------------------------------

    async def list_memories(self, query: str | None = None, limit: int = 500) -> list[MemoryInfo]:
        if query and query.strip():
            return await self._db(self.memory.search, query, limit)
        return await self._db(self.memory.list, limit)

    async def memories_by_id(self, memory_ids: list[int]) -> dict[int, MemoryInfo]:
        """The memories that still exist among `memory_ids` (an answer's provenance)."""
        return await self._db(self.memory.get_many, memory_ids)

    async def add_memory(self, text: str) -> MemoryInfo:
        return await self._db(self.memory.add, check_unicode(text, "the memory"))

    async def edit_memory(self, memory_id: int, text: str) -> MemoryInfo:
        return await self._db(self.memory.edit, memory_id, check_unicode(text, "the memory"))

    async def delete_memory(self, memory_id: int) -> MemoryInfo:
        """Returns the deleted memory, for undo with `restore_memory`."""
        return await self._db(self.memory.delete, memory_id)

    async def restore_memory(self, memory: MemoryInfo) -> MemoryInfo:
        return await self._db(self.memory.restore, memory)

    async def clear_memories(self) -> int:
        return await self._db(self.memory.clear)

    async def remember_message(self, message_id: int, text: str | None = None) -> MemoryInfo:
        """The "Remember this" action: a message (or an edited excerpt) becomes a memory."""
        text = None if text is None else check_unicode(text, "the memory")
        return await self._db(self.memory.remember_message, message_id, text)

    async def accept_suggestion(self, text: str, source_message_id: int | None = None,
                                conversation_id: int | None = None) -> MemoryInfo:
        suggestion = Suggestion(check_unicode(text, "the memory"), source_message_id)
        return await self._db(self.memory.accept, suggestion, conversation_id=conversation_id)

    async def memory_settings(self) -> MemorySettings:
        return await self._db(self.memory.settings)

    async def update_memory_settings(self, **changes: bool) -> MemorySettings:
        """enabled=, reference_history=, suggest=."""
        return await self._db(self.memory.update_settings, **changes)

    # -- what the model is told --------------------------------------------------------

    async def instructions(self) -> Instructions:
        return await self._db(load_instructions, self.store)

    async def set_instructions(self, about_me: str, how_to_respond: str) -> Instructions:
        value = Instructions(about_me=about_me, how_to_respond=how_to_respond)
        await self._db(save_instructions, self.store, value)
        return value

    async def context_settings(self) -> ContextSettings:
        return await self._db(load_settings, self.store)

    async def set_context_settings(self, **values: Any) -> ContextSettings:
        current = (await self.context_settings()).to_dict()
        settings = ContextSettings.from_dict({**current, **values})  # refuses bad values
        await self._db(self.store.set_setting, CONTEXT_KEY, settings.to_dict())
        return settings

    # -- speed and memory ----------------------------------------------------------------

    async def performance_settings(self) -> PerformanceSettings:
        """A stored value that is no longer valid (edited by hand) falls back to the default."""
        parallel = await self.get_setting(PARALLEL_KEY)
        prefix_mb = await self.get_setting(PREFIX_CACHE_KEY)
        try:
            return PerformanceSettings.from_stored(parallel, prefix_mb)
        except InvalidRequest:
            return PerformanceSettings()

    async def set_performance_settings(self, **values: Any) -> PerformanceSettings:
        """parallel_sequences=, prefix_cache_mb=; a bad value is refused with what was wrong.
        They take effect when a model next loads."""
        settings = PerformanceSettings(**{**(await self.performance_settings()).to_dict(), **values})
        await self.set_setting(PARALLEL_KEY, settings.parallel_sequences)
        await self.set_setting(PREFIX_CACHE_KEY, settings.prefix_cache_mb)
        return settings

    async def terminal_keep_alive(self) -> float:
        """Seconds `wren ask`'s resident engine keeps the model loaded after a question
        (the setting; 0: each question is answered in its own process)."""
        return seconds(await self.get_setting(KEEP_ALIVE_SETTING, DEFAULT_KEEP_ALIVE))

    async def set_terminal_keep_alive(self, value: float) -> None:
        """Takes effect at the resident engine's next idle moment, and for every `wren ask`
        without --keep-alive or WREN_KEEP_ALIVE."""
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
            raise InvalidRequest(f"the terminal's keep-alive must be 0 or more seconds, got {value!r}")
        await self.set_setting(KEEP_ALIVE_SETTING, value)

    # -- safety --------------------------------------------------------------------------

    def safety_rules(self) -> list[user_policy.RuleRow]:
        """Every category with its action for the local model and for remote servers."""
        return user_policy.rule_rows(self.policy)

    async def set_safety_action(self, category: str, destination: str, action: SafetyAction) -> None:
        await self._change_policy(user_policy.set_action, category, destination, SafetyAction(action))

    async def blocklist(self) -> tuple[list[str], list[str]]:
        """The user's own blocked (words, patterns)."""
        return await asyncio.get_running_loop().run_in_executor(None, self.blocklist_now)

    def blocklist_now(self) -> tuple[list[str], list[str]]:
        """`blocklist()` read on the caller's thread (a small file): for a page filling itself."""
        return user_policy.blocklist(paths.data_dir())

    async def set_blocklist(self, words: list[str], patterns: list[str]) -> None:
        """Replace the user's own blocked words and patterns; a bad pattern is refused."""
        await self._change_policy(user_policy.set_blocklist, words, patterns)

    async def _change_policy(self, change, *args: Any) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, change, paths.data_dir(), *args)
        self.policy, self.policy_warnings = await loop.run_in_executor(None, Policy.load)

    # -- diagnostics ---------------------------------------------------------------------

    def logs_folder(self) -> Path:
        return paths.logs_dir()

    async def diagnostics_bundle(self) -> bytes:
        """A zip of the redacted logs and system facts, for a support request."""
        from .logs import diagnostics_bundle

        return await asyncio.get_running_loop().run_in_executor(None, diagnostics_bundle)
