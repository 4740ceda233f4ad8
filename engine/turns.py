"""One turn: a committed question becomes an assembled prompt, a streamed, guarded,
checkpointed answer, and a stored result. Used only by `engine.api.Engine`."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, AsyncIterator

from engine.context import REPORT_META_KEY, AssembledContext, ContextRequest, lineage, load_instructions, load_settings
from engine.context.summary import summary_prompt
from engine.errors import WrenError
from engine.events import (
    Delta, Event, Failed, FailureKind, Finished, FinishReason, MemoryNotice, MemoryRef, PrefillProgress,
    SafetyNotice, Started, Usage, event_to_dict,
)
from engine.inference.sampling import SamplingParams
from engine.inference.constrain import Constraint
from engine.inference.worker import GenerationRequest, ModelWorker
from engine.logs import log_event
from engine.memory import TurnOutcome
from engine.records import MessageInfo, MessageStatus, Role
from engine.safety import OutputGuard

if TYPE_CHECKING:
    from engine.api import Engine, SendOptions

CHECKPOINT_SECONDS = 0.25  # at most this much streamed text is at risk in a crash

_STATUS_FOR = {
    FinishReason.STOP: MessageStatus.COMPLETE,
    FinishReason.LENGTH: MessageStatus.COMPLETE,
    FinishReason.CANCELLED: MessageStatus.STOPPED,
    FinishReason.ERROR: MessageStatus.FAILED,
    FinishReason.BLOCKED: MessageStatus.BLOCKED,
}


def notice_fields(notices: list[SafetyNotice]) -> list[dict]:
    """Category, action, span and rule of each notice: never the matched text."""
    return [{k: v for k, v in event_to_dict(n).items() if k != "type"} for n in notices]


def memory_notice(outcome: TurnOutcome) -> MemoryNotice:
    return MemoryNotice(
        saved=tuple(MemoryRef(m.id, m.text) for m in outcome.saved),
        forgotten=tuple(MemoryRef(m.id, m.text) for m in outcome.forgotten),
        refused=tuple(reason for _, reason in outcome.refused),
        unmatched_forgets=tuple(outcome.unmatched_forgets),
        suggestions=tuple(s.text for s in outcome.suggestions),
        confirm_clear_all=outcome.confirm_clear_all,
        skipped=outcome.skipped if outcome.intents else "",
    )


class Turns:
    """The answering half of the engine; holds no state of its own beyond the engine's."""

    def __init__(self, engine: "Engine"):
        self.e = engine

    # -- the prompt ------------------------------------------------------------------

    async def assemble(self, conv_id: int, history: list[MessageInfo], text: str, message_id: int | None,
                       options: "SendOptions", worker: ModelWorker, *, allow_summarize: bool = True,
                       exclude_memories: tuple[int, ...] = (), encode: bool = True,
                       ) -> tuple[AssembledContext, list[int] | None]:
        e = self.e
        store = e._store_for(conv_id)
        conv = await e._db(store.get_conversation, conv_id)
        system = options.system_prompt
        if system is None:
            system = conv.settings.get("system_prompt") or await e.get_setting("system_prompt") or ""
        ctx = await e._db(load_settings, e.store)
        instructions = await e._db(load_instructions, e.store)
        window = e._status.context_length
        retrieved = await e._db(
            e.memory.retrieve, text, budget_tokens=ctx.memory_budget(window), count=worker.tokenizer.count,
            conversation_id=conv_id, conversation_settings=conv.settings, exclude=exclude_memories,
        )
        request = ContextRequest(
            window=window, new_message=text, history=history, conversation_id=conv_id,
            new_message_id=message_id, system_prompt=system, instructions=instructions,
            retrieved=retrieved, settings=ctx,
        )
        assembler = e._assembler_for(conv_id)
        assembled = await assembler.assemble(request, allow_summarize=allow_summarize)
        if not encode:
            return assembled, None
        loop = asyncio.get_running_loop()
        # Encoded with the chat-aware encoder: markup typed by a user stays text.
        ids = await loop.run_in_executor(None, worker.tokenizer.encode_chat, assembled.messages)
        return assembled, ids

    async def check_fits(self, conv_id: int, parent_id: int | None, text: str, options: "SendOptions",
                         worker: ModelWorker) -> None:
        """Raise ContextOverflow for a message that cannot fit, before anything is stored."""
        store = self.e._store_for(conv_id)
        history = await self.e._db(lineage, store, parent_id) if parent_id else []
        await self.assemble(conv_id, history, text, None, options, worker, allow_summarize=False, encode=False)

    # -- the answer ------------------------------------------------------------------

    async def answer(self, user: MessageInfo, options: "SendOptions",
                     outcome: TurnOutcome | None = None) -> AsyncIterator[Event]:
        e = self.e
        store = e._store_for(user.conversation_id)
        conv = await e._db(store.get_conversation, user.conversation_id)
        params = options.sampling
        if params is None:
            # The conversation's own settings over the model's defaults, field by field.
            params = await e.default_sampling(overrides=conv.settings.get("sampling"))
        try:
            worker = await e._ensure_model()
        except WrenError as exc:
            yield Failed(str(exc), FailureKind.MODEL)
            yield Finished(FinishReason.ERROR)
            return
        status = e._status
        chain = await e._db(lineage, store, user.id)
        saved_now = tuple(m.id for m in outcome.saved) if outcome else ()
        assembled, prompt_ids = await self.assemble(
            user.conversation_id, chain[:-1], user.content, user.id, options, worker, exclude_memories=saved_now,
        )
        await e._db(e.memory.mark_used, assembled.report.memory_ids)
        room = status.context_length - len(prompt_ids)
        params = params.with_(max_tokens=max(1, min(params.max_tokens, room)))
        meta: dict[str, Any] = {REPORT_META_KEY: assembled.report.to_dict()}
        if outcome is not None and (not outcome.empty or (outcome.skipped and outcome.intents)):
            meta["memory"] = outcome.to_dict()
        answer = await e._db(
            store.add_message, user.conversation_id, Role.ASSISTANT, "", parent_id=user.id,
            status=MessageStatus.STREAMING, model=status.name, backend=status.backend,
            sampling=params.to_dict(), prompt_tokens=len(prompt_ids), meta=meta,
        )
        started = Started(user.conversation_id, user.id, answer.id, status.name, status.backend)
        async for event in self.stream(worker, answer, prompt_ids, params, started,
                                       constraint=options.constraint):
            yield event

    async def stream(self, worker: ModelWorker, answer: MessageInfo, prompt_ids: list[int],
                     params: SamplingParams, started: Started,
                     constraint: Constraint | None = None) -> AsyncIterator[Event]:
        e = self.e
        store = e._store_for(answer.conversation_id)
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()
        request = GenerationRequest(prompt_ids, params, lambda ev: loop.call_soon_threadsafe(events.put_nowait, ev))
        request.constraint = constraint  # response_format (SendOptions.constraint)
        e._active.append((request, answer.conversation_id))
        parts: list[str] = []
        notices: list[SafetyNotice] = []
        guard = OutputGuard(e.policy, e._destination())
        saved_len = 0
        last_checkpoint = time.monotonic()
        usage: Usage | None = None
        error: str | None = None
        reason = FinishReason.CANCELLED  # if the consumer walks away mid-stream
        worker.submit(request)
        try:
            # Only now: a stop() right after Started must reach a request that exists.
            yield started
            while True:
                event = await events.get()
                if isinstance(event, Delta):
                    # The guard holds back only what a forbidden string could still need.
                    step = guard.feed(event.text)
                elif isinstance(event, Finished):
                    reason = event.reason
                    step = guard.finish()
                else:
                    step = None
                if step is not None:
                    for notice in step.notices:
                        notices.append(notice)
                        yield notice
                    if step.text and not step.blocked:
                        parts.append(step.text)
                        yield Delta(step.text)
                    if step.blocked:
                        reason = FinishReason.BLOCKED
                        break
                if isinstance(event, Delta):
                    now = time.monotonic()
                    if now - last_checkpoint >= CHECKPOINT_SECONDS:
                        text = "".join(parts)
                        if len(text) != saved_len:
                            await e._db(store.update_message, answer.id, content=text)
                            saved_len = len(text)
                        last_checkpoint = now
                elif isinstance(event, PrefillProgress):
                    yield event  # a long prompt is being read: how far it is
                elif isinstance(event, Usage):
                    usage = event
                    yield event
                elif isinstance(event, Failed):
                    error = event.error
                    yield event
                elif isinstance(event, Finished):
                    break
        finally:
            request.cancel.set()
            e._active.remove((request, answer.conversation_id))
            await asyncio.shield(self._finish(store, answer, parts, notices, reason, usage, error, len(prompt_ids)))
        yield Finished(reason, answer.id)

    async def _finish(self, store, answer: MessageInfo, parts: list[str], notices: list[SafetyNotice],
                      reason: FinishReason, usage: Usage | None, error: str | None, prompt_tokens: int) -> None:
        blocked = reason is FinishReason.BLOCKED
        fields: dict[str, Any] = {
            "content": "" if blocked else "".join(parts),  # a blocked answer keeps its notices, never its text
            "status": _STATUS_FOR[reason],
            "error": error,
        }
        if notices:
            fields["meta"] = {**answer.meta, "safety": notice_fields(notices)}
        if usage is not None:
            fields.update(
                completion_tokens=usage.completion_tokens,
                time_to_first_token=usage.time_to_first_token,
                tokens_per_second=usage.tokens_per_second,
            )
        await self.e._db(store.update_message, answer.id, **fields)
        log_event(
            "answer.finished", conversation_id=answer.conversation_id, message_id=answer.id,
            model=answer.model, backend=answer.backend, reason=reason.value, prompt_tokens=prompt_tokens,
            completion_tokens=usage.completion_tokens if usage else None,
            time_to_first_token=usage.time_to_first_token if usage else None,
            tokens_per_second=usage.tokens_per_second if usage else None,
            safety=notice_fields(notices), error=error,
        )

    # -- short side requests: titles and summaries ------------------------------------

    async def complete(self, chat: list[dict], params: SamplingParams, *, priority: int = 1) -> str:
        """The whole text of a short request that runs behind the visible answer."""
        worker = await self.e._ensure_model()
        loop = asyncio.get_running_loop()
        ids = await loop.run_in_executor(None, worker.tokenizer.encode_chat, chat)
        events: asyncio.Queue = asyncio.Queue()
        request = GenerationRequest(ids, params, lambda ev: loop.call_soon_threadsafe(events.put_nowait, ev),
                                    priority=priority)
        worker.submit(request)
        parts = []
        try:
            while True:
                event = await events.get()
                if isinstance(event, Delta):
                    parts.append(event.text)
                elif isinstance(event, Finished):
                    return "".join(parts)
        finally:
            request.cancel.set()

    async def summarize(self, turns: list[dict], previous: str) -> str:
        params = SamplingParams(temperature=0.0, max_tokens=200)
        return (await self.complete(summary_prompt(turns, previous), params)).strip()

    async def title(self, first_question: str) -> str:
        chat = [
            {"role": "system", "content": "You write very short titles."},
            {"role": "user", "content": f"Write a title of at most six words for a chat that starts with: {first_question}"},
        ]
        return await self.complete(chat, SamplingParams(temperature=0.0, max_tokens=16, stop=("\n",)))
