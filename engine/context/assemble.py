"""Context assembly: fit system text, custom instructions, memories, a running summary of
older turns, recent turns and the new message into the model's window, keeping a reserve for
the answer, and record every decision in a `ContextReport`."""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import InvalidRequest
from ..library.cite import HEADER as DOCUMENTS_HEADER
from ..library.cite import block
from ..library.retrieve import Passage
from ..memory.records import Retrieved, SourceKind
from .attachments import SHARE_OF_ROOM, AttachedFile, AttachmentFit
from .parts import (
    HEADERS,
    Msg,
    clip,
    end_of,
    group_part,
    ids_of,
    messages_for,
    positions,
    section,
    turn_starts,
    usable,
)
from .report import ContextPart, ContextReport, PartKind, PartState
from .settings import ContextSettings, Instructions
from .summary import SavedSummary, Summaries
from .thinking import thinking_parts

log = logging.getLogger(__name__)

# turns: [{"role", "content"}, …] oldest first; returns the new running summary
Summarize = Callable[[list[dict], str], "str | Awaitable[str]"]
RunDb = Callable[..., Awaitable[Any]]

_COST_CACHE_LIMIT = 100_000
# Library passages may take this share of the window (and at most half the room left after
# the question, its files and memories): the chat's own turns keep the rest.
DOCUMENT_SHARE = 0.25


class ContextOverflow(InvalidRequest):
    """The message (or the fixed instructions) cannot fit the window; nothing was sent."""

    def __init__(self, message: str, *, tokens: int, limit: int):
        super().__init__(message)
        self.tokens = tokens
        self.limit = limit


@dataclass(frozen=True)
class ContextRequest:
    window: int  # the model's context length in tokens
    new_message: str
    history: Sequence[Any] = ()  # MessageInfo or {"role", "content", "id"} dicts, oldest first
    conversation_id: int | None = None
    new_message_id: int | None = None
    system_prompt: str = ""
    instructions: Instructions = field(default_factory=Instructions)
    retrieved: Sequence[Retrieved] = ()  # best first, from MemoryService.retrieve
    settings: ContextSettings = field(default_factory=ContextSettings)
    attachments: Sequence[AttachedFile] = ()  # the chat's attached files, the newest first
    documents: Sequence[Passage] = ()  # library passages, best first, numbered [1], [2], … in that order


@dataclass(frozen=True)
class AssembledContext:
    messages: list[dict]  # the chat to render
    report: ContextReport
    prompt_ids: list[int] | None = None  # the encoded prompt, when built with an encoder


class ContextAssembler:
    """Builds prompts for one model. `count(text)` gives token counts; `render` (messages →
    prompt text) fills the report's rendered prompt; with `encode_rendered` (prompt text →
    ids) or `count_chat` (messages → tokens) the final prompt is measured exactly and trimmed
    if the estimate was short."""

    def __init__(self, count: Callable[[str], int], *,
                 count_chat: Callable[[list[dict]], int] | None = None,
                 render: Callable[[list[dict]], str] | None = None,
                 encode_rendered: Callable[[str], list[int]] | None = None,
                 summaries: Summaries | None = None, summarize: Summarize | None = None,
                 run_db: RunDb | None = None, message_overhead: int = 4, base_overhead: int = 4,
                 max_summary_calls: int = 4):
        self.count = count
        self.count_chat = count_chat
        self.render = render
        self.encode_rendered = encode_rendered if render is not None else None
        self.summaries = summaries
        self.summarize = summarize
        self.run_db = run_db
        self.message_overhead = message_overhead
        self.base_overhead = base_overhead
        self.max_summary_calls = max(1, max_summary_calls)
        self._costs: dict[tuple[int | None, int, int], int] = {}

    @classmethod
    def for_tokenizer(cls, tokenizer, **kwargs) -> ContextAssembler:
        """Counts with a `engine.tokenize.Tokenizer`, with per-message template overhead
        measured once from its chat template."""
        count_chat = lambda messages: len(tokenizer.encode_chat(messages))  # noqa: E731
        one = count_chat([{"role": "user", "content": "hello"}])
        two = count_chat([{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hello"}])
        word = tokenizer.count("hello")
        per_message = max(2, two - one - word + 1)
        kwargs.setdefault("message_overhead", per_message)
        kwargs.setdefault("base_overhead", max(0, one - word - per_message) + 2)
        # The same ids as encode_chat, without rendering the prompt a second time.
        encode = lambda text: tokenizer.encode(text, special=True)  # noqa: E731
        return cls(tokenizer.count, count_chat=count_chat, render=tokenizer.render_chat,
                   encode_rendered=encode, **kwargs)

    # -- costs ---------------------------------------------------------------------

    def _cost(self, m: Msg) -> int:
        key = (m.id, len(m.content), hash(m.content) if m.id is None else 0)
        cost = self._costs.get(key)
        if cost is None:
            if len(self._costs) > _COST_CACHE_LIMIT:
                self._costs.clear()
            cost = self._costs[key] = self.count(m.content) + self.message_overhead
        return cost

    def _known_cost(self, m: Msg) -> int | None:
        return self._costs.get((m.id, len(m.content), hash(m.content) if m.id is None else 0))

    def _fit(self, history: list[Msg], turns: list[int], room: int) -> int:
        """The earliest turn start from which every later message fits in `room`."""
        used, start = 0, len(history)
        for begin in reversed(turns):
            cost = sum(self._cost(m) for m in history[begin:start])
            if used + cost > room:
                break
            used += cost
            start = begin
        return start

    async def _db(self, fn: Callable, *args: Any) -> Any:
        return await self.run_db(fn, *args) if self.run_db is not None else fn(*args)

    # -- assembly ------------------------------------------------------------------

    async def assemble(self, request: ContextRequest, *, allow_summarize: bool = True) -> AssembledContext:
        """Fit the request into its window. `allow_summarize=False` (drafts, pre-warm) uses a
        saved summary but never calls the model: turns it would fold are marked dropped."""
        started = time.perf_counter()
        window, s = request.window, request.settings
        if window <= 0:
            raise InvalidRequest(f"the model's context window must be positive, not {window}")
        reserve = s.reserve(window)
        budget = window - reserve
        history = usable(request.history, request.new_message_id)
        parts: list[ContextPart] = []

        fixed = self.base_overhead + self.message_overhead
        sections: dict[PartKind, str] = {}
        for kind, body in ((PartKind.SYSTEM, request.system_prompt),
                           (PartKind.ABOUT_ME, request.instructions.about_me),
                           (PartKind.HOW_TO_RESPOND, request.instructions.how_to_respond)):
            if body and body.strip():
                text = section(kind, body.strip())
                sections[kind] = text
                tokens = self.count(text) + 1
                fixed += tokens
                parts.append(ContextPart(kind, PartState.INCLUDED, tokens, text=body.strip()))
        new_tokens = self.count(request.new_message) + self.message_overhead
        _refuse_oversize(new_tokens, fixed, budget, window, reserve)
        room = budget - fixed - new_tokens
        # Attached files go in with the question, before memories and older turns: the
        # question is about them. The rest of the room stays for those.
        files = AttachmentFit(request.attachments, self.count)
        file_limit = int(room * SHARE_OF_ROOM)
        new_text, file_parts, file_tokens = files.fit(request.new_message, file_limit)
        room -= file_tokens

        retrieved, used = self._pick_retrieved(request.retrieved, min(s.memory_budget(window), room // 2), parts)
        documents, doc_tokens = self._pick_documents(
            request.documents, min(int(window * DOCUMENT_SHARE), (room - used) // 2), parts)
        if documents:
            sections[PartKind.DOCUMENT] = documents
        used += doc_tokens
        room -= used  # `used` goes on to count the summary too: the estimate's variable part

        turns = turn_starts(history)
        recent_from = self._fit(history, turns, room)
        summary: SavedSummary | None = None
        calls, skipped = 0, (0, 0)
        if recent_from > 0:
            summary_room = min(s.summary_budget(window), room // 2)
            recent_room = room - summary_room
            recent_from = self._fit(history, turns, recent_room)
            saved = await self._saved_summary(request.conversation_id, history, recent_from)
            saved_end = end_of(saved, positions(history))
            summary = saved if saved_end else None
            if saved_end < recent_from and allow_summarize and self.summarize is not None:
                target = max(self._fit(history, turns, int(recent_room * s.refill)), recent_from)
                if target >= len(history) > recent_from:
                    target = turns[-1] if turns[-1] >= recent_from else recent_from
                first = self._first_to_fold(history, saved_end, target, window)
                extended, calls, reached = await self._extend(request, history, saved, first, target, window)
                if calls:
                    summary, saved_end, skipped = extended, reached, (saved_end, first)
            recent_from = max(recent_from, saved_end)
            parts += self._history_parts(history, saved_end, recent_from, summary, summary_room, skipped)
            if summary is not None and saved_end:
                sections[PartKind.SUMMARY] = section(PartKind.SUMMARY, self._trim(summary.text, summary_room))
                used += next(p.tokens for p in parts if p.kind is PartKind.SUMMARY)
        recent = history[recent_from:]
        recent_parts = [ContextPart(PartKind.TURN, PartState.INCLUDED, self._cost(m), ids_of(m.id), m.role)
                        for m in recent]
        new_part = ContextPart(PartKind.NEW_MESSAGE, PartState.INCLUDED, new_tokens,
                               ids_of(request.new_message_id), "user")

        def shrink(tokens: int, budget: int) -> str | None:
            """The question with its files cut so an exact count of `tokens` comes nearer
            `budget` (by the files' share of the overrun, as the estimate counts them), or
            None: nothing left to cut."""
            nonlocal file_tokens, file_limit
            if not any(p.state is PartState.INCLUDED for p in file_parts):
                return None
            cut = max(1, (tokens - budget) * file_tokens // max(1, tokens))
            # the limit falls by at least 1/32 every time (the files' frame can keep their cost
            # above it), so the files end left out at worst and this ends in a few dozen steps
            file_limit = max(0, min(file_limit - max(1, file_limit // 32), file_tokens - cut))
            text, file_parts[:], file_tokens = files.fit(request.new_message, file_limit)
            return text

        messages, prompt_tokens, rendered, ids = self._measure(
            sections, retrieved, recent, recent_parts, parts, new_text, budget,
            fixed + new_tokens + used + file_tokens, shrink)
        all_parts = parts + recent_parts + thinking_parts(request.history, recent) + file_parts + [new_part]
        report = ContextReport(
            window=window, reserve=reserve, prompt_tokens=prompt_tokens,
            exact=ids is not None or self.count_chat is not None,
            parts=tuple(all_parts), rendered_prompt=rendered,
            summary_through=summary.through_id if summary is not None and PartKind.SUMMARY in sections else None, summarize_calls=calls,
            elapsed_ms=round((time.perf_counter() - started) * 1000, 3),
        )
        return AssembledContext(messages, report, ids)

    async def _saved_summary(self, conversation_id: int | None, history: list[Msg],
                             recent_from: int) -> SavedSummary | None:
        """The summary needing no model call that leaves the most turns verbatim (the earliest
        ending at or after `recent_from`), else the furthest one, to extend."""
        if self.summaries is None:
            return None
        where = positions(history)
        found = await self._db(self.summaries.on_path, conversation_id, list(where))
        ends = [(end_of(s, where), s) for s in found]
        free = [pair for pair in ends if pair[0] >= recent_from]
        if free:
            return min(free, key=lambda pair: pair[0])[1]
        return max(ends, key=lambda pair: pair[0], default=(0, None))[1]

    def _pick_documents(self, passages: Sequence[Passage], limit: int, parts: list[ContextPart]) -> tuple[str, int]:
        """The passages that fit `limit` as one section, and its cost; each passage is a
        part, included or dropped with the reason. Numbers stay those of the ranking, so a
        dropped passage leaves a gap and a citation of it is dropped too."""
        blocks, used = [], self.count(DOCUMENTS_HEADER) + 2 if passages else 0
        for number, passage in enumerate(passages, start=1):
            text = block(number, passage)
            cost = self.count(text) + 1
            if used + cost > limit:
                parts.append(ContextPart(PartKind.DOCUMENT, PartState.DROPPED, cost, (passage.chunk_id,), text=text,
                                         note=f"over the document budget ({limit} tokens)"))
                continue
            blocks.append(text)
            used += cost
            parts.append(ContextPart(PartKind.DOCUMENT, PartState.INCLUDED, cost, (passage.chunk_id,), text=text))
        if not blocks:
            return "", 0
        return DOCUMENTS_HEADER + "\n\n" + "\n\n".join(blocks), used

    def _pick_retrieved(self, items: Sequence[Retrieved], limit: int, parts: list[ContextPart]) -> tuple[list[Retrieved], int]:
        chosen, used, headed = [], 0, set()
        for item in items:
            kind = PartKind.MEMORY if item.kind is SourceKind.MEMORY else PartKind.PAST_CHAT
            cost = (item.tokens or self.count(item.text) + 2) + (0 if kind in headed else self.count(HEADERS[kind]) + 1)
            if used + cost > limit:
                parts.append(ContextPart(kind, PartState.DROPPED, cost, (item.id,), text=item.text,
                                         note="over the memory budget"))
                continue
            used += cost
            headed.add(kind)
            chosen.append(item)
            parts.append(ContextPart(kind, PartState.INCLUDED, cost, (item.id,), text=item.text))
        return chosen, used

    def _first_to_fold(self, history: list[Msg], start: int, end: int, window: int) -> int:
        """Where folding starts: at most `max_summary_calls` chunks before `end`, so a long
        imported chat is not summarized for minutes before its first answer."""
        chunk_limit = max(256, window // 2)
        allowed, used, first = self.max_summary_calls * chunk_limit * 0.9, 0, end
        for n in range(end - 1, start - 1, -1):
            used += min(self._cost(history[n]), chunk_limit)
            if used > allowed:
                break
            first = n
        return first

    async def _extend(self, request: ContextRequest, history: list[Msg], saved: SavedSummary | None,
                      start: int, end: int, window: int) -> tuple[SavedSummary | None, int, int]:
        """Fold history[start:end] into the running summary, in chunks the model can read.

        Returns the summary, the model calls made, and where the summary now ends."""
        summarize = self.summarize
        assert summarize is not None, "folding needs a summarizer (assemble checks for one first)"
        chunk_limit = max(256, window // 2)
        summary, calls, chunk, size, reached = saved, 0, [], 0, start
        for n in range(start, end):
            m = history[n]
            cost = self._cost(m)
            chunk.append({"role": m.role, "content": clip(m.content, cost, chunk_limit)})
            size += min(cost, chunk_limit)
            last_of_chunk = n == end - 1 or size + self._cost(history[n + 1]) > chunk_limit
            if not last_of_chunk:
                continue
            try:
                result = summarize(chunk, summary.text if summary else "")
                text = (await result) if inspect.isawaitable(result) else result
            except Exception as exc:  # a failed summary must not fail the turn: drop instead
                log.warning("summarizing conversation %s failed: %s", request.conversation_id, exc)
                break
            calls += 1
            covered = (summary.covered if summary else 0) + len(chunk)
            summary = SavedSummary(m.id if m.id is not None else -1, " ".join(str(text).split()), covered)
            if self.summaries is not None and m.id is not None:
                await self._db(self.summaries.save, request.conversation_id, summary)
            chunk, size, reached = [], 0, n + 1
        return summary, calls, reached

    def _history_parts(self, history: list[Msg], summarized: int, recent_from: int,
                       summary: SavedSummary | None, summary_room: int,
                       skipped: tuple[int, int]) -> list[ContextPart]:
        parts = []
        if summary is not None and summarized:
            tokens = self.count(section(PartKind.SUMMARY, self._trim(summary.text, summary_room))) + 1
            trimmed = self.count(summary.text) > summary_room
            parts.append(ContextPart(PartKind.SUMMARY, PartState.INCLUDED, tokens, (summary.through_id,),
                                     text=summary.text, items=summary.covered,
                                     note="shortened to fit its budget" if trimmed else ""))
            gap_from, gap_to = skipped
            ranges = [(0, gap_from, PartState.SUMMARIZED, ""),
                      (gap_from, gap_to, PartState.DROPPED,
                       f"too far back to summarize in one turn ({self.max_summary_calls} model calls at most)"),
                      (gap_to, summarized, PartState.SUMMARIZED, "")]
            for begin, end, state, note in ranges:
                if end > begin:
                    parts.append(group_part(history[begin:end], state, self._known_cost, note))
        if recent_from > summarized:
            parts.append(group_part(history[summarized:recent_from], PartState.DROPPED, self._known_cost,
                                     "older than the window and not summarized (no summarizer or it failed)"))
        return parts

    def _trim(self, text: str, limit: int) -> str:
        """Cut from the front (the oldest events) until `text` fits `limit` tokens."""
        if self.count(text) <= limit:
            return text
        low, high = 0, len(text)
        while low < high:
            mid = (low + high) // 2
            if self.count(text[mid:]) <= limit - 2:
                high = mid
            else:
                low = mid + 1
        return "…" + text[low:].lstrip()

    def _measure(self, sections, retrieved, recent, recent_parts, parts, new_message, budget, floor, shrink=None):
        """Build the messages; with an exact counter, drop the oldest turns (then the lowest
        ranked memories, then attached files' text: `shrink`) while the real prompt is over budget."""
        while True:
            messages = messages_for(sections, retrieved, recent, new_message)
            ids = None
            if self.encode_rendered is not None:
                rendered = self.render(messages)
                ids = self.encode_rendered(rendered)
                tokens = len(ids)
            elif self.count_chat is not None:
                tokens = self.count_chat(messages)
            else:
                estimate = floor + sum(p.tokens for p in recent_parts if p.state is PartState.INCLUDED)
                return messages, estimate, self._render(messages), None
            if tokens <= budget:
                return messages, tokens, rendered if ids is not None else self._render(messages), ids
            if recent:
                index = next(i for i, p in enumerate(recent_parts) if p.state is PartState.INCLUDED)
                end = index + 1
                while end < len(recent_parts) and recent_parts[end].role != "user":
                    end += 1
                for i in range(index, end):
                    recent_parts[i] = replace(recent_parts[i], state=PartState.DROPPED,
                                              note="dropped: the exact count ran over the estimate")
                recent = recent[end - index:]
            elif retrieved:
                gone, retrieved = retrieved[-1], retrieved[:-1]
                for i in range(len(parts) - 1, -1, -1):
                    if parts[i].source_ids == (gone.id,) and parts[i].state is PartState.INCLUDED \
                            and parts[i].kind in (PartKind.MEMORY, PartKind.PAST_CHAT):
                        parts[i] = replace(parts[i], state=PartState.DROPPED,
                                           note="dropped: the exact count ran over the estimate")
                        break
            elif shrink is not None and (cut := shrink(tokens, budget)) is not None:
                new_message = cut
            else:
                raise ContextOverflow(
                    f"the prompt is {tokens} tokens and only {budget} fit; shorten the message or "
                    "the custom instructions", tokens=tokens, limit=budget,
                )

    def _render(self, messages: list[dict]) -> str:
        if self.render is not None:
            return self.render(messages)
        return "\n\n".join(f"<{m['role']}>\n{m['content']}" for m in messages)


def _refuse_oversize(new_tokens: int, fixed: int, budget: int, window: int, reserve: int) -> None:
    if new_tokens + fixed <= budget:
        return
    if new_tokens > budget - fixed and fixed < budget // 2:
        raise ContextOverflow(
            f"your message is about {new_tokens:,} tokens, but this model reads {window:,} tokens "
            f"at a time and keeps {reserve:,} for its answer, so a message can be at most about "
            f"{max(0, budget - fixed):,} tokens here; nothing was sent — shorten the message, split "
            "it into parts, or pick a model with a longer context",
            tokens=new_tokens, limit=max(0, budget - fixed),
        )
    raise ContextOverflow(
        f"the system prompt and custom instructions take about {fixed:,} tokens of the "
        f"{budget:,} this model has for a prompt; nothing was sent — shorten them in settings",
        tokens=fixed + new_tokens, limit=budget,
    )
