"""One turn: a committed question becomes an assembled prompt, a streamed, guarded,
checkpointed answer, and a stored result. Used only by `engine.api.Engine`."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .context import REPORT_META_KEY, AssembledContext, lineage
from .context.summary import summary_prompt
from .errors import InvalidRequest, ModelNotLoaded, WrenError
from .events import (
    AnswerNotice,
    Delta,
    Event,
    Failed,
    FailureKind,
    Finished,
    FinishReason,
    MemoryNotice,
    MemoryRef,
    NoticeKind,
    Reasoning,
    SafetyNotice,
    Started,
    ToolCall,
    Usage,
)
from .inference.constrain import Constraint
from .inference.handoff import loop_sink
from .inference.sampling import SamplingParams
from .inference.worker import GenerationRequest, ModelWorker
from .logprobs import AnswerLogprobs
from .logs import log_event
from .memory import TurnOutcome, is_temporary
from .records import MessageInfo, MessageStatus, Role, can_continue
from .safety import OutputGuard
from .safety.care import needs_care
from .safety.outgoing import guard_outgoing, typed_index
from .titles import Titles
from .tools.builtin import CallContext
from .tools.capability import expected_tool, not_called_text
from .tools.parse import CallParser
from .tools.prompt import RoundRecord, ToolPlan
from .tools.runner import ToolTurn
from .turn import thinking
from .turn.checkpoint import Checkpoints
from .turn.finish import final_fields, finished_log, notice_fields
from .turn.plan import EarlyRetrieval, TurnPlan, TurnReads, read_turn
from .turn.planner import TurnPlanner, constraints, result_tokens
from .turn.state import AnswerState
from .turn.text import AnswerText, generation
from .turn.tool_round import round_limit_note, run_calls

if TYPE_CHECKING:
    from .records import ConversationInfo, ModelStatus, SendOptions
    from .safety import ScanResult
    from .store import Store
    from .tokenize import Tokenizer
    from .turn.host import TurnHost

ATTACHMENTS_KEY = "attachments"  # conversation setting: the files attached to the chat so far
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


def _keep_notice(store: Store, message_id: int, notice: AnswerNotice) -> None:
    """On the database thread: the notice joins the answer's meta["notices"]."""
    meta = store.get_message(message_id).meta
    kept = [n for n in meta.get("notices", []) if isinstance(n, dict)] if isinstance(meta.get("notices"), list) else []
    store.update_message(message_id, meta={**meta, "notices": [*kept, {"about": notice.about.value, "text": notice.text}]})


def _newest_first(known: tuple[Path, ...], new: tuple[Path, ...], message_id: int) -> tuple[tuple[Path, int | None], ...]:
    """The chat's attached files for the prompt: this question's first, then the earlier ones
    from the latest back (each with the question it came with, where known)."""
    own = tuple(Path(p) for p in new)
    return tuple((p, message_id) for p in own) + tuple((p, None) for p in reversed(known) if p not in own)


def _known_attachments(conv_settings: dict) -> tuple[Path, ...]:
    """The files attached to the chat so far (its setting `attachments`), each once."""
    earlier = conv_settings.get(ATTACHMENTS_KEY)
    return tuple(Path(p) for p in dict.fromkeys(p for p in earlier if isinstance(p, str))) if isinstance(
        earlier, list) else ()


def _loaded(host: TurnHost) -> ModelStatus:
    """The loaded model's status; a model unloaded underneath a turn is an error it reports."""
    status = host.model_status
    if status is None:
        raise ModelNotLoaded("the model was unloaded while this answer was being prepared")
    return status


class Turns:
    """The answering half of the engine; holds no state of its own beyond the engine's."""

    def __init__(self, engine: TurnHost):
        self.e = engine
        self.titles = Titles(self)
        self.planner = TurnPlanner(engine)

    # -- the prompt ------------------------------------------------------------------

    async def assemble(self, conv_id: int | None, history: list[MessageInfo], text: str, message_id: int | None,
                       options: SendOptions, worker: ModelWorker, *, allow_summarize: bool = True,
                       exclude_memories: tuple[int, ...] = (), conv_settings: dict | None = None,
                       attached: tuple[tuple[Path, int | None], ...] = (),
                       ) -> tuple[AssembledContext, list[int]]:
        """The prompt for `text` after `history` (assemble_context), and its token ids."""
        assembled = await self.assemble_context(
            conv_id, history, text, message_id, options, worker, allow_summarize=allow_summarize,
            exclude_memories=exclude_memories, conv_settings=conv_settings, attached=attached)
        loop = asyncio.get_running_loop()
        # Encoded with the chat-aware encoder: markup typed by a user stays text.
        ids = await loop.run_in_executor(None, worker.tokenizer.encode_chat, assembled.messages)
        return assembled, ids

    async def assemble_context(self, conv_id: int | None, history: list[MessageInfo], text: str,
                               message_id: int | None, options: SendOptions, worker: ModelWorker, *,
                               allow_summarize: bool = True, exclude_memories: tuple[int, ...] = (),
                               conv_settings: dict | None = None,
                               attached: tuple[tuple[Path, int | None], ...] = ()) -> AssembledContext:
        """The messages the model reads for `text` (a draft's, a continued answer's):
        engine/turn/planner.py's assembly, its settings read in one trip.
        `conv_settings`: the conversation's settings where the caller has just read them."""
        return await self.planner.assemble(conv_id, history, text, message_id, options, worker,
                                           allow_summarize=allow_summarize, exclude_memories=exclude_memories,
                                           conv_settings=conv_settings, attached=attached)

    async def plan(self, conv_id: int, parent_id: int | None, text: str, options: SendOptions,
                   worker: ModelWorker) -> TurnPlan:
        """The plan a question after `parent_id` (LATEST: the shown branch's end) would get,
        before anything is stored; `plan.fits` says whether it fits the window."""
        reads = await self.e.db(read_turn, self.e.store, self.e.store_for(conv_id), conv_id, parent_id)
        return await self.planner.plan(conv_id, reads.history, text, None, options, worker, reads.settings,
                                       allow_summarize=False)

    async def check_fits(self, conv_id: int, parent_id: int | None, text: str, options: SendOptions,
                         worker: ModelWorker) -> None:
        """Raise ContextOverflow for a message that cannot fit, before anything is stored."""
        (await self.plan(conv_id, parent_id, text, options, worker)).check()

    # -- a question ------------------------------------------------------------------

    async def ask(self, conv_id: int, parent_id: int | None, text: str, options: SendOptions) -> AsyncIterator[Event]:
        """Scan and commit the question after `parent_id` (LATEST: the shown branch's end),
        then stream its answer. Prepared once: one read, one scan, one assembly, one
        retrieval, and the question and its answer's row stored in one trip."""
        e = self.e
        store = e.store_for(conv_id)
        reads, checked = await self._read_and_scan(store, conv_id, parent_id, text)
        notices = checked.notices("input")
        for notice in notices:
            yield notice
        if checked.blocked:
            log_event("send.blocked", conversation_id=conv_id, safety=notice_fields(notices))
            yield Finished(FinishReason.BLOCKED)
            return
        text = checked.redacted_text
        plan = await self._first_plan(reads, text, options, checked)
        early = self._submit_early(plan, conv_id)  # the model reads the prompt while the rows are written
        try:
            meta = {"safety": notice_fields(notices)} if notices else {}
            user, outcome, answer = await e.db(self._commit, store, reads, text, meta, plan)
            if not outcome.empty or (outcome.skipped and outcome.intents):
                yield memory_notice(outcome)
            if plan is None or answer is None:  # the rare paths: planned again, now the question is stored
                self._drop_early(early, conv_id)
                async for event in self.answer(user, options, outcome):
                    yield event
                return
            async for event in self._answer(plan.for_message(user.id), user, answer, reads.conversation, options,
                                            early=early):
                yield event
        finally:
            self._drop_early(early, conv_id)  # a failed write, a replan: the generation is not shown

    def _submit_early(self, plan: TurnPlan | None, conv_id: int) -> _Early | None:
        """The answer's generation submitted before its question and row are stored, where
        nothing those writes say can change it: a plan without tools, for a local model. Stop
        reaches it from now on; the answer's first round takes it (`_round`)."""
        e = self.e
        worker = e.loaded_worker
        if (plan is None or plan.tools is not None or plan.sampling is None or plan.assembled is None
                or worker is None or e.destination() == "remote"):
            return None
        events: asyncio.Queue = asyncio.Queue()
        request = self._request(list(plan.prompt_ids), plan.sampling, asyncio.get_running_loop(), events, None, [],
                                plan.assembled.messages)
        request.constraint = plan.constraint
        e.answer_started(request, conv_id)
        worker.submit(request)
        return _Early(worker, request, events)

    def _drop_early(self, early: _Early | None, conv_id: int) -> None:
        """Stop an early generation no answer took (once)."""
        if early is not None and not early.taken:
            early.taken = True
            early.request.cancel.set()
            self.e.answer_ended(early.request, conv_id)

    async def _read_and_scan(self, store: Store, conv_id: int, parent_id: int | None, text: str
                             ) -> tuple[TurnReads, ScanResult]:
        """The turn's one read and the question's one scan. A short question is scanned
        first (on the loop), so the read can retrieve its memories too; a long one is scanned
        on an executor thread while the read runs."""
        e = self.e
        if not e.safety.scans_inline(text):
            reads, checked = await asyncio.gather(e.db(read_turn, e.store, store, conv_id, parent_id),
                                                  e.safety.scan(text))
            return reads, checked
        checked = await e.safety.scan(text)
        worker, status = e.loaded_worker, e.model_status
        early = None if checked.blocked or worker is None or status is None else EarlyRetrieval(
            e.memory, checked.redacted_text, status.context_length, worker.tokenizer.count, worker,
            e.memories.has_no_embedder())
        return await e.db(read_turn, e.store, store, conv_id, parent_id, early), checked

    async def _first_plan(self, reads: TurnReads, text: str, options: SendOptions, checked: ScanResult
                          ) -> TurnPlan | None:
        """The plan made before the question is stored (ContextOverflow raised here, so
        nothing is stored), or None where the answer must plan again once it is: no model,
        new attached files (they need the question's id), a tool-plan error (the answer
        reports it), history a summary may fold."""
        try:
            worker = await self.e.models.ensure_loaded()
        except WrenError:
            return None  # the question is still saved; the answer reports the failure
        conv = reads.conversation
        known = _known_attachments(conv.settings)
        status = self.e.model_status
        plan = (await self.planner.plan(
            conv.id, reads.history, text, None, options, worker, reads.settings, scan=checked,
            allow_summarize=False, attached=_newest_first(known, (), 0),
            retrieved=reads.retrieved_for(worker, status.context_length) if status else None)).check()
        if getattr(options, "attachments", ()) or plan.folds_history or plan.problem is not None:
            return None
        return plan

    def _commit(self, store: Store, reads: TurnReads, text: str, meta: dict, plan: TurnPlan | None
                ) -> tuple[MessageInfo, TurnOutcome, MessageInfo | None]:
        """On the database thread, one trip: the question, what it says to memory, and (with
        a plan its memory outcome leaves as it is) the answer's row."""
        conv = reads.conversation
        user = store.add_message(conv.id, Role.USER, text, parent_id=reads.parent_id, meta=meta)
        outcome = self.e.memory.handle_message(text, conversation_id=conv.id, message_id=user.id,
                                               conversation_settings=conv.settings)
        if plan is None or outcome.saved or outcome.forgotten or outcome.confirm_clear_all:
            return user, outcome, None  # memories changed: the retrieval is made again
        return user, outcome, self._begin(store, plan.for_message(user.id), user, outcome)

    def _begin(self, store: Store, plan: TurnPlan, user: MessageInfo, outcome: TurnOutcome | None) -> MessageInfo:
        """On the database thread: the answer's row, streaming."""
        status = _loaded(self.e)
        meta: dict[str, Any] = {REPORT_META_KEY: plan.report.to_dict()}
        if outcome is not None and (not outcome.empty or (outcome.skipped and outcome.intents)):
            meta["memory"] = outcome.to_dict()
        if plan.notices:  # a file or tools that did not fit whole: the user is told, as the model is
            meta["notices"] = [{"about": n.about.value, "text": n.text} for n in plan.notices]
        assert plan.sampling is not None
        self.e.memory.mark_used(plan.report.memory_ids)
        return store.add_message(
            user.conversation_id, Role.ASSISTANT, "", parent_id=user.id, status=MessageStatus.STREAMING,
            model=status.name, backend=status.backend, sampling=plan.sampling.to_dict(),
            prompt_tokens=len(plan.prompt_ids), meta=meta)

    # -- the answer ------------------------------------------------------------------

    async def answer(self, user: MessageInfo, options: SendOptions,
                     outcome: TurnOutcome | None = None) -> AsyncIterator[Event]:
        """An answer to the stored question `user` (Regenerate, Replay, and Send's rare paths)."""
        e = self.e
        store = e.store_for(user.conversation_id)
        reads = await e.db(read_turn, e.store, store, user.conversation_id, user.id)
        conv, chain = reads.conversation, reads.history
        try:
            worker = await e.models.ensure_loaded()
        except WrenError as exc:
            yield Failed(str(exc), FailureKind.MODEL)
            yield Finished(FinishReason.ERROR)
            return
        saved_now = tuple(m.id for m in outcome.saved) if outcome else ()
        try:
            attachments, new_files = await self._attachments(store, conv, user, options)
        except WrenError as exc:
            yield Failed(str(exc), FailureKind.INVALID_REQUEST)
            yield Finished(FinishReason.ERROR)
            return
        plan = (await self.planner.plan(
            user.conversation_id, chain[:-1], user.content, user.id, options, worker, reads.settings,
            exclude_memories=saved_now, attached=_newest_first(attachments, new_files, user.id),
            cut_for=user.id)).check()
        if plan.problem is not None:
            yield Failed(str(plan.problem), FailureKind.INVALID_REQUEST)
            yield Finished(FinishReason.ERROR)
            return
        answer = await e.db(self._begin, store, plan, user, outcome)
        async for event in self._answer(plan, user, answer, conv, options, attachments):
            yield event

    async def _answer(self, plan: TurnPlan, user: MessageInfo, answer: MessageInfo, conv: ConversationInfo,
                      options: SendOptions, attachments: tuple[Path, ...] | None = None, *,
                      early: _Early | None = None) -> AsyncIterator[Event]:
        """The planned answer streamed: its tools, the notice of an unused tool, the title.
        `early`: its generation, already submitted (Turns.ask)."""
        e = self.e
        status = _loaded(e)
        worker = await e.models.ensure_loaded()
        if early is not None and early.worker is not worker:
            self._drop_early(early, user.conversation_id)  # the model changed meanwhile
            early = None
        store = e.store_for(user.conversation_id)
        assembled = plan.assembled
        assert assembled is not None and plan.sampling is not None
        started = Started(user.conversation_id, user.id, answer.id, status.name, status.backend)
        tools = None
        if plan.tools is not None:
            if attachments is None:  # no new files (those go the planned-again way): the chat's
                attachments = _known_attachments(conv.settings)
            budget = result_tokens(plan.settings, status.context_length)
            first, later = constraints(plan.tools, plan.settings)
            tools = _ToolSession(plan.tools, assembled.messages, CallContext(user.conversation_id, attachments, budget),
                                 await e.tools.timeout(), budget, first, later,
                                 thinking.chat_tokenizer(worker.tokenizer, options, conv.settings))
        events = self.stream(worker, answer, list(plan.prompt_ids), plan.sampling, started, tools=tools,
                             messages=assembled.messages, constraint=plan.constraint, typed=user.content, early=early)
        if plan.tools is not None:
            events = self._unused_tool_notice(events, user.content, [s.name for s in plan.tools.specs], status.name, store)
        if not conv.title and not plan.history and not is_temporary(conv.settings):
            # a new chat: the engine names it beside its first answer (engine/titles.py)
            events = self.titles.around(user.conversation_id, user.content, events, care=needs_care(plan.scan.findings))
        async for event in events:
            yield event
            if plan.notices and isinstance(event, Started):
                for notice in plan.notices:
                    yield notice


    async def _unused_tool_notice(self, events: AsyncIterator[Event], question: str, offered: list[str],
                                  model: str, store: Store) -> AsyncIterator[Event]:
        """`events`, and an AnswerNotice before Finished when the question plainly wanted an
        offered tool (arithmetic, today's date) and the model answered without calling one:
        its answer is a guess the user should not take as computed (kept in meta["notices"])."""
        wanted = expected_tool(question, offered)
        called = False
        async for event in events:
            called = called or isinstance(event, ToolCall)
            if (isinstance(event, Finished) and wanted and not called and event.message_id is not None
                    and event.reason in (FinishReason.STOP, FinishReason.LENGTH)):
                notice = AnswerNotice(NoticeKind.TOOL_NOT_CALLED, not_called_text(wanted, model))
                log_event("tools.not_called", message_id=event.message_id, tool=wanted)
                await self.e.db(_keep_notice, store, event.message_id, notice)
                yield notice
            yield event

    # -- continuing an answer ------------------------------------------------------------

    async def continue_answer(self, message_id: int) -> AsyncIterator[Event]:
        """Extend an answer that ended interrupted, stopped or at the length limit: the same
        message grows. The prompt is the answer's own prompt followed by its text so far, so
        the prefix cache finds both (Usage.cached_tokens) and only the new tokens are decoded."""
        e = self.e
        answer = await e.conversations.message(message_id)
        if answer.role is not Role.ASSISTANT:
            raise InvalidRequest(f"message {message_id} is not an answer; only answers can be continued")
        if not can_continue(answer):
            raise InvalidRequest(f"answer {message_id} is {answer.status.value}; only an answer that was stopped, "
                                 "interrupted or cut at the length limit can be continued")
        if answer.parent_id is None:
            raise InvalidRequest(f"answer {message_id} has no question")
        store = e.store_for(answer.conversation_id)
        user = await e.conversations.message(answer.parent_id)
        conv = await e.db(store.get_conversation, answer.conversation_id)
        try:
            worker = await e.models.ensure_loaded()
        except WrenError as exc:
            yield Failed(str(exc), FailureKind.MODEL)
            yield Finished(FinishReason.ERROR, answer.id)
            return
        chain = await e.db(lineage, store, user.id)
        from .records import SendOptions

        known = conv.settings.get(ATTACHMENTS_KEY)  # the files its prompt had, in it again
        new = user.meta.get("attachments")
        attached = _newest_first(tuple(Path(p) for p in known if isinstance(p, str)) if isinstance(known, list) else (),
                                 tuple(Path(p) for p in new if isinstance(p, str)) if isinstance(new, list) else (),
                                 user.id)
        _, prompt_ids = await self.assemble(answer.conversation_id, chain[:-1], user.content, user.id,
                                                    SendOptions(), worker, attached=attached)
        loop = asyncio.get_running_loop()
        # its thinking first, as the model wrote it (else it would go on inside an open <think>)
        done = await loop.run_in_executor(None, thinking.resumed_ids, worker, prompt_ids, answer.reasoning,
                                          answer.content)
        ids = prompt_ids + done
        status = _loaded(e)
        room = status.context_length - len(ids)
        if room < 1:
            raise InvalidRequest(f"answer {message_id} already fills the model's context window; it cannot go on")
        saved = answer.sampling or {}
        params = SamplingParams.from_dict(saved) if saved else await e.settings.default_sampling(
            overrides=conv.settings.get("sampling"))
        params = params.with_(max_tokens=max(1, min(params.max_tokens, room)))
        await e.db(store.update_message, answer.id, status=MessageStatus.STREAMING, error=None)
        answer = await e.conversations.message(answer.id)
        started = Started(answer.conversation_id, user.id, answer.id, status.name, status.backend)
        log_event("answer.continued", conversation_id=answer.conversation_id, message_id=answer.id,
                  kept_chars=len(answer.content), prompt_tokens=len(ids))
        async for event in self.stream(worker, answer, ids, params, started, messages=None, prefix=answer.content,
                                       thought=answer.reasoning, kept_tokens=len(done)):
            yield event

    # -- tools -------------------------------------------------------------------------

    async def _attachments(self, store, conv, user: MessageInfo, options: SendOptions
                           ) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
        """The files this answer's tools may read: the ones attached to this chat so far
        (conversation setting `attachments`) and to this question (also kept in its meta);
        and the latter alone."""
        e = self.e
        new = []
        for item in getattr(options, "attachments", ()) or ():
            if not isinstance(item, (str, Path)) or not str(item).strip():
                raise InvalidRequest(f"an attachment must be a file path, not {item!r}")
            path = Path(item).expanduser().resolve()
            if not path.is_file():
                raise InvalidRequest(f"the attached file {item} does not exist or is not a file")
            new.append(str(path))
        known = [str(p) for p in _known_attachments(conv.settings)]
        if new:
            await e.db(store.update_message, user.id, meta={**user.meta, "attachments": new})
            if any(p not in known for p in new):
                known = list(dict.fromkeys([*known, *new]))
                await e.db(store.update_conversation, conv.id, settings={**conv.settings, ATTACHMENTS_KEY: known})
        return tuple(Path(p) for p in known), tuple(Path(p) for p in new)

    async def _encode_round(self, worker: ModelWorker, plan: ToolPlan, base: list[dict],
                            rounds: list[RoundRecord], *, first: bool, tokenizer: Tokenizer | None = None) -> list[int]:
        """The prompt for the next generation: the chat with every round's calls and results;
        for a forced call's first round, the call's opening too (the model writes its arguments)."""
        chat = plan.messages(base, rounds)
        tok = tokenizer or worker.tokenizer
        return await asyncio.get_running_loop().run_in_executor(None, lambda: plan.encode(tok, chat, opened=first))

    # -- the answer ------------------------------------------------------------------

    async def stream(self, worker: ModelWorker, answer: MessageInfo, prompt_ids: list[int],
                     params: SamplingParams, started: Started, *, tools: _ToolSession | None = None,
                     messages: list[dict] | None = None,
                     constraint: Constraint | None = None, prefix: str = "", thought: str = "",
                     typed: str | None = None, early: _Early | None = None,
                     kept_tokens: int = 0) -> AsyncIterator[Event]:
        """Generate the answer; with `tools`, each call the model writes pauses it: the call
        runs, its result joins the prompt and the same answer goes on (docs/tools.md). Stacked
        from engine/turn/: rounds' text, checkpoints, calls (tool_round.py), last write (finish.py).
        `early`: the first round's generation, already submitted."""
        e = self.e
        conv_id = answer.conversation_id
        store = e.store_for(conv_id)
        turn = _TurnStop(asyncio.get_running_loop())  # Stop reaches a turn that waits on a tool, not only a generation
        e.answer_started(turn, conv_id)
        state = AnswerState(
            [prefix] if prefix else [],  # a continued answer keeps its text (continue_answer)
            AnswerLogprobs(params, answer.meta, prefix),
            Checkpoints(lambda text: e.db(store.update_message, answer.id, content=text), len(prefix)))
        state.kept_tokens = kept_tokens
        if thought:  # a continued answer's thinking so far: kept, and gone on with if it was cut
            state.thinking.append(thought)
        # the thinking reaches the database while it streams too: a crash mid-thinking keeps it
        state.thinking_checkpoints = Checkpoints(
            lambda text: e.db(store.update_message, answer.id, reasoning=text.strip()), len(thought or ""))
        runner = None if tools is None else ToolTurn(
            e, tools.plan, answer.id, turn.stopped, worker.tokenizer, tools.context, destination=e.destination(),
            timeout=tools.timeout, result_tokens=tools.result_tokens)
        ids, round_params = prompt_ids, params
        try:
            while True:
                start = len(state.parts)
                text = AnswerText(OutputGuard(e.policy, e.destination()), state.probs, _parser(tools, state.number),
                                  shift=state.raw_base,
                                  # a continued answer goes on past its thinking, or inside it if cut there
                                  split=thinking.splitter(worker, ids, _continued_inside(prefix, thought, state)),
                                  count=thinking.token_counter(worker),
                                  thinking_guard=lambda: OutputGuard(e.policy, e.destination()))
                async for event in self._round(worker, answer, ids, round_params, state, text, turn, started, tools,
                                               messages, constraint, typed, early if state.number == 0 else None):
                    yield event
                ended = _round_end(text, turn)
                if ended is not None:
                    state.reason = ended
                    break
                # The model called: each call runs (or is refused) in order, then it goes on.
                assert tools is not None and runner is not None  # calls are parsed only with tools
                refuse = round_limit_note(state.number, tools.plan.max_rounds)

                async for event in run_calls(runner, text.calls, state, "".join(state.parts[start:]), refuse=refuse,
                                             save=self._tool_saver(store, answer), stopped=turn.cancel.is_set):
                    yield event
                ended = _calls_end(runner, turn, text, refuse)
                if ended is None:
                    ids, room = await self._next_prompt(worker, tools, state)
                    if room < 16:
                        ended, state.error = FinishReason.LENGTH, "the tool results filled the context window; the answer ends here"
                        yield Failed(state.error, FailureKind.INVALID_REQUEST)
                if ended is not None:
                    state.reason = ended
                    break
                round_params = params.with_(max_tokens=max(1, min(params.max_tokens, room)))
                state.raw_base += text.raw_len
                state.number += 1
        finally:
            turn.cancel.set()
            e.answer_ended(turn, conv_id)
            if runner is not None:
                runner.close()
            await asyncio.shield(self._finish(store, answer, state, len(prompt_ids)))
        usage = state.usage()  # with tools, yielded once, after the finish is saved
        if tools is not None and usage is not None:
            yield usage
        yield Finished(state.reason, answer.id)

    def _tool_saver(self, store: Store, answer: MessageInfo) -> Callable[[str, list[dict]], Awaitable[None]]:
        async def save(content: str, log: list[dict]) -> None:
            await self.e.db(store.update_message, answer.id, content=content, meta={**answer.meta, "tools": log})

        return save

    async def _next_prompt(self, worker: ModelWorker, tools: _ToolSession, state: AnswerState) -> tuple[list[int], int]:
        """The next round's prompt (the calls' results in it) and the room it leaves."""
        ids = await self._encode_round(worker, tools.plan, tools.base, state.rounds, first=False,
                                       tokenizer=tools.tokenizer)
        status = self.e.model_status
        return ids, (status.context_length - len(ids) if status else 0)

    async def _round(self, worker: ModelWorker, answer: MessageInfo, ids: list[int], params: SamplingParams,
                     state: AnswerState, text: AnswerText, turn: _TurnStop, started: Started,
                     tools: _ToolSession | None, messages: list[dict] | None, constraint: Constraint | None,
                     typed: str | None, early: _Early | None = None) -> AsyncIterator[Event]:
        """One generation of the answer: its request submitted (or `early`'s taken), its
        events shown and kept."""
        e = self.e
        conv_id = answer.conversation_id
        if early is not None:  # submitted and registered already (Turns.ask): no remote guard, no tools
            early.taken = True
            request, events, outgoing = early.request, early.events, []
        else:
            events = asyncio.Queue()
            request = self._request(ids, params, asyncio.get_running_loop(), events, tools, state.rounds, messages)
            outgoing = await self._outgoing(request, state.told, typed)
            if tools is not None:
                request.constraint = tools.first_constraint if state.number == 0 else tools.constraint
            else:
                request.constraint = constraint  # response_format (SendOptions.constraint)
            e.answer_started(request, conv_id)
        if turn.cancel.is_set():
            request.cancel.set()
        if early is None:
            worker.submit(request)
        if state.number == 0:
            yield started  # only now: a stop() right after Started must reach a request that exists
        for notice in outgoing:
            state.notices.append(notice)
            yield notice
        try:
            async for event in generation(events, text, request):
                if not _kept(event, state, tools):
                    continue
                yield event
                if isinstance(event, Delta):
                    await state.checkpoints.maybe(state.parts)
                elif isinstance(event, Reasoning) and state.thinking_checkpoints is not None:
                    await state.thinking_checkpoints.maybe(state.thinking)
        finally:
            request.cancel.set()
            e.answer_ended(request, conv_id)

    def _request(self, ids: list[int], params: SamplingParams, loop: asyncio.AbstractEventLoop,
                 events: asyncio.Queue, tools: _ToolSession | None, rounds: list[RoundRecord],
                 messages: list[dict] | None) -> GenerationRequest:
        request = GenerationRequest(ids, params, loop_sink(events, loop))
        if messages is not None:
            # a model that takes messages (a remote server) gets the chat, calls and results included
            request.messages = tools.plan.messages(tools.base, rounds) if tools is not None else messages
        return request

    async def _outgoing(self, request: GenerationRequest, told: set[SafetyNotice] | None = None,
                        typed: str | None = None) -> list[SafetyNotice]:
        """A remote model gets every message, every role, through the remote policy
        (engine/safety/outgoing.py); returns the notices not already in `told`. `typed`: the
        question as the user typed it (its message may hold attached files' text too)."""
        if request.messages is None or self.e.destination() != "remote":
            return []
        chat = request.messages
        request.messages, found = await asyncio.get_running_loop().run_in_executor(
            None, guard_outgoing, chat, self.e.policy, typed_index(chat), typed)
        new = [n for n in found if told is None or n not in told]
        if told is not None:
            told.update(new)
        return new

    async def _finish(self, store: Store, answer: MessageInfo, state: AnswerState, prompt_tokens: int) -> None:
        await self.e.db(store.update_message, answer.id, **final_fields(answer, state))
        log_event("answer.finished", **finished_log(answer, state, prompt_tokens))

    # -- short side requests: titles and summaries ------------------------------------

    async def complete(self, chat: list[dict], params: SamplingParams, *, priority: int = 1) -> str:
        """The whole text of a short request that runs behind the visible answer (a title, a
        summary): a thinking model is asked not to think, where its template takes that."""
        worker = await self.e.models.ensure_loaded()
        loop = asyncio.get_running_loop()
        tokenizer = thinking.without_thinking(worker.tokenizer)
        ids = await loop.run_in_executor(None, tokenizer.encode_chat, chat)
        events: asyncio.Queue = asyncio.Queue()
        request = GenerationRequest(ids, params, loop_sink(events, loop),
                                    priority=priority, messages=chat)
        await self._outgoing(request)
        worker.submit(request)
        parts = []
        try:
            while True:
                event = await events.get()
                if isinstance(event, Delta):
                    parts.append(event.text)
                elif isinstance(event, Finished):  # a thinking model's thinking left out
                    return thinking.answer_of(worker, ids, "".join(parts))
        finally:
            request.cancel.set()

    async def summarize(self, turns: list[dict], previous: str) -> str:
        params = SamplingParams(temperature=0.0, max_tokens=200)
        return (await self.complete(summary_prompt(turns, previous), params)).strip()


class _TurnStop:
    """Stands in the engine's running answers (`TurnHost.answer_started`) for the whole answer: `engine.chat.stop` sets `cancel` (a
    threading.Event, as on a GenerationRequest), which also sets the asyncio event `stopped`
    that a tool call or an approval waits on."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.stopped = asyncio.Event()
        self.cancel = _NotifyingEvent(loop, self.stopped)


class _NotifyingEvent(threading.Event):
    def __init__(self, loop: asyncio.AbstractEventLoop, target: asyncio.Event) -> None:
        super().__init__()
        self._loop = loop
        self._target = target

    def set(self) -> None:
        super().set()
        try:
            self._loop.call_soon_threadsafe(self._target.set)
        except RuntimeError:
            pass  # the loop is closed: nothing waits any more


@dataclass
class _Early:
    """An answer's first generation, submitted before its rows were written (Turns.ask)."""

    worker: ModelWorker
    request: GenerationRequest
    events: asyncio.Queue
    taken: bool = False  # by the answer's first round, or dropped


@dataclass
class _ToolSession:
    plan: ToolPlan
    base: list[dict]  # the assembled chat, before any call
    context: CallContext
    timeout: float
    result_tokens: int
    first_constraint: Constraint | None = None  # the first generation's (a forced call's arguments)
    constraint: Constraint | None = None  # the later generations' (calls the model starts)
    tokenizer: Tokenizer | None = None  # the model's, with the chat's thinking choice (engine/turn/thinking.py)


def _parser(tools: _ToolSession | None, number: int) -> CallParser | None:
    """The call parser for a round of an answer with tools; a forced call's first round
    starts inside the call (its opening is in the prompt)."""
    if tools is None:
        return None
    parser = CallParser(tools.plan.family)
    if number == 0 and tools.plan.forced:
        parser.feed(tools.plan.forced_prefix())
    return parser


def _continued_inside(prefix: str, thought: str, state: AnswerState) -> bool | None:
    """Whether a continued answer's first round starts inside its thinking (None: not a
    continuation's first round; the prompt says)."""
    if state.number or not (prefix or thought):
        return None
    return not prefix


def _kept(event: Event, state: AnswerState, tools: _ToolSession | None) -> bool:
    """Keep what a round's event adds to the answer; whether it is shown now (with tools,
    Usage is given once, for the whole answer)."""
    if isinstance(event, SafetyNotice):
        state.notices.append(event)
    elif isinstance(event, Delta):
        state.parts.append(event.text)
    elif isinstance(event, Reasoning):
        state.thought(event.text, time.monotonic())
    elif isinstance(event, Usage):
        state.usages.append(event)
        return tools is None
    elif isinstance(event, Failed):
        state.error = event.error
        state.interrupted = event.kind is FailureKind.INTERRUPTED
    return True


def _round_end(text: AnswerText, turn: _TurnStop) -> FinishReason | None:
    """How the answer ends after a round, or None: it called, the calls run."""
    if text.blocked:
        return FinishReason.BLOCKED
    if turn.cancel.is_set():
        return FinishReason.CANCELLED
    if text.reason is FinishReason.ERROR or not text.calls:
        return text.reason
    return None


def _calls_end(runner: ToolTurn, turn: _TurnStop, text: AnswerText, refused: str | None) -> FinishReason | None:
    """How the answer ends after its calls ran, or None: it goes on with their results."""
    if runner.stopped or turn.cancel.is_set():
        return FinishReason.CANCELLED
    if refused is not None:  # the round limit: the model was told to answer with what it has
        return FinishReason.STOP
    if text.reason is FinishReason.LENGTH and not text.calls_complete:
        return FinishReason.LENGTH  # out of tokens in the middle of a call
    return None
