"""One turn: a committed question becomes an assembled prompt, a streamed, guarded,
checkpointed answer, and a stored result. Used only by `engine.api.Engine`."""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .context import REPORT_META_KEY, AssembledContext, ContextRequest, lineage, load_instructions, load_settings
from .context.attachments import cut_notices, needs_reader, read_attached
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
    PrefillProgress,
    SafetyNotice,
    Started,
    ToolCall,
    ToolResult,
    Usage,
    event_to_dict,
)
from .inference.constrain import Constraint, ConstraintError
from .inference.handoff import loop_sink
from .inference.sampling import SamplingParams
from .inference.worker import GenerationRequest, ModelWorker
from .logprobs import AnswerLogprobs
from .logs import log_event
from .memory import TurnOutcome, is_temporary
from .records import MessageInfo, MessageStatus, Role
from .safety import GuardStep, OutputGuard
from .safety.care import needs_care, with_care_note
from .safety.outgoing import guard_outgoing, typed_index
from .titles import Titles
from .tools import facade as tool_settings
from .tools.builtin import READ_FILE, CallContext
from .tools.capability import expected_tool, not_called_text
from .tools.fit import FittedTools, fit_tools
from .tools.parse import CallParser, ParsedCall
from .tools.prompt import RoundRecord, ToolPlan, plan_for
from .tools.runner import ToolHost, ToolTurn

if TYPE_CHECKING:
    import numpy as np

    from .api import ModelStatus, SendOptions
    from .context import ContextAssembler
    from .memory import MemoryService
    from .safety import ScanResult
    from .safety.care import CareMessage
    from .store import Store
    from .tools.registry import ToolRegistry

ATTACHMENTS_KEY = "attachments"  # conversation setting: the files attached to the chat so far
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


class TurnHost(ToolHost, Protocol):
    """Everything the answering half (Turns, Titles) uses of the engine: the seam between
    them (docs/architecture.md, "Seams"). `Engine` implements it; Turns reaches nothing else
    of the engine's, and no private member (tests/engine/test_seams.py)."""

    @property
    def store(self) -> Store: ...
    @property
    def memory(self) -> MemoryService: ...
    @property
    def tool_registry(self) -> ToolRegistry: ...
    @property
    def model_status(self) -> ModelStatus | None: ...  # the loaded model's name, backend, window
    @property
    def loaded_worker(self) -> ModelWorker | None: ...
    async def ensure_model(self) -> ModelWorker: ...
    async def db(self, fn: Any, *args: Any, **kwargs: Any) -> Any: ...  # on the database thread
    def store_for(self, record_id: int) -> Store: ...  # the main store, or temporary chats' one
    def assembler_for(self, conversation_id: int | None) -> ContextAssembler: ...
    def destination(self) -> str: ...  # "local" or "remote": which safety policy column applies
    def answer_started(self, request: Any, conversation_id: int) -> None: ...  # Stop can reach it
    def answer_ended(self, request: Any, conversation_id: int) -> None: ...
    async def memory_query_vector(self, text: str, conversation_settings: dict | None = None
                                  ) -> np.ndarray | None: ...
    async def get_setting(self, key: str, default: Any = None) -> Any: ...
    async def get_message(self, message_id: int) -> MessageInfo: ...
    async def default_sampling(self, model: str | None = None, *, overrides: dict | None = None,
                               preset: bool = True) -> SamplingParams: ...
    async def scan_input(self, text: str) -> ScanResult: ...
    def care_message(self, language: str | None = None) -> CareMessage: ...
    async def tool_timeout(self) -> float: ...
    async def prepare_tool_sources(self, names: Iterable[str] | None = None) -> None: ...


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
        """The messages the model reads for `text`: system prompt, memories, the history
        that fits, the text of the `attached` files ((path, message id), the newest first).
        `conv_settings`: the conversation's settings where the caller has just read them."""
        e = self.e

        def read() -> tuple[dict, Any, Any, Any]:
            # one trip to the database thread for everything the prompt reads
            own = conv_settings
            if own is None:  # conv_id None: the first message of a new chat (Engine.prepare)
                own = e.store_for(conv_id).get_conversation(conv_id).settings if conv_id is not None else {}
            return own, e.store.get_setting("system_prompt"), load_settings(e.store), load_instructions(e.store)

        conv_settings, default_system, ctx, instructions = await e.db(read)
        system = options.system_prompt
        if system is None:
            system = conv_settings.get("system_prompt") or default_system or ""
        if needs_care((await e.scan_input(text)).findings):  # e.g. self-harm: the model is asked for care
            system = with_care_note(system, e.care_message().system_note)
        window = _loaded(e).context_length
        query_vector = await e.memory_query_vector(text, conv_settings)  # on the executor
        retrieved = await e.db(
            e.memory.retrieve, text, budget_tokens=ctx.memory_budget(window), count=worker.tokenizer.count,
            conversation_id=conv_id, conversation_settings=conv_settings, exclude=exclude_memories,
            query_vector=query_vector,
        )
        files = await asyncio.get_running_loop().run_in_executor(None, read_attached, attached, window) if attached else ()
        request = ContextRequest(
            window=window, new_message=text, history=history, conversation_id=conv_id,
            new_message_id=message_id, system_prompt=system, instructions=instructions,
            retrieved=retrieved, settings=ctx, attachments=files,
        )
        return await e.assembler_for(conv_id).assemble(request, allow_summarize=allow_summarize)

    async def check_fits(self, conv_id: int, parent_id: int | None, text: str, options: SendOptions,
                         worker: ModelWorker) -> None:
        """Raise ContextOverflow for a message that cannot fit, before anything is stored."""
        store = self.e.store_for(conv_id)

        def read() -> tuple[list[Any], dict]:
            history: list[Any] = lineage(store, parent_id) if parent_id else []  # rows, as Store.lineage
            return history, store.get_conversation(conv_id).settings

        history, settings = await self.e.db(read)
        await self.assemble_context(conv_id, history, text, None, options, worker, allow_summarize=False,
                                    conv_settings=settings)

    # -- the answer ------------------------------------------------------------------

    async def answer(self, user: MessageInfo, options: SendOptions,
                     outcome: TurnOutcome | None = None) -> AsyncIterator[Event]:
        e = self.e
        store = e.store_for(user.conversation_id)
        conv, chain = await e.db(lambda: (store.get_conversation(user.conversation_id), lineage(store, user.id)))
        params = options.sampling
        if params is None:
            # The conversation's own settings over the model's defaults, field by field.
            params = await e.default_sampling(overrides=conv.settings.get("sampling"))
        if params.temperature > 0 and params.seed is None:
            # every sampled answer keeps the seed it used (in its sampling), so Replay can redo it
            params = params.with_(seed=secrets.randbits(62))
        try:
            worker = await e.ensure_model()
        except WrenError as exc:
            yield Failed(str(exc), FailureKind.MODEL)
            yield Finished(FinishReason.ERROR)
            return
        status = _loaded(e)
        saved_now = tuple(m.id for m in outcome.saved) if outcome else ()
        try:
            attachments, new_files = await self._attachments(store, conv, user, options)
        except WrenError as exc:
            yield Failed(str(exc), FailureKind.INVALID_REQUEST)
            yield Finished(FinishReason.ERROR)
            return
        assembled, prompt_ids = await self.assemble(
            user.conversation_id, chain[:-1], user.content, user.id, options, worker, exclude_memories=saved_now,
            conv_settings=conv.settings, attached=_newest_first(attachments, new_files, user.id),
        )
        try:  # read_attachment joins the tools only for a file the prompt could not hold whole
            plan = await self._tool_plan(conv.settings, options, worker, needs_reader(assembled.report))
        except WrenError as exc:
            yield Failed(str(exc), FailureKind.INVALID_REQUEST)
            yield Finished(FinishReason.ERROR)
            return
        dropped = None
        if plan is not None:  # the tools that fit the window; the user is told of the rest
            fitted = await self._fit_tools(worker, plan, assembled.messages, status.context_length)
            plan, dropped = fitted.plan, fitted.note
            if plan is not None:
                prompt_ids = fitted.prompt_ids
            if dropped:
                log_event("tools.dropped", conversation_id=user.conversation_id, offered=fitted.offered,
                          kept=len(plan.entries) if plan else 0, reason=dropped)
        room = status.context_length - len(prompt_ids)
        params = params.with_(max_tokens=max(1, min(params.max_tokens, room)))
        meta: dict[str, Any] = {REPORT_META_KEY: assembled.report.to_dict()}
        if outcome is not None and (not outcome.empty or (outcome.skipped and outcome.intents)):
            meta["memory"] = outcome.to_dict()
        cut = [AnswerNotice(NoticeKind.ATTACHMENT_CUT, t) for t in cut_notices(assembled.report, user.id)]
        cut += [AnswerNotice(NoticeKind.TOOLS_DROPPED, dropped)] if dropped else []
        if cut:  # a file or tools that did not fit whole: the user is told, as the model is
            meta["notices"] = [{"about": n.about.value, "text": n.text} for n in cut]

        def begin() -> MessageInfo:
            e.memory.mark_used(assembled.report.memory_ids)
            return store.add_message(
                user.conversation_id, Role.ASSISTANT, "", parent_id=user.id, status=MessageStatus.STREAMING,
                model=status.name, backend=status.backend, sampling=params.to_dict(),
                prompt_tokens=len(prompt_ids), meta=meta)

        answer = await e.db(begin)
        started = Started(user.conversation_id, user.id, answer.id, status.name, status.backend)
        tools = None
        if plan is not None:
            budget = await self._result_tokens(status.context_length)
            tools = _ToolSession(plan, assembled.messages, CallContext(user.conversation_id, attachments, budget),
                                 await e.tool_timeout(), budget)
            await self._constrain(tools)
        events = self.stream(worker, answer, prompt_ids, params, started, tools=tools, messages=assembled.messages,
                             constraint=options.constraint if tools is None else None, typed=user.content)
        if plan is not None:
            events = self._unused_tool_notice(events, user.content, [s.name for s in plan.specs], status.name, store)
        if not conv.title and len(chain) == 1 and not is_temporary(conv.settings):
            # a new chat: the engine names it beside its first answer (engine/titles.py)
            events = self.titles.around(user.conversation_id, user.content, events)
        async for event in events:
            yield event
            if cut and isinstance(event, Started):
                for notice in cut:
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
        answer = await e.get_message(message_id)
        if answer.role is not Role.ASSISTANT:
            raise InvalidRequest(f"message {message_id} is not an answer; only answers can be continued")
        if not can_continue(answer):
            raise InvalidRequest(f"answer {message_id} is {answer.status.value}; only an answer that was stopped, "
                                 "interrupted or cut at the length limit can be continued")
        if answer.parent_id is None:
            raise InvalidRequest(f"answer {message_id} has no question")
        store = e.store_for(answer.conversation_id)
        user = await e.get_message(answer.parent_id)
        conv = await e.db(store.get_conversation, answer.conversation_id)
        try:
            worker = await e.ensure_model()
        except WrenError as exc:
            yield Failed(str(exc), FailureKind.MODEL)
            yield Finished(FinishReason.ERROR, answer.id)
            return
        chain = await e.db(lineage, store, user.id)
        from .api import SendOptions

        known = conv.settings.get(ATTACHMENTS_KEY)  # the files its prompt had, in it again
        new = user.meta.get("attachments")
        attached = _newest_first(tuple(Path(p) for p in known if isinstance(p, str)) if isinstance(known, list) else (),
                                 tuple(Path(p) for p in new if isinstance(p, str)) if isinstance(new, list) else (),
                                 user.id)
        _, prompt_ids = await self.assemble(answer.conversation_id, chain[:-1], user.content, user.id,
                                                    SendOptions(), worker, attached=attached)
        loop = asyncio.get_running_loop()
        tokenizer = worker.tokenizer
        done = await loop.run_in_executor(None, lambda: tokenizer.encode(answer.content))
        if tokenizer.add_bos and done[:1] == [tokenizer.bos_id]:
            done = done[1:]
        ids = prompt_ids + done
        status = _loaded(e)
        room = status.context_length - len(ids)
        if room < 1:
            raise InvalidRequest(f"answer {message_id} already fills the model's context window; it cannot go on")
        saved = answer.sampling or {}
        params = SamplingParams.from_dict(saved) if saved else await e.default_sampling(
            overrides=conv.settings.get("sampling"))
        params = params.with_(max_tokens=max(1, min(params.max_tokens, room)))
        await e.db(store.update_message, answer.id, status=MessageStatus.STREAMING, error=None)
        answer = await e.get_message(answer.id)
        started = Started(answer.conversation_id, user.id, answer.id, status.name, status.backend)
        log_event("answer.continued", conversation_id=answer.conversation_id, message_id=answer.id,
                  kept_chars=len(answer.content), prompt_tokens=len(ids))
        async for event in self.stream(worker, answer, ids, params, started, messages=None, prefix=answer.content):
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
        earlier = conv.settings.get(ATTACHMENTS_KEY)
        known = list(dict.fromkeys([*(p for p in earlier if isinstance(p, str))] if isinstance(earlier, list) else []))
        if new:
            await e.db(store.update_message, user.id, meta={**user.meta, "attachments": new})
            if any(p not in known for p in new):
                known = list(dict.fromkeys([*known, *new]))
                await e.db(store.update_conversation, conv.id, settings={**conv.settings, ATTACHMENTS_KEY: known})
        return tuple(Path(p) for p in known), tuple(Path(p) for p in new)

    async def _tool_plan(self, conv_settings: dict, options: SendOptions, worker: ModelWorker,
                         attached: bool) -> ToolPlan | None:
        """Which tools this answer may call (docs/tools.md), None for none."""
        e = self.e
        choice = getattr(options, "tool_choice", "auto") or "auto"
        if not isinstance(choice, str):
            raise InvalidRequest(f"tool_choice must be auto, none or a tool's name, not {choice!r}")
        if choice == "none":
            return None
        asked = getattr(options, "tools", None)
        saved = await e.db(e.store.get_settings, tool_settings.DEFAULT_KEY, tool_settings.DISABLED_KEY,
                            tool_settings.MAX_ROUNDS_KEY)
        default = saved.get(tool_settings.DEFAULT_KEY)
        # MCP servers start lazily: those that own a tool this answer may call start now
        # (a server that fails to start is left out; its state and log say why).
        wanted = asked if asked is not None else conv_settings.get("tools")
        if not isinstance(wanted, (list, tuple)):
            wanted = default if isinstance(default, list) else []
        mcp_names = [n for n in [*wanted, choice] if isinstance(n, str) and "__" in n]  # SERVER__TOOL
        if mcp_names:
            await e.prepare_tool_sources(mcp_names)
        if asked is not None:
            if isinstance(asked, str) or not all(isinstance(n, str) for n in asked):
                raise InvalidRequest(f"SendOptions.tools must be a tuple of tool names, not {asked!r}")
            names = list(asked)
            unknown = [n for n in names if e.tool_registry.find(n) is None]
            if unknown:
                known = ", ".join(e.tool_registry.names()) or "none"
                raise InvalidRequest(f"there is no tool named {', '.join(map(repr, unknown))}; the tools are: {known}")
        elif isinstance(conv_settings.get("tools"), list):
            names = [n for n in conv_settings["tools"] if isinstance(n, str)]
        else:
            names = [n for n in default if isinstance(n, str)] if isinstance(default, list) else []
        forced = None if choice == "auto" else choice
        if forced is not None:
            if e.tool_registry.find(forced) is None:
                known = ", ".join(e.tool_registry.names()) or "none"
                raise InvalidRequest(f"tool_choice names {forced!r}, which is not a tool; the tools are: {known}")
            if forced not in names:
                names.append(forced)
        if attached and READ_FILE.name not in names:
            names.append(READ_FILE.name)  # the user attached a file: the model may read it
        off = saved.get(tool_settings.DISABLED_KEY)
        disabled = {n for n in off if isinstance(n, str)} if isinstance(off, list) else set()
        if forced in disabled:
            raise InvalidRequest(f"the tool {forced} is switched off; switch it on in Settings → Tools first")
        entries = [(s, src) for s, src in e.tool_registry.entries() if s.name in names and s.name not in disabled]
        if not entries:
            return None
        rounds = saved.get(tool_settings.MAX_ROUNDS_KEY)
        max_rounds = rounds if isinstance(rounds, int) and rounds >= 1 else tool_settings.DEFAULT_MAX_ROUNDS
        def plan() -> ToolPlan:
            model_type = None
            try:  # the family where the template does not say: config.json's model_type
                config = json.loads((Path(worker.model_dir) / "config.json").read_text("utf-8"))
                model_type = config.get("model_type") if isinstance(config, dict) else None
            except (OSError, ValueError, TypeError, AttributeError):
                pass
            return plan_for(worker.tokenizer, entries, forced=forced, max_rounds=max_rounds,
                            model_type=model_type if isinstance(model_type, str) else None)

        return await asyncio.get_running_loop().run_in_executor(None, plan)

    async def _constrain(self, tools: _ToolSession) -> None:
        """Constrained decoding for the calls (engine.inference.constrain): a forced call's
        arguments must fit its schema; with tool_choice auto, a call the model starts must
        be a valid call of an offered tool (setting tools.constrain, default on). A schema the
        grammar engine cannot take leaves that answer unconstrained (the arguments are still
        validated before the call runs)."""
        plan = tools.plan
        try:
            if plan.forced:
                tools.first_constraint = plan.forced_constraint()
            if await self.e.get_setting(tool_settings.CONSTRAIN_KEY, True) is not False:
                tools.constraint = plan.calls_constraint(lazy=True)
                if not plan.forced:
                    tools.first_constraint = tools.constraint
        except ConstraintError as exc:
            log_event("tools.unconstrained", reason=str(exc))

    async def _result_tokens(self, context_length: int) -> int:
        value = await self.e.get_setting(tool_settings.RESULT_TOKENS_KEY)
        budget = value if isinstance(value, int) and value > 0 else tool_settings.DEFAULT_RESULT_TOKENS
        return max(64, min(budget, context_length // 4))

    async def _fit_tools(self, worker: ModelWorker, plan: ToolPlan, base: list[dict],
                         context_length: int) -> FittedTools:
        """engine/tools/fit.py's cut of `plan` to the window, off the loop (it encodes)."""
        return await asyncio.get_running_loop().run_in_executor(None, lambda: fit_tools(
            plan, lambda p: p.encode(worker.tokenizer, p.messages(base, []), opened=True), context_length))

    async def _encode_round(self, worker: ModelWorker, plan: ToolPlan, base: list[dict],
                            rounds: list[RoundRecord], *, first: bool) -> list[int]:
        """The prompt for the next generation: the chat with every round's calls and results;
        for a forced call's first round, the call's opening too (the model writes its arguments)."""
        chat = plan.messages(base, rounds)
        return await asyncio.get_running_loop().run_in_executor(
            None, lambda: plan.encode(worker.tokenizer, chat, opened=first))

    # -- the answer ------------------------------------------------------------------

    async def stream(self, worker: ModelWorker, answer: MessageInfo, prompt_ids: list[int],
                     params: SamplingParams, started: Started, *, tools: _ToolSession | None = None,
                     messages: list[dict] | None = None,
                     constraint: Constraint | None = None, prefix: str = "",
                     typed: str | None = None) -> AsyncIterator[Event]:
        """Generate the answer; with `tools`, each call the model writes pauses it: the call
        runs, its result joins the prompt and the same answer goes on (docs/tools.md)."""
        e = self.e
        conv_id = answer.conversation_id
        store = e.store_for(conv_id)
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()
        turn = _TurnStop(loop)  # Engine.stop reaches a turn that waits on a tool, not only a generation
        e.answer_started(turn, conv_id)
        parts: list[str] = [prefix] if prefix else []  # a continued answer keeps its text (continue_answer)
        probs = AnswerLogprobs(params, answer.meta, prefix)  # token probabilities, with params.logprobs
        notices: list[SafetyNotice] = []
        tool_log: list[dict] = []
        saved_len = len(prefix)
        last_checkpoint = time.monotonic()
        usages: list[Usage] = []
        error: str | None = None
        interrupted = False  # the model's stream broke mid-answer (a remote server)
        reason = FinishReason.CANCELLED  # if the consumer walks away mid-stream
        rounds: list[RoundRecord] = []
        runner = None
        if tools is not None:
            runner = ToolTurn(e, tools.plan, answer.id, turn.stopped, worker.tokenizer, tools.context,
                              destination=e.destination(), timeout=tools.timeout, result_tokens=tools.result_tokens)
        ids, round_params, raw_base, number = prompt_ids, params, 0, 0
        told: set[SafetyNotice] = set()  # outgoing notices already given in an earlier round
        try:
            while True:
                request = self._request(ids, round_params, loop, events, tools, rounds, messages)
                outgoing = await self._outgoing(request, told, typed)
                if tools is not None:
                    request.constraint = tools.first_constraint if number == 0 else tools.constraint
                else:
                    request.constraint = constraint  # response_format (SendOptions.constraint)
                e.answer_started(request, conv_id)
                if turn.cancel.is_set():
                    request.cancel.set()
                worker.submit(request)
                if number == 0:
                    # Only now: a stop() right after Started must reach a request that exists.
                    yield started
                for notice in outgoing:
                    notices.append(notice)
                    yield notice
                parser = CallParser(tools.plan.family) if tools is not None else None
                if tools is not None and parser is not None and number == 0 and tools.plan.forced:
                    parser.feed(tools.plan.forced_prefix())
                guard = OutputGuard(e.policy, e.destination())
                calls: list[ParsedCall] = []
                round_start = len(parts)
                raw_len = 0
                blocked = cut = False
                round_reason = FinishReason.CANCELLED
                try:
                    while True:
                        event = await events.get()
                        if isinstance(event, (Delta, Finished)):
                            final = isinstance(event, Finished)
                            if isinstance(event, Finished):
                                round_reason = event.reason
                            elif cut:
                                continue  # the calls are complete: the rest is not shown
                            else:
                                probs.arrived(event)
                            text = event.text if isinstance(event, Delta) else ""
                            pieces: list = (parser.finish() if final else parser.feed(text)) if parser else (
                                [] if final else [text])
                            steps: list[GuardStep] = []
                            for piece in pieces:
                                if isinstance(piece, ParsedCall):
                                    calls.append(piece)
                                elif not blocked:
                                    raw_len += len(piece)
                                    steps.append(guard.feed(piece))
                            if final and not blocked:
                                steps.append(guard.finish())
                            for step in steps:
                                for notice in step.notices:
                                    if raw_base:
                                        notice = _shifted(notice, raw_base)
                                    notices.append(notice)
                                    yield notice
                                if step.text and not step.blocked:
                                    parts.append(step.text)
                                    yield Delta(step.text, probs.attach())
                                if step.blocked:
                                    blocked = True
                            if blocked:
                                break
                            if parser is not None and parser.done and not cut:
                                cut = True
                                request.cancel.set()
                            if final:
                                break
                            now = time.monotonic()
                            if now - last_checkpoint >= CHECKPOINT_SECONDS:
                                text = "".join(parts)
                                if len(text) != saved_len:
                                    await e.db(store.update_message, answer.id, content=text)
                                    saved_len = len(text)
                                last_checkpoint = now
                        elif isinstance(event, PrefillProgress):
                            yield event  # a long prompt is being read: how far it is
                        elif isinstance(event, Usage):
                            usages.append(event)
                            if tools is None:
                                yield event
                        elif isinstance(event, Failed):
                            error = event.error
                            interrupted = event.kind is FailureKind.INTERRUPTED
                            yield event
                finally:
                    request.cancel.set()
                    e.answer_ended(request, conv_id)
                if blocked:
                    reason = FinishReason.BLOCKED
                    break
                if turn.cancel.is_set():
                    reason = FinishReason.CANCELLED
                    break
                if round_reason is FinishReason.ERROR or not calls:
                    reason = round_reason
                    break
                # The model called: each call runs (or is refused) in order, then it goes on.
                assert tools is not None and runner is not None  # calls are parsed only with tools
                record = RoundRecord("".join(parts[round_start:]))
                limit = number >= tools.plan.max_rounds
                refuse = (f"the limit of {tools.plan.max_rounds} tool rounds for one answer is reached; "
                          "answer with what you have") if limit else None
                for parsed in calls:
                    offset = len("".join(parts))
                    async for event in runner.handle(parsed, refuse=refuse):
                        if isinstance(event, ToolCall):
                            tool_log.append({"type": "tool_call", "id": event.id, "name": event.name,
                                             "arguments": event.arguments, "offset": offset})
                        elif isinstance(event, ToolResult):
                            tool_log.append({"type": "tool_result", "id": event.id, "content": event.content,
                                             "is_error": event.is_error, "duration": round(event.duration, 4),
                                             "offset": offset})
                        elif isinstance(event, SafetyNotice):
                            notices.append(event)
                        yield event
                    if runner.record is not None:
                        record.calls.append(runner.record)
                    await e.db(store.update_message, answer.id, content="".join(parts),
                                meta={**answer.meta, "tools": tool_log})
                    if runner.stopped or turn.cancel.is_set():
                        break
                rounds.append(record)
                if runner.stopped or turn.cancel.is_set():
                    reason = FinishReason.CANCELLED
                    break
                if limit:
                    reason = FinishReason.STOP
                    break
                if round_reason is FinishReason.LENGTH and not cut:
                    reason = FinishReason.LENGTH  # out of tokens in the middle of a call
                    break
                ids = await self._encode_round(worker, tools.plan, tools.base, rounds, first=False)
                room = e.model_status.context_length - len(ids) if e.model_status else 0
                if room < 16:
                    reason = FinishReason.LENGTH
                    error = "the tool results filled the context window; the answer ends here"
                    yield Failed(error, FailureKind.INVALID_REQUEST)
                    break
                round_params = params.with_(max_tokens=max(1, min(params.max_tokens, room)))
                raw_base += raw_len
                number += 1
        finally:
            turn.cancel.set()
            e.answer_ended(turn, conv_id)
            if runner is not None:
                runner.close()
            usage = _combined(usages)  # with tools, yielded once below, after the finish is saved
            await asyncio.shield(self._finish(store, answer, parts, notices, reason, usage, error, len(prompt_ids),
                                              tool_log, interrupted=interrupted, logprobs=probs))
        if tools is not None and usage is not None:
            yield usage
        yield Finished(reason, answer.id)

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

    async def _finish(self, store, answer: MessageInfo, parts: list[str], notices: list[SafetyNotice],
                      reason: FinishReason, usage: Usage | None, error: str | None, prompt_tokens: int,
                      tool_log: list[dict] | None = None, *, interrupted: bool = False,
                      logprobs: AnswerLogprobs | None = None) -> None:
        blocked = reason is FinishReason.BLOCKED
        status = MessageStatus.INTERRUPTED if interrupted and reason is FinishReason.ERROR else _STATUS_FOR[reason]
        fields: dict[str, Any] = {
            "content": "" if blocked else "".join(parts),  # a blocked answer keeps its notices, never its text
            "status": status,
            "error": error,
        }
        meta = dict(answer.meta)
        if notices:
            meta["safety"] = notice_fields(notices)
        if tool_log:
            meta["tools"] = tool_log
        if logprobs is not None:
            logprobs.store(meta)
        if meta != answer.meta:
            fields["meta"] = meta
        if usage is not None:
            fields.update(
                completion_tokens=usage.completion_tokens,
                time_to_first_token=usage.time_to_first_token,
                tokens_per_second=usage.tokens_per_second,
            )
        await self.e.db(store.update_message, answer.id, **fields)
        log_event(
            "answer.finished", conversation_id=answer.conversation_id, message_id=answer.id,
            model=answer.model, backend=answer.backend, reason=reason.value, prompt_tokens=prompt_tokens,
            completion_tokens=usage.completion_tokens if usage else None,
            time_to_first_token=usage.time_to_first_token if usage else None,
            tokens_per_second=usage.tokens_per_second if usage else None,
            safety=notice_fields(notices), error=error, tool_calls=sum(1 for t in tool_log or () if t["type"] == "tool_call"),
        )

    # -- short side requests: titles and summaries ------------------------------------

    async def complete(self, chat: list[dict], params: SamplingParams, *, priority: int = 1) -> str:
        """The whole text of a short request that runs behind the visible answer."""
        worker = await self.e.ensure_model()
        loop = asyncio.get_running_loop()
        ids = await loop.run_in_executor(None, worker.tokenizer.encode_chat, chat)
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
                elif isinstance(event, Finished):
                    return "".join(parts)
        finally:
            request.cancel.set()

    async def summarize(self, turns: list[dict], previous: str) -> str:
        params = SamplingParams(temperature=0.0, max_tokens=200)
        return (await self.complete(summary_prompt(turns, previous), params)).strip()


def can_continue(message: MessageInfo) -> bool:
    """An answer that ended before it was done: stopped, interrupted (a crash, a broken
    stream) or cut at its max_tokens."""
    if message.role is not Role.ASSISTANT:
        return False
    if message.status in (MessageStatus.STOPPED, MessageStatus.INTERRUPTED):
        return True
    limit = (message.sampling or {}).get("max_tokens")
    return (message.status is MessageStatus.COMPLETE and isinstance(limit, int)
            and (message.completion_tokens or 0) >= limit > 0)


class _TurnStop:
    """Stands in the engine's running answers (`TurnHost.answer_started`) for the whole answer: `Engine.stop` sets `cancel` (a
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
class _ToolSession:
    plan: ToolPlan
    base: list[dict]  # the assembled chat, before any call
    context: CallContext
    timeout: float
    result_tokens: int
    first_constraint: Constraint | None = None  # the first generation's (a forced call's arguments)
    constraint: Constraint | None = None  # the later generations' (calls the model starts)


def _shifted(notice: SafetyNotice, by: int) -> SafetyNotice:
    """A later round's notice, its span moved to the whole answer's offsets."""
    return SafetyNotice(notice.category, notice.action, (notice.span[0] + by, notice.span[1] + by), notice.rule,
                        notice.stage)


def _combined(usages: list[Usage]) -> Usage | None:
    """One answer's usage across its rounds: the last prompt, every round's tokens."""
    if not usages:
        return None
    if len(usages) == 1:
        return usages[0]
    tokens = sum(u.completion_tokens for u in usages)
    seconds = sum(u.completion_tokens / u.tokens_per_second for u in usages if u.tokens_per_second > 0)
    return Usage(usages[-1].prompt_tokens, tokens, usages[0].time_to_first_token,
                 tokens / seconds if seconds > 0 else 0.0, usages[-1].cached_tokens)
