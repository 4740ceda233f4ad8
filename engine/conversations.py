"""The conversations service (`engine.conversations`): chats and their messages as stored
— listing, naming, pinning, deleting and restoring them, their branches, exports, titles,
what the model saw for an answer, and each chat's own settings. Asking and answering is
`engine.chat`'s."""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Any

from .context import ContextReport, report_from_meta
from .errors import InvalidRequest
from .ghost import CHAT_SETTING_KEYS, MEMORY_KEY, PRESET_KEY, SAMPLING_KEY, SYSTEM_PROMPT_KEY, THINKING_KEY
from .library import stored
from .memory import TEMPORARY_KEY
from .records import THINKING_CHOICES, ConversationInfo, MessageInfo, clean_title

if TYPE_CHECKING:
    from .core import Core
    from .privacy import Privacy
    from .tools.facade import Tools


class Conversations:
    """`engine.conversations`."""

    def __init__(self, core: Core, tools: Tools, privacy: Privacy):
        self.e = core
        self.tools = tools
        self.privacy = privacy

    async def create(self, title: str = "", *, settings: dict | None = None,
                                  temporary: bool = False) -> ConversationInfo:
        """A new chat. A temporary one is kept in memory only: never written to disk, and it
        uses and creates no memories."""
        model = self.e.model_status.name if self.e.model_status else None
        title = clean_title(title)
        if temporary:
            store = await self.e.temporary_store()
            settings = {**(settings or {}), TEMPORARY_KEY: True}
            return await self.e.db(store.create_conversation, title, model, settings)
        return await self.e.db(self.e.store.create_conversation, title, model, settings)

    async def list(self, query: str | None = None) -> builtins.list[ConversationInfo]:
        return await self.e.db(self.e.store.list_conversations, query)

    async def get(self, conversation_id: int) -> ConversationInfo:
        return await self.e.db(self.e.store_for(conversation_id).get_conversation, conversation_id)

    async def rename(self, conversation_id: int, title: str) -> ConversationInfo:
        """Rename a chat; the title is put on one line and cut at TITLE_MAX_CHARS with "…"."""
        title = clean_title(title)
        if not title:
            raise InvalidRequest("a conversation title cannot be empty")
        store = self.e.store_for(conversation_id)
        return await self.e.db(store.update_conversation, conversation_id, title=title)

    async def pin(self, conversation_id: int, pinned: bool = True) -> ConversationInfo:
        return await self.e.db(self.e.store_for(conversation_id).update_conversation, conversation_id, pinned=pinned)

    async def delete(self, conversation_id: int, *, permanently: bool = False) -> None:
        """Hide a chat, restorable for `undo_seconds`, then purged from disk (engine/privacy.py);
        `permanently`: purged at once. A temporary chat is gone at once."""
        self.e.stop_answers(conversation_id)
        store = self.e.store_for(conversation_id)
        await self.e.db(store.delete_conversation, conversation_id)
        if store is self.e.temporary:
            await self.e.db(store.purge_deleted)
        elif permanently:
            await self.privacy.purge_deleted(ids=[conversation_id])
        else:
            self.privacy.schedule_purge()

    async def restore(self, conversation_id: int) -> ConversationInfo:
        return await self.e.db(self.e.store.restore_conversation, conversation_id)

    async def messages(self, conversation_id: int) -> builtins.list[MessageInfo]:
        """The visible branch of a conversation, oldest first, each answer with the library
        passages it cited."""
        return await self.e.db(stored.messages, self.e.store_for(conversation_id), conversation_id)

    async def message(self, message_id: int) -> MessageInfo:
        return await self.e.db(self.e.store_for(message_id).get_message, message_id)

    async def switch_branch(self, message_id: int) -> builtins.list[MessageInfo]:
        """Show the branch through `message_id` (a sibling picked with `< 2/3 >`)."""
        store = self.e.store_for(message_id)
        msg = await self.e.db(store.get_message, message_id)
        await self.e.db(store.switch_to, message_id)
        return await self.messages(msg.conversation_id)

    async def sibling(self, message_id: int, step: int) -> builtins.list[MessageInfo]:
        """Move to the previous (-1) or next (+1) sibling of a message and show its branch."""
        siblings = await self.e.db(self.e.store_for(message_id).siblings, message_id)
        index = min(max(siblings.index(message_id) + step, 0), len(siblings) - 1)
        return await self.switch_branch(siblings[index])

    async def export(self, conversation_id: int, fmt: str = "markdown") -> str:
        """A conversation as Markdown or JSON text, every branch (engine/export.py)."""
        from . import export

        if fmt not in ("markdown", "json"):
            raise InvalidRequest(f"unknown export format {fmt!r}; use markdown or json")
        return await self.e.db(export.render, self.e.store_for(conversation_id), conversation_id, fmt)

    async def context_report(self, message_id: int) -> ContextReport | None:
        """What the model saw for an answer: every part, its tokens, and the exact prompt."""
        msg = await self.message(message_id)
        return report_from_meta(msg.meta)

    # -- per-chat settings ------------------------------------------------------------

    async def settings(self, conversation_id: int) -> dict[str, Any]:
        """This chat's own settings: system_prompt, sampling, sampling_preset, memory and
        tools (None where the chat has none of its own and the app's settings apply)."""
        conv = await self.get(conversation_id)
        out: dict[str, Any] = {key: conv.settings.get(key) for key in CHAT_SETTING_KEYS}
        out["tools"] = await self.tools.for_conversation(conversation_id)
        return out

    def new_chat_settings(self, **changes: Any) -> dict[str, Any]:
        """The settings of a chat not made yet, checked (the keys of `update_settings`), to
        give `create(settings=...)` or `chat.send_new(settings=...)`; raises InvalidRequest."""
        return settings_for_new_chat(**changes)

    async def update_settings(self, conversation_id: int, **changes: Any) -> dict[str, Any]:
        """Change this chat's own settings; a value of None removes it (the app's setting
        applies again). Keys: system_prompt (text), sampling (SamplingParams fields),
        sampling_preset (a name), memory (True/False), tools (tool names), thinking (one of
        records.THINKING_CHOICES, for a model that takes it: engine.models.thinking_choices()).
        Checked before anything is saved; returns the chat's settings after the change."""
        _check_chat_settings(changes)
        if "tools" in changes:
            await self.tools.set_for_conversation(conversation_id, changes.pop("tools"))
        if changes:
            conv = await self.get(conversation_id)
            settings = dict(conv.settings)
            for key, value in changes.items():
                if value is None or (key == SYSTEM_PROMPT_KEY and not value.strip()):
                    settings.pop(key, None)
                else:
                    settings[key] = value
            store = self.e.store_for(conversation_id)
            await self.e.db(store.update_conversation, conversation_id, settings=settings)
        return await self.settings(conversation_id)


def _check_chat_settings(changes: dict[str, Any]) -> None:
    """Refuse an unknown key or a value of the wrong kind, before anything is saved."""
    from .inference.presets import check_layer

    unknown = sorted(set(changes) - {*CHAT_SETTING_KEYS, "tools"})
    if unknown:
        raise InvalidRequest(f"unknown chat setting(s): {', '.join(unknown)}; the chat settings are "
                             f"{', '.join([*CHAT_SETTING_KEYS, 'tools'])}")
    for key in (SYSTEM_PROMPT_KEY, PRESET_KEY):
        value = changes.get(key)
        if value is not None and not isinstance(value, str):
            raise InvalidRequest(f"the chat's {key} must be text, not {value!r}")
    if changes.get(SAMPLING_KEY) is not None:
        check_layer(changes[SAMPLING_KEY], "the chat's sampling settings")
    if changes.get(MEMORY_KEY) is not None and not isinstance(changes[MEMORY_KEY], bool):
        raise InvalidRequest(f"the chat's memory setting must be true or false, not {changes[MEMORY_KEY]!r}")
    thinking = changes.get(THINKING_KEY)
    if thinking is not None and thinking not in THINKING_CHOICES:
        raise InvalidRequest(f"the chat's thinking setting must be one of {', '.join(THINKING_CHOICES)} "
                             f"(or none for the model's default), not {thinking!r}")
    tools = changes.get("tools")
    if tools is not None and (isinstance(tools, str) or not all(isinstance(n, str) for n in tools)):
        raise InvalidRequest(f"a chat's tools must be a list of tool names, not {tools!r}")


def settings_for_new_chat(**changes: Any) -> dict[str, Any]:
    """A chat's own settings for a chat not made yet (the window's new, empty chat), checked
    as `update_settings` checks them, in the form `create(settings=...)` keeps: the first
    answer then follows them. None (or an empty system prompt) leaves a key out."""
    _check_chat_settings(changes)
    out: dict[str, Any] = {}
    for key, value in changes.items():
        if value is None or (key == SYSTEM_PROMPT_KEY and not value.strip()):
            continue
        out[key] = list(dict.fromkeys(value)) if key == "tools" else value
    return out
