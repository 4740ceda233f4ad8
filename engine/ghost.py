"""Ghost text: while the user types and pauses, the model proposes how their own draft
might go on (a few words, up to the end of a sentence), shown grey after the cursor.

The prompt is the chat so far with the draft as an *unfinished user turn*: the template's
opening of a user message, then the draft, and no end of turn. The model therefore writes
more of the user's text instead of answering it. It runs on the model worker as a short
side request behind everything else (the answer, titles, pre-warming), a newer draft
cancels the older request, and a result is never handed back for a draft that changed.

Also here: the per-chat settings the window's chat settings panel edits
(`chat_settings`, `update_chat_settings`).
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import InvalidRequest, WrenError
from .events import Delta, Finished, FinishReason
from .inference.handoff import loop_sink
from .inference.sampling import SamplingParams
from .inference.worker import GenerationRequest
from .logs import log_event
from .memory.settings import is_temporary
from .records import Role

if TYPE_CHECKING:
    from .tokenize import Tokenizer

ENABLED_KEY = "composer.ghost_text"  # setting: suggest continuations at all (default on)
TEMPORARY_ENABLED_KEY = "composer.ghost_text_temporary"  # setting: also in temporary chats (default on)
GHOST_PRIORITY = 20  # behind the answer (0), titles (1) and pre-warming (10)
MAX_TOKENS = 24  # a suggestion is a few words; more costs time the user is not waiting for
MAX_CHARS = 120
HISTORY_MESSAGES = 4  # the last turns of the chat give the draft its context
HISTORY_CHARS = 1000  # of each of them
WARM_WAIT = 10.0  # seconds a suggestion waits at most for the draft's pre-warming to finish
MAX_DRAFT_CHARS = 4000  # a longer draft is continued from its last this many characters
_SENTENCE_END = re.compile(r"[.!?…](?=[\s\"')\]]|$)")
_SENTINEL = "\u2063wren-draft\u2063"

# Per-chat settings (conversation.settings): what the chat settings panel edits.
SYSTEM_PROMPT_KEY = "system_prompt"  # str; read by engine.turns
SAMPLING_KEY = "sampling"  # dict of SamplingParams fields; over the model's defaults
PRESET_KEY = "sampling_preset"  # the name of the preset the sampling came from (for display)
MEMORY_KEY = "memory"  # False: this chat neither uses nor saves memories (engine.memory.service)
CHAT_SETTING_KEYS = (SYSTEM_PROMPT_KEY, SAMPLING_KEY, PRESET_KEY, MEMORY_KEY)
# Named sampling presets a chat can take (over the model's own defaults); None: none.
CHAT_SAMPLING_PRESETS: dict[str, dict[str, Any] | None] = {
    "Model defaults": None,
    "Precise": {"temperature": 0.2, "top_p": 0.9},
    "Balanced": {"temperature": 0.7, "top_p": 0.95},
    "Creative": {"temperature": 1.0, "top_p": 0.98, "min_p": 0.02},
    "Same every time": {"temperature": 0.0},
}


class Suggestion(str):
    """A continuation, as a str, that also carries the draft it was made for."""

    draft: str

    def __new__(cls, text: str, draft: str) -> Suggestion:
        obj = super().__new__(cls, text)
        obj.draft = draft
        return obj

    def fits(self, draft: str) -> bool:
        """Whether it may be shown after `draft`: only after the very text it continues."""
        return bool(self) and draft == self.draft


@dataclass
class _Pending:
    draft: str
    request: GenerationRequest | None = None


def clean_continuation(draft: str, raw: str, max_chars: int = MAX_CHARS, *, cut_short: bool = False) -> str:
    """What the model wrote, made into ghost text: one line, up to the end of the first
    sentence, at most `max_chars` (cut at a word), no doubled space after the draft.
    `cut_short`: the model was stopped before it ended (its token limit), so a last word
    with no sentence end after it may be half a word, and is left out."""
    text = raw.split("\n", 1)[0].replace("\r", "").replace("\t", " ")
    if draft.endswith((" ", "\n")):
        text = text.lstrip()
    if not draft.strip():
        return ""
    end = _SENTENCE_END.search(text)
    if end is not None:
        text = text[: end.end()]
    elif cut_short and "\n" not in raw:
        cut = text.rstrip().rfind(" ")
        text = text[:cut] if cut > 0 else ""
    if len(text) > max_chars:
        cut = text.rfind(" ", 0, max_chars)
        text = text[: cut if cut > 0 else max_chars]
    text = text.rstrip()
    return text if text.strip() else ""


def partial_turn_ids(tokenizer: Tokenizer, history: list[dict], draft: str) -> list[int] | None:
    """Ids of the chat `history` followed by a user turn holding `draft` and left open
    (no end-of-turn), so the model goes on writing the user's text. The history and the
    draft are encoded as text (typed markup stays text); only the template's own opening
    of the turn is read as special tokens. None when the template gives no clean split."""
    probe = [*history, {"role": "user", "content": _SENTINEL}]
    rendered = tokenizer.render_chat(probe, add_generation_prompt=False)
    at = rendered.find(_SENTINEL)
    if at < 0:
        return None
    head = rendered[:at]
    bos = tokenizer.encode("")
    if history:
        before = tokenizer.render_chat(history, add_generation_prompt=False)
        if not head.startswith(before):
            return partial_turn_ids(tokenizer, [], draft)  # the template re-renders earlier turns
        ids = tokenizer.encode_chat(history, add_generation_prompt=False)
        opening = head[len(before):]
    else:
        ids, opening = list(bos), head
    for part, special in ((opening, True), (draft, False)):
        piece = tokenizer.encode(part, special=special) if part else []
        if bos and piece[: len(bos)] == bos:
            piece = piece[len(bos):]
        ids.extend(piece)
    return ids


class GhostText:
    """Engine mixin: `suggest_continuation` and the per-chat settings."""

    _ghost: _Pending | None = None

    async def ghost_text_enabled(self, conversation_id: int | None = None) -> bool:
        """Whether drafts get suggestions: the setting, and for a temporary chat its own one."""
        if await self.get_setting(ENABLED_KEY, True) is False:  # type: ignore[attr-defined]
            return False
        if conversation_id is not None:
            conv = await self.get_conversation(conversation_id)  # type: ignore[attr-defined]
            if is_temporary(conv.settings) and await self.get_setting(TEMPORARY_ENABLED_KEY, True) is False:  # type: ignore[attr-defined]
                return False
        return True

    async def suggest_continuation(self, draft: str, conversation_id: int | None = None, *,
                                   temporary: bool = False) -> Suggestion:
        """A short continuation of the user's own `draft` (empty: none). Never loads a
        model; nothing for a remote model, while an answer is being written, or when the
        settings turn it off (`temporary`: the draft is for a temporary chat not made yet).
        A newer call cancels this one, which then returns an empty Suggestion; so does
        cancelling the awaiting task (the next keystroke)."""
        if not isinstance(draft, str):
            raise InvalidRequest(f"the draft must be text, not {type(draft).__name__}")
        previous = self._ghost
        if previous is not None and previous.request is not None:
            previous.request.cancel.set()
        pending = _Pending(draft)
        self._ghost = pending
        empty = Suggestion("", draft)
        worker = self._worker  # type: ignore[attr-defined]
        if not draft.strip() or worker is None or self._active:  # type: ignore[attr-defined]
            return empty
        if self._destination() == "remote":  # type: ignore[attr-defined]
            return empty  # a remote model bills by the request and cannot continue an open turn
        if not await self.ghost_text_enabled(conversation_id):
            return empty
        if temporary and await self.get_setting(TEMPORARY_ENABLED_KEY, True) is False:  # type: ignore[attr-defined]
            return empty
        history = await self._ghost_history(conversation_id, draft, worker)
        if self._ghost is not pending or self._worker is not worker:  # type: ignore[attr-defined]
            return empty
        await self._after_warm(pending)
        if self._ghost is not pending:
            return empty
        loop = asyncio.get_running_loop()
        tail = draft[-MAX_DRAFT_CHARS:]
        ids = await loop.run_in_executor(None, partial_turn_ids, worker.tokenizer, history, tail)
        if not ids or self._ghost is not pending:
            return empty
        room = (self._status.context_length if self._status else 0) - len(ids)  # type: ignore[attr-defined]
        if room < 8:
            return empty
        events: asyncio.Queue = asyncio.Queue()
        params = SamplingParams(temperature=0.0, max_tokens=min(MAX_TOKENS, room), stop=("\n",))
        request = GenerationRequest(ids, params, loop_sink(events, loop),
                                    priority=GHOST_PRIORITY)
        pending.request = request
        worker.submit(request)
        parts: list[str] = []
        cut_short = False
        try:
            while True:
                event = await events.get()
                if isinstance(event, Delta):
                    parts.append(event.text)
                    if _SENTENCE_END.search("".join(parts)) or len("".join(parts)) > MAX_CHARS:
                        request.cancel.set()  # enough: the rest would be cut anyway
                elif isinstance(event, Finished):
                    cut_short = event.reason is FinishReason.LENGTH
                    break
        finally:
            request.cancel.set()
            stale = self._ghost is not pending  # a newer draft came meanwhile
            if not stale:
                self._ghost = None
        if stale:
            return empty
        text = clean_continuation(draft, "".join(parts), cut_short=cut_short)
        log_event("ghost.suggested", chars=len(text), prompt_tokens=len(ids))
        return Suggestion(text, draft)

    async def _after_warm(self, pending: _Pending) -> None:
        """Pre-warming the draft's prompt goes first: it is what makes Send fast."""
        warm = self._warm  # type: ignore[attr-defined]
        waited = 0.0
        while warm is not None and not warm.done.is_set() and not warm.cancel.is_set() and waited < WARM_WAIT:
            if self._ghost is not pending:
                return
            await asyncio.sleep(0.02)
            waited += 0.02

    async def _ghost_history(self, conversation_id: int | None, draft: str, worker: Any) -> list[dict]:
        """The chat before the draft. Where a chat exists, the very messages Send would
        assemble (system prompt, memories, history), so the suggestion's prompt shares its
        whole beginning with the pre-warmed one and the cache serves both; a shorter
        recent history if that cannot be assembled."""
        if conversation_id is None:
            return []
        shown = await self.messages(conversation_id)  # type: ignore[attr-defined]
        try:
            from .api import SendOptions

            assembled = await self._turns.assemble_context(  # type: ignore[attr-defined]
                conversation_id, shown, draft, None, SendOptions(), worker, allow_summarize=False)
            messages = list(assembled.messages)
            if messages and messages[-1].get("role") == "user":
                return messages[:-1]
        except WrenError as exc:  # the draft does not fit, a template problem: recent turns only
            log_event("ghost.plain_history", reason=str(exc)[:200])
        turns = [m for m in shown if m.role in (Role.USER, Role.ASSISTANT) and m.content][-HISTORY_MESSAGES:]
        return [{"role": m.role.value, "content": m.content[:HISTORY_CHARS]} for m in turns]

    # -- per-chat settings ------------------------------------------------------------

    async def chat_settings(self, conversation_id: int) -> dict[str, Any]:
        """This chat's own settings: system_prompt, sampling, sampling_preset, memory and
        tools (None where the chat has none of its own and the app's settings apply)."""
        conv = await self.get_conversation(conversation_id)  # type: ignore[attr-defined]
        out: dict[str, Any] = {key: conv.settings.get(key) for key in CHAT_SETTING_KEYS}
        out["tools"] = await self.conversation_tools(conversation_id)  # type: ignore[attr-defined]
        return out

    async def update_chat_settings(self, conversation_id: int, **changes: Any) -> dict[str, Any]:
        """Change this chat's own settings; a value of None removes it (the app's setting
        applies again). Keys: system_prompt (text), sampling (SamplingParams fields),
        sampling_preset (a name), memory (True/False), tools (tool names). Checked before
        anything is saved; returns the chat's settings after the change."""
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
        if "tools" in changes:
            await self.set_conversation_tools(conversation_id, changes.pop("tools"))  # type: ignore[attr-defined]
        if changes:
            conv = await self.get_conversation(conversation_id)  # type: ignore[attr-defined]
            settings = dict(conv.settings)
            for key, value in changes.items():
                if value is None or (key == SYSTEM_PROMPT_KEY and not value.strip()):
                    settings.pop(key, None)
                else:
                    settings[key] = value
            store = self._store_for(conversation_id)  # type: ignore[attr-defined]
            await self._db(store.update_conversation, conversation_id, settings=settings)  # type: ignore[attr-defined]
        return await self.chat_settings(conversation_id)
