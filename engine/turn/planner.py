"""Builds a `TurnPlan`: the question scanned once, the memories retrieved once, the context
assembled once, the tools and sampling chosen from settings read in one trip."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import secrets
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..context import AssembledContext, ContextRequest
from ..context.assemble import ContextOverflow
from ..context.attachments import cut_notices, needs_reader, read_attached
from ..errors import InvalidRequest, ModelNotLoaded, WrenError
from ..events import AnswerNotice, NoticeKind
from ..inference.constrain import ConstraintError
from ..inference.presets import PRESETS_KEY, layered, model_defaults
from ..logs import log_event
from ..safety.care import needs_care, with_care_note
from ..tools import facade as tool_settings
from ..tools.builtin import READ_FILE
from ..tools.fit import FittedTools, fit_tools
from ..tools.prompt import ToolPlan, plan_for
from ..tools.registry import no_tool_named
from .plan import SAMPLING_KEY, TurnPlan, TurnSettings, read_settings
from .thinking import chat_tokenizer

if TYPE_CHECKING:
    from ..inference.sampling import SamplingParams
    from ..inference.worker import ModelWorker
    from ..records import SendOptions
    from ..safety import ScanResult
    from ..tokenize import Tokenizer
    from .host import TurnHost

Attached = tuple[tuple[Path, "int | None"], ...]
INLINE_CHARS = 8_000  # a prompt this short is encoded on the loop (~0.2 ms): less than an executor's hop


class TurnPlanner:
    """Prepares turns for one engine (the `TurnHost` seam, as `Turns` uses it)."""

    def __init__(self, engine: TurnHost) -> None:
        self.e = engine
        # (the worker, weakly: an unloaded model must not live on here; its model's sampling defaults)
        self._defaults: tuple[weakref.ref, dict] | None = None

    async def plan(self, conv_id: int, history: tuple | list, text: str, message_id: int | None,
                   options: SendOptions, worker: ModelWorker, settings: TurnSettings, *,
                   scan: ScanResult | None = None, allow_summarize: bool = True,
                   exclude_memories: tuple[int, ...] = (), attached: Attached = (),
                   cut_for: int | None = None, retrieved: list | None = None) -> TurnPlan:
        """The whole plan; a question that cannot fit gives a plan whose `overflow` says so,
        one whose tools cannot be planned (an unknown tool asked for) one whose `problem` does.
        `retrieved`: the question's memories where the turn's read retrieved them."""
        scan = scan if scan is not None else await self.e.safety.scan(text)
        window = self.e.model_status.context_length if self.e.model_status else 0
        base = TurnPlan(conv_id, text, message_id, scan, settings, tuple(history), window)
        try:
            assembled = await self.assemble(conv_id, history, text, message_id, options, worker, settings, scan,
                                            allow_summarize=allow_summarize, exclude_memories=exclude_memories,
                                            attached=attached, retrieved=retrieved)
        except ContextOverflow as exc:
            return TurnPlan(conv_id, text, message_id, scan, settings, tuple(history), window, overflow=exc)
        tokenizer = chat_tokenizer(worker.tokenizer, options, settings.conversation)  # the chat's thinking choice
        ids = await encode_chat(tokenizer, assembled.messages)
        try:  # read_attachment joins the tools only for a file the prompt could not hold whole
            tools = await self.tool_plan(settings, options, worker, needs_reader(assembled.report))
        except WrenError as exc:  # an unknown or switched-off tool asked for: the answer says so
            return dataclasses.replace(base, assembled=assembled, prompt_ids=tuple(ids), problem=exc)
        dropped = None
        if tools is not None:  # the tools that fit the window; the user is told of the rest
            fitted = await self.fit_tools(worker, tools, assembled.messages, window, tokenizer)
            tools, dropped = fitted.plan, fitted.note
            if tools is not None:
                ids = fitted.prompt_ids
            if dropped:
                log_event("tools.dropped", conversation_id=conv_id, offered=fitted.offered,
                          kept=len(tools.entries) if tools else 0, reason=dropped)
        assembled = await self.as_sent(assembled, ids, tokenizer, tools, dropped)
        params = await self.sampling(options, settings, worker, len(ids), window)
        cut = cut_notices(assembled.report, cut_for) if cut_for is not None else []
        notices = [AnswerNotice(NoticeKind.ATTACHMENT_CUT, t) for t in cut]
        notices += [AnswerNotice(NoticeKind.TOOLS_DROPPED, dropped)] if dropped else []
        return TurnPlan(conv_id, text, message_id, scan, settings, base.history, window, assembled, tuple(ids),
                        params, tools, dropped, options.constraint if tools is None else None, tuple(notices))

    async def assemble(self, conv_id: int | None, history: tuple | list, text: str, message_id: int | None,
                       options: SendOptions, worker: ModelWorker, settings: TurnSettings | None = None,
                       scan: ScanResult | None = None, *, allow_summarize: bool = True,
                       exclude_memories: tuple[int, ...] = (), conv_settings: dict | None = None,
                       attached: Attached = (), retrieved: list | None = None) -> AssembledContext:
        """The messages the model reads for `text`: system prompt, memories, the history
        that fits, the text of the `attached` files ((path, message id), the newest first).
        `settings` (else read now, in one trip), `scan` (else made now) and the `retrieved`
        memories (else retrieved now) where known."""
        e = self.e
        if settings is None:
            store, conv_store = e.store, e.store_for(conv_id) if conv_id is not None else None
            settings = await e.db(read_settings, store, conv_settings, conv_store, conv_id)
        conv_settings = settings.conversation
        system = options.system_prompt
        if system is None:
            system = conv_settings.get("system_prompt") or settings.system_prompt or ""
        if scan is None:
            scan = await e.safety.scan(text)
        if needs_care(scan.findings):  # e.g. self-harm: the model is asked for care
            system = with_care_note(system, e.safety.care_message().system_note)
        if e.model_status is None:
            raise ModelNotLoaded("the model was unloaded while this answer was being prepared")
        window = e.model_status.context_length
        ctx = settings.context
        if retrieved is None:
            query_vector = await e.memories.query_vector(text, conv_settings)  # on the executor
            retrieved = await e.db(
                e.memory.retrieve, text, budget_tokens=ctx.memory_budget(window), count=worker.tokenizer.count,
                conversation_id=conv_id, conversation_settings=conv_settings, exclude=exclude_memories,
                query_vector=query_vector,
            )
        files = await asyncio.get_running_loop().run_in_executor(None, read_attached, attached, window) if attached else ()
        documents, project_instructions = await self.documents(conv_id, text, options)
        if project_instructions.strip():
            system = f"{system}\n\nInstructions for this project:\n{project_instructions.strip()}".strip()
        request = ContextRequest(
            window=window, new_message=text, history=list(history), conversation_id=conv_id,
            new_message_id=message_id, system_prompt=system, instructions=settings.instructions,
            retrieved=retrieved, settings=ctx, attachments=files, documents=documents,
        )
        return await e.assembler_for(conv_id).assemble(request, allow_summarize=allow_summarize)

    async def documents(self, conv_id: int | None, text: str, options: SendOptions) -> tuple[list, str]:
        """The library's passages for `text` and the chat's project instructions
        (engine/library/service.py); none for an engine without a library."""
        library = getattr(self.e, "library", None)
        if library is None:
            return [], ""
        return await library.passages_for(conv_id, text, options.documents, options.project, options.expand_query)

    async def as_sent(self, assembled: AssembledContext, ids: list[int], tokenizer: Tokenizer,
                      tools: ToolPlan | None, dropped: str | None) -> AssembledContext:
        """`assembled` with its report made the prompt the model reads (engine/context/report.py
        ContextReport.as_sent): with tools, their definitions are in it, so its text is the ids
        decoded, as the model gets them; without, the assembler's rendering is that text."""
        rendered = assembled.report.rendered_prompt
        names = [s.name for s in tools.specs] if tools is not None else []
        if tools is not None:
            rendered = await asyncio.get_running_loop().run_in_executor(
                None, lambda: tokenizer.decode(ids, skip_special_tokens=False))
        report = assembled.report.as_sent(ids, rendered, names, dropped)
        return dataclasses.replace(assembled, report=report)

    # -- sampling ------------------------------------------------------------------------

    async def sampling(self, options: SendOptions, settings: TurnSettings, worker: ModelWorker,
                       prompt_tokens: int, window: int) -> SamplingParams:
        """SendOptions.sampling, else the conversation's own settings over the model's defaults
        field by field (as engine.settings.default_sampling gives them); a sampled answer gets its seed
        (so Replay can redo it); max_tokens cut to the room the prompt leaves."""
        params = options.sampling
        if params is None:
            params = await self.default_sampling(settings, worker)
        if params.temperature > 0 and params.seed is None:
            params = params.with_(seed=secrets.randbits(62))
        return params.with_(max_tokens=max(1, min(params.max_tokens, window - prompt_tokens)))

    async def default_sampling(self, settings: TurnSettings, worker: ModelWorker) -> SamplingParams:
        model = self.e.model_status.name if self.e.model_status else worker.name
        if self._defaults is None or self._defaults[0]() is not worker:
            # the loaded model's own defaults (card, generation_config.json in the folder it was
            # loaded from) do not change while it is loaded: read once per load
            self._defaults = (weakref.ref(worker), await asyncio.get_running_loop().run_in_executor(
                None, model_defaults, model, worker.model_dir))
        return layered(model, self._defaults[1], settings.get(SAMPLING_KEY), settings.get(PRESETS_KEY),
                       settings.conversation.get("sampling"))

    # -- tools ---------------------------------------------------------------------------

    async def tool_plan(self, settings: TurnSettings, options: SendOptions, worker: ModelWorker,
                        attached: bool) -> ToolPlan | None:
        """Which tools this answer may call (docs/tools.md), None for none."""
        choice = getattr(options, "tool_choice", "auto") or "auto"
        if not isinstance(choice, str):
            raise InvalidRequest(f"tool_choice must be auto, none or a tool's name, not {choice!r}")
        if choice == "none":
            return None
        conv_settings = settings.conversation
        asked = getattr(options, "tools", None)
        default = settings.get(tool_settings.DEFAULT_KEY)
        # MCP servers start lazily: those that own a tool this answer may call start now
        # (a server that fails to start is left out; its state and log say why).
        wanted = asked if asked is not None else conv_settings.get("tools")
        if not isinstance(wanted, (list, tuple)):
            wanted = default if isinstance(default, list) else []
        mcp_names = [n for n in [*wanted, choice] if isinstance(n, str) and "__" in n]  # SERVER__TOOL
        if mcp_names:
            await self.e.tools.prepare_sources(mcp_names)
        names = self._tool_names(asked, conv_settings, default)
        forced = None if choice == "auto" else choice
        self._check_forced(forced, names)
        if attached and READ_FILE.name not in names:
            names.append(READ_FILE.name)  # the user attached a file: the model may read it
        off = settings.get(tool_settings.DISABLED_KEY)
        disabled = {n for n in off if isinstance(n, str)} if isinstance(off, list) else set()
        if forced in disabled:
            raise InvalidRequest(f"the tool {forced} is switched off; switch it on in Settings → Tools first")
        entries = [(s, src) for s, src in self.e.tools.registry.entries() if s.name in names and s.name not in disabled]
        if not entries:
            return None
        rounds = settings.get(tool_settings.MAX_ROUNDS_KEY)
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

    def _tool_names(self, asked: Any, conv_settings: dict, default: Any) -> list[str]:
        registry = self.e.tools.registry
        if asked is not None:
            if isinstance(asked, str) or not all(isinstance(n, str) for n in asked):
                raise InvalidRequest(f"SendOptions.tools must be a tuple of tool names, not {asked!r}")
            unknown = [n for n in asked if registry.find(n) is None]
            if unknown:
                raise InvalidRequest(no_tool_named(unknown[0], registry.names()))
            return list(asked)
        if isinstance(conv_settings.get("tools"), list):
            return [n for n in conv_settings["tools"] if isinstance(n, str)]
        return [n for n in default if isinstance(n, str)] if isinstance(default, list) else []

    def _check_forced(self, forced: str | None, names: list[str]) -> None:
        if forced is None:
            return
        registry = self.e.tools.registry
        if registry.find(forced) is None:
            known = ", ".join(registry.names()) or "none"
            raise InvalidRequest(f"tool_choice names {forced!r}, which is not a tool; the tools are: {known}")
        if forced not in names:
            names.append(forced)

    async def fit_tools(self, worker: ModelWorker, plan: ToolPlan, base: list[dict],
                        context_length: int, tokenizer: Tokenizer | None = None) -> FittedTools:
        """engine/tools/fit.py's cut of `plan` to the window, off the loop (it encodes)."""
        tok = tokenizer or worker.tokenizer
        return await asyncio.get_running_loop().run_in_executor(None, lambda: fit_tools(
            plan, lambda p: p.encode(tok, p.messages(base, []), opened=True), context_length))


async def encode_chat(tokenizer: Tokenizer, messages: list[dict]) -> list[int]:
    """The prompt's ids, with the chat-aware encoder (markup typed by a user stays text): on
    an executor thread, but for a short prompt (INLINE_CHARS), which costs less than the hop."""
    if sum(len(m["content"]) if isinstance(m.get("content"), str) else INLINE_CHARS for m in messages) <= INLINE_CHARS:
        return tokenizer.encode_chat(messages)
    return await asyncio.get_running_loop().run_in_executor(None, tokenizer.encode_chat, messages)


def constraints(plan: ToolPlan, settings: TurnSettings) -> tuple[Any, Any]:
    """Constrained decoding for the calls (engine.inference.constrain): (the first
    generation's, the later ones'). A forced call's arguments must fit its schema; with
    tool_choice auto, a call the model starts must be a valid call of an offered tool
    (setting tools.constrain, default on). A schema the grammar engine cannot take leaves
    that answer unconstrained (the arguments are still validated before the call runs)."""
    first = later = None
    try:
        if plan.forced:
            first = plan.forced_constraint()
        if settings.get(tool_settings.CONSTRAIN_KEY, True) is not False:
            later = plan.calls_constraint(lazy=True)
            if not plan.forced:
                first = later
    except ConstraintError as exc:
        log_event("tools.unconstrained", reason=str(exc))
    return first, later


def result_tokens(settings: TurnSettings, context_length: int) -> int:
    value = settings.get(tool_settings.RESULT_TOKENS_KEY)
    budget = value if isinstance(value, int) and value > 0 else tool_settings.DEFAULT_RESULT_TOKENS
    return max(64, min(budget, context_length // 4))
