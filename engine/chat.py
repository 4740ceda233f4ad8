"""The chat service (`engine.chat`): asking and answering. A question is checked, scanned
and stored, then answered as a stream of typed events (engine/turns.py does the answering);
pre-warming while the user types, ghost-text suggestions, Stop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

from .errors import InvalidRequest, WrenError
from .events import Delta, Event, Finished, FinishReason
from .ghost import (
    _SENTENCE_END,
    ENABLED_KEY,
    GHOST_PRIORITY,
    HISTORY_CHARS,
    HISTORY_MESSAGES,
    MAX_CHARS,
    MAX_DRAFT_CHARS,
    MAX_TOKENS,
    TEMPORARY_ENABLED_KEY,
    WARM_WAIT,
    Suggestion,
    _Pending,
    clean_continuation,
    partial_turn_ids,
)
from .inference.handoff import loop_sink
from .inference.sampling import SamplingParams
from .inference.worker import GenerationRequest, ModelWorker, WarmRequest
from .logs import log_event
from .memory.settings import is_temporary
from .records import Role, SendOptions, check_unicode
from .threadloop import wait_event
from .turn.plan import LATEST
from .turns import Turns

if TYPE_CHECKING:
    from .conversations import Conversations
    from .core import Core
    from .models import Models
    from .safety.facade import Safety
    from .settings import Settings

MAX_MESSAGE_CHARS = 2_000_000  # beyond this a paste is a mistake, not a question


class Chat:
    """`engine.chat`."""

    def __init__(self, core: Core, turns: Turns, conversations: Conversations, settings: Settings, safety: Safety,
                 models: Models):
        self.e = core
        self.turns = turns
        self.conversations = conversations
        self.settings = settings
        self.safety = safety
        self.models = models
        self._warm: WarmRequest | None = None
        self._ghost: _Pending | None = None

    def stop(self, conversation_id: int | None = None) -> None:
        """Stop streaming answers (all, or one conversation's) within one token."""
        self.e.stop_answers(conversation_id)

    async def prepare(self, conversation_id: int | None, draft: str, options: SendOptions | None = None) -> int | None:
        """Pre-warm while the user types: assemble the prompt this draft would make and
        prefill it into the KV cache at low priority, so after Send only what changed runs.
        A newer call cancels the older one. Returns the draft prompt's token count (None when
        no model is loaded or the draft is empty); raises ContextOverflow early for a draft
        that cannot fit. `conversation_id` None: the first message of a new chat (the system
        prompt and the draft's memories are known before the chat exists)."""
        self._cancel_warm()
        worker = self.e.loaded_worker
        if worker is None or not draft.strip() or self.e.answering(conversation_id):
            return None  # while an answer streams, its text is not final: nothing to warm yet
        shown = await self.conversations.messages(conversation_id) if conversation_id is not None else []
        _, ids = await self.turns.assemble(
            conversation_id, shown, draft, None, options or SendOptions(), worker, allow_summarize=False
        )
        if self.e.loaded_worker is not worker:
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
        worker = self.e.loaded_worker
        if worker is not None and (model is None or model == worker.name):
            tokenizer = worker.tokenizer
            window = self.e.model_status.context_length if self.e.model_status else 0
        else:
            name = model or await self.models.default()
            loop = asyncio.get_running_loop()
            try:
                info = await loop.run_in_executor(None, self.e.registry.get, name)
            except WrenError:
                return 0  # not installed yet (the starter before its first import): checked after loading
            tokenizer = await self.models.tokenizer_of(info)
            window = info.context_length
        tokens = await asyncio.get_running_loop().run_in_executor(None, tokenizer.count, text)
        if window > 0:
            from .context import load_settings
            from .context.assemble import _refuse_oversize

            reserve = (await self.e.db(load_settings, self.e.store)).reserve(window)
            _refuse_oversize(tokens, 0, window - reserve, window, reserve)
        return tokens

    async def send_new(self, text: str, options: SendOptions | None = None, *, title: str | None = None,
                       settings: dict | None = None, temporary: bool = False,
                       model: str | None = None) -> AsyncGenerator[Event, None]:
        """Start a new chat with its first question: the question is checked first
        (`check_question`) and the chat is made only once it is accepted; a chat whose
        question is refused later (the whole prompt does not fit, a safety block) is
        deleted again, so no empty chat is left. The first event, Started, carries the new
        conversation's id; a blocked question ends with Finished(BLOCKED) and no chat."""
        await self.check_question(text, model)
        conv = await self.conversations.create(" ".join(text.split())[:60] if title is None else title,
                                              settings=settings, temporary=temporary)
        store = self.e.store_for(conv.id)
        try:
            async for event in self.send(conv.id, text, options):
                yield event
        finally:
            await asyncio.shield(self.e.db(store.discard_if_empty, conv.id))

    async def send(self, conversation_id: int, text: str, options: SendOptions | None = None) -> AsyncGenerator[Event, None]:
        """Scan and commit the user message, then stream the answer as typed events.

        A blocked message is not stored and nothing is sent (SafetyNotice events, then
        Finished(BLOCKED)); a redacted one is stored and sent redacted; warnings pass with
        their notices (front ends ask first with `scan_input`). A message that cannot fit
        the context window raises ContextOverflow before anything is stored."""
        _check_text(text)
        # after the shown branch's last message; NotFound before any write
        async for event in self._ask(conversation_id, LATEST, text, options):
            yield event

    async def edit_and_resend(self, message_id: int, text: str, options: SendOptions | None = None) -> AsyncGenerator[Event, None]:
        """A new branch: the edited question beside the original, then its answer."""
        _check_text(text)
        msg = await self.conversations.message(message_id)
        if msg.role is not Role.USER:
            raise InvalidRequest(f"message {message_id} is not a question; only questions can be edited")
        async for event in self._ask(msg.conversation_id, msg.parent_id, text, options):
            yield event

    async def regenerate(self, message_id: int, options: SendOptions | None = None) -> AsyncGenerator[Event, None]:
        """A new sibling answer for the user message that `message_id` answered."""
        msg = await self.conversations.message(message_id)
        if msg.role is Role.ASSISTANT:
            if msg.parent_id is None:
                raise InvalidRequest(f"message {message_id} has no question to answer again")
            msg = await self.conversations.message(msg.parent_id)
        if msg.role is not Role.USER:
            raise InvalidRequest(f"message {message_id} is not an answer or a question")
        async for event in self.turns.answer(msg, options or SendOptions()):
            yield event

    async def replay(self, message_id: int) -> AsyncGenerator[Event, None]:
        """Answer the same question again with the answer's own model, settings and seed (a
        new sibling): with the same prompt, the same text, bit for bit."""
        msg = await self.conversations.message(message_id)
        if msg.role is not Role.ASSISTANT or msg.parent_id is None:
            raise InvalidRequest(f"message {message_id} is not an answer; only answers can be replayed")
        if not msg.sampling:
            raise InvalidRequest(f"answer {message_id} has no stored sampling settings to replay")
        worker = await self.models.ensure_loaded()
        if msg.model and worker.name != msg.model:
            raise InvalidRequest(f"answer {message_id} was written by {msg.model}; load it to replay "
                                 f"(the loaded model is {worker.name})")
        question = await self.conversations.message(msg.parent_id)
        params = SamplingParams.from_dict(msg.sampling)
        async for event in self.turns.answer(question, SendOptions(sampling=params)):
            yield event

    async def continue_answer(self, message_id: int) -> AsyncGenerator[Event, None]:
        """Extend an answer that ended stopped, interrupted or at the length limit: the same
        message grows, its prompt and text so far reused from the KV cache (engine/turns.py)."""
        async for event in self.turns.continue_answer(message_id):
            yield event

    async def _ask(self, conversation_id: int, parent_id: int | None, text: str,
                   options: SendOptions | None) -> AsyncGenerator[Event, None]:
        self._cancel_warm()  # what it cached stays cached; a stale draft must not follow
        # prepared once (engine/turns.py, engine/turn/plan.py): one read, one scan, one assembly
        events = self.turns.ask(conversation_id, parent_id, text, options or SendOptions())
        library = getattr(self.e, "library", None)  # the answer's citations of library passages
        async for event in library.cite(events, conversation_id) if library is not None else events:
            yield event

    async def generate_title(self, conversation_id: int) -> str:
        """A short title from the first exchange; saved and returned."""
        shown = await self.conversations.messages(conversation_id)
        first = next((m.content for m in shown if m.role is Role.USER), "")[:1000]
        if not first:
            raise InvalidRequest(f"conversation {conversation_id} has no messages to name it by")
        # the one being written beside the first answer, if any (engine/titles.py)
        answer = next((m.content for m in shown if m.role is Role.ASSISTANT), "")
        return await self.turns.titles.generate(conversation_id, first, answer)

    # -- ghost text ---------------------------------------------------------------

    async def ghost_text_enabled(self, conversation_id: int | None = None) -> bool:
        """Whether drafts get suggestions: the setting, and for a temporary chat its own one."""
        if await self.settings.get(ENABLED_KEY, True) is False:
            return False
        if conversation_id is not None:
            conv = await self.conversations.get(conversation_id)
            if is_temporary(conv.settings) and await self.settings.get(TEMPORARY_ENABLED_KEY, True) is False:
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
        worker = self.e.loaded_worker
        if worker is None or not await self._ghost_wanted(draft, conversation_id, temporary):
            return empty
        ids = await self._ghost_prompt(pending, conversation_id, worker)
        room = (self.e.model_status.context_length if self.e.model_status else 0) - len(ids or ())
        if not ids or room < 8:
            return empty
        written = await self._ghost_write(pending, worker, ids, min(MAX_TOKENS, room))
        if written is None:
            return empty  # a newer draft came meanwhile
        text = clean_continuation(draft, written[0], cut_short=written[1])
        log_event("ghost.suggested", chars=len(text), prompt_tokens=len(ids))
        return Suggestion(text, draft)

    async def _ghost_wanted(self, draft: str, conversation_id: int | None, temporary: bool) -> bool:
        """Whether this draft gets a suggestion at all: text, no answer being written, a
        local model (a remote one bills by the request and cannot continue an open turn),
        the settings on."""
        if not draft.strip() or self.e.answering() or self.e.destination() == "remote":
            return False
        if not await self.ghost_text_enabled(conversation_id):
            return False
        return not (temporary and await self.settings.get(TEMPORARY_ENABLED_KEY, True) is False)

    async def _ghost_prompt(self, pending: _Pending, conversation_id: int | None,
                            worker: ModelWorker) -> list[int] | None:
        """The ids of the chat with the draft as an open user turn, once the draft's
        pre-warming is done; None when a newer draft or another model came meanwhile."""
        history = await self._ghost_history(conversation_id, pending.draft, worker)
        if self._ghost is not pending or self.e.loaded_worker is not worker:
            return None
        await self._after_warm(pending)
        if self._ghost is not pending:
            return None
        tail = pending.draft[-MAX_DRAFT_CHARS:]
        ids = await asyncio.get_running_loop().run_in_executor(None, partial_turn_ids, worker.tokenizer, history, tail)
        return ids if self._ghost is pending else None

    async def _ghost_write(self, pending: _Pending, worker: ModelWorker, ids: list[int],
                           max_tokens: int) -> tuple[str, bool] | None:
        """What the model writes after the open turn, up to a sentence's end: (text, cut
        short by the token limit); None when a newer draft came while it wrote."""
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()
        params = SamplingParams(temperature=0.0, max_tokens=max_tokens, stop=("\n",))
        request = GenerationRequest(ids, params, loop_sink(events, loop), priority=GHOST_PRIORITY)
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
            stale = self._ghost is not pending
            if not stale:
                self._ghost = None
        return None if stale else ("".join(parts), cut_short)

    async def _after_warm(self, pending: _Pending) -> None:
        """Pre-warming the draft's prompt goes first: it is what makes Send fast."""
        warm = self._warm
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
        shown = await self.conversations.messages(conversation_id)
        try:
            assembled = await self.turns.assemble_context(
                conversation_id, shown, draft, None, SendOptions(), worker, allow_summarize=False)
            messages = list(assembled.messages)
            if messages and messages[-1].get("role") == "user":
                return messages[:-1]
        except WrenError as exc:  # the draft does not fit, a template problem: recent turns only
            log_event("ghost.plain_history", reason=str(exc)[:200])
        turns = [m for m in shown if m.role in (Role.USER, Role.ASSISTANT) and m.content][-HISTORY_MESSAGES:]
        return [{"role": m.role.value, "content": m.content[:HISTORY_CHARS]} for m in turns]


def _check_text(text: str) -> None:
    check_unicode(text, "the message")
    if not isinstance(text, str) or not text.strip():
        raise InvalidRequest("the message is empty; type something to send")
    if len(text) > MAX_MESSAGE_CHARS:
        raise InvalidRequest(f"the message is {len(text):,} characters long; the limit is {MAX_MESSAGE_CHARS:,}")
