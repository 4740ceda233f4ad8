"""One answer's tool calls: each call is checked (does the tool exist here, do the
arguments fit its schema, what does the safety policy say about them), approved where the
tool needs it, run with a timeout that Stop and Cancel cut short, and its result made safe
for the prompt (scanned, redacted where the policy says so, truncated to a token budget).
Used by `engine.turns`; every failure becomes an error result the model reads, never an
exception that ends the answer."""

from __future__ import annotations

import asyncio
import contextvars
import json
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Protocol

from ..events import Event, SafetyAction, SafetyNotice, ToolApprovalNeeded, ToolCall, ToolResult
from ..logs import log_event
from ..network.purpose import Part, assume
from ..safety import scan
from .builtin import CALL_CONTEXT, CallContext
from .parse import ParsedCall
from .prompt import CallRecord, ToolPlan
from .registry import no_tool_named, validate_arguments

if TYPE_CHECKING:
    from ..safety import Policy
    from ..tokenize import Tokenizer
    from .facade import Tools

DECLINED = "the user declined"
CANCELLED = "cancelled by the user"
STOPPED = "stopped by the user"
SCAN_CHARS = 200_000  # a result is cut to this before it is scanned (and then to its token budget)


class ToolHost(Protocol):
    """What a tool turn uses of the engine (Engine implements it; engine/tools/facade.py)."""

    @property
    def policy(self) -> Policy: ...
    @property
    def tools(self) -> Tools: ...


class ToolTurn:
    """The tool side of one answer. `handle(call)` yields the call's events; afterwards
    `record` holds what the prompt needs and `stopped` says whether the user pressed Stop."""

    def __init__(self, engine: ToolHost, plan: ToolPlan, answer_id: int, stop: asyncio.Event,
                 tokenizer: Tokenizer, context: CallContext, *, destination: str = "local",
                 timeout: float = 60.0, result_tokens: int = 2000) -> None:
        self.e = engine
        self.plan = plan
        self.answer_id = answer_id
        self.stop = stop
        self.tokenizer = tokenizer
        self.context = context
        self.destination = destination
        self.timeout = timeout
        self.result_tokens = result_tokens
        self.count = 0
        self.record: CallRecord | None = None
        self.stopped = False
        self._mine: set[str] = set()

    async def handle(self, parsed: ParsedCall, *, refuse: str | None = None) -> AsyncIterator[Event]:
        """ToolCall, SafetyNotice(s), maybe ToolApprovalNeeded, then ToolResult. `refuse`:
        do not run it, answer with this error (the round limit)."""
        self.count += 1
        call_id = f"call_{self.answer_id}_{self.count}"
        state = self.e.tools.state
        self._mine.add(call_id)
        arguments = parsed.arguments if isinstance(parsed.arguments, dict) else {}
        name = parsed.name or "(unreadable call)"
        notices: list[SafetyNotice] = []
        blocked_args = None
        if parsed.error is None and arguments:
            arguments, notices, blocked_args = await self._scan_arguments(arguments)
        self.record = CallRecord(call_id, f"{self.count:09d}", name, arguments)
        yield ToolCall(call_id, name, arguments)
        for notice in notices:
            yield notice
        started = time.perf_counter()
        found = self.plan.find(parsed.name) if parsed.name else None
        content, is_error = "", True
        if refuse is not None:
            content = refuse
        elif parsed.error is not None:
            content = f"the tool call could not be read: {parsed.error}"
        elif found is None:
            content = no_tool_named(parsed.name, [s.name for s in self.plan.specs], " in this chat")
        elif blocked_args is not None:
            content = f"the call was not run: its arguments contain {blocked_args}, which the safety policy blocks"
        else:
            spec, source = found
            problem = validate_arguments(spec.parameters, arguments, spec.name)
            if problem is not None:
                content = problem
            else:
                decision = "once"
                if spec.needs_approval and spec.name not in await self.e.tools.always_allowed():
                    # waiting before the event goes out: a front end may answer while handling it
                    future = asyncio.get_running_loop().create_future()
                    state.approvals[call_id] = future
                    yield ToolApprovalNeeded(call_id, spec.name, arguments)
                    decision = await self._approval(call_id, future)
                if decision == "always":
                    await self.e.tools.allow_always(spec.name)
                if decision in ("once", "always"):
                    started = time.perf_counter()
                    content, is_error = await self._run(call_id, source, spec.name, arguments)
                elif decision == "deny":
                    content = DECLINED
                elif decision == "cancel":
                    content = CANCELLED
                else:
                    content = STOPPED
        duration = time.perf_counter() - started
        content, is_error, result_notices = await self._safe_result(content, is_error)
        for notice in result_notices:
            yield notice
        self.record.result = content
        log_event("tool.call", call_id=call_id, tool=name, is_error=is_error, duration=round(duration, 3),
                  result_chars=len(content))
        yield ToolResult(call_id, content, is_error, duration)

    async def _approval(self, call_id: str, future: asyncio.Future) -> str:
        state = self.e.tools.state
        stop = asyncio.ensure_future(self.stop.wait())
        try:
            await asyncio.wait({future, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            state.approvals.pop(call_id, None)
        if future.done():
            return future.result()
        future.cancel()
        self.stopped = True
        return "stop"

    async def _run(self, call_id: str, source: Any, name: str, arguments: dict) -> tuple[str, bool]:
        state = self.e.tools.state
        cancel = asyncio.Event()
        context = contextvars.copy_context()
        context.run(CALL_CONTEXT.set, self.context)
        context.run(assume, Part.TOOL, f"the tool '{name}', called in an answer")  # what it connects to, in the ledger
        task = asyncio.get_running_loop().create_task(source.call(name, arguments, cancel), context=context)
        state.running[call_id] = task
        stop = asyncio.ensure_future(self.stop.wait())
        # A source may allow longer calls than the engine's default (an MCP server's own setting).
        own = getattr(source, "timeout", None)
        limit = max(self.timeout, own) if isinstance(own, (int, float)) else self.timeout
        try:
            await asyncio.wait({task, stop}, timeout=limit, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            state.running.pop(call_id, None)
        if not task.done():
            cancel.set()
            task.cancel()
            if self.stop.is_set():
                self.stopped = True
                return STOPPED, True
            return f"the tool {name} did not answer within {limit:g} seconds and was stopped", True
        if task.cancelled() or call_id in state.cancelled:
            state.cancelled.discard(call_id)
            return CANCELLED, True
        exc = task.exception()
        if exc is not None:
            return f"the tool {name} failed: {type(exc).__name__}: {exc}", True
        result = task.result()
        try:
            content, is_error = result
        except (TypeError, ValueError):
            return f"the tool {name} returned {type(result).__name__}, not (content, is_error)", True
        if not isinstance(content, str):
            try:
                content = json.dumps(content, ensure_ascii=False, default=str)
            except (TypeError, ValueError) as exc:
                return f"the tool {name} returned a result that is not text: {exc}", True
        return content, bool(is_error)

    async def _scan_arguments(self, arguments: dict) -> tuple[dict, list[SafetyNotice], str | None]:
        """Every string in the arguments through the scanners: redacted where the policy
        says so; a blocked one stops the call (its category is returned)."""
        notices: list[SafetyNotice] = []
        blocked: list[str] = []
        loop = asyncio.get_running_loop()

        def walk(value: Any) -> Any:
            if isinstance(value, str):
                result = scan(value, self.e.policy, self.destination)
                notices.extend(result.notices("output"))
                if result.blocked:
                    blocked.extend(f.category for f in result.findings if f.action is SafetyAction.BLOCK)
                return result.redacted_text
            if isinstance(value, dict):
                return {k: walk(v) for k, v in value.items()}
            if isinstance(value, list):
                return [walk(v) for v in value]
            return value

        cleaned = await loop.run_in_executor(None, walk, arguments)
        return cleaned, notices, (", ".join(sorted(set(blocked))) if blocked else None)

    async def _safe_result(self, content: str, is_error: bool) -> tuple[str, bool, list[SafetyNotice]]:
        """Scanned (redacted, or withheld when blocked) and cut to the token budget."""
        loop = asyncio.get_running_loop()
        original = len(content)
        if original > SCAN_CHARS:
            content = content[:SCAN_CHARS]
        result = await loop.run_in_executor(None, scan, content, self.e.policy, self.destination)
        notices = result.notices("input")
        if result.blocked:
            cats = ", ".join(sorted({f.category for f in result.findings if f.action is SafetyAction.BLOCK}))
            return f"the tool's result was withheld: it contains {cats}, which the safety policy blocks", True, notices
        content = result.redacted_text
        content = await loop.run_in_executor(None, self._fit, content, original)
        return content, is_error, notices

    def _fit(self, content: str, original: int) -> str:
        budget = self.result_tokens
        tokens = self.tokenizer.count(content)
        if tokens <= budget and original == len(content):
            return content
        keep = len(content)
        while tokens > budget and keep > 0:
            keep = int(keep * budget / tokens * 0.95)
            tokens = self.tokenizer.count(content[:keep])
        return (f"{content[:keep]}\n[… the result was truncated: it had {original:,} characters; "
                f"the first {keep:,} are shown (a budget of {budget:,} tokens)]")

    def close(self) -> None:
        """Cancel whatever of this answer's calls still waits or runs (the answer ended)."""
        state = self.e.tools.state
        for call_id in self._mine:
            waiting = state.approvals.pop(call_id, None)
            if waiting is not None and not waiting.done():
                waiting.cancel()
            task = state.running.pop(call_id, None)
            if task is not None and not task.done():
                task.cancel()
            state.cancelled.discard(call_id)
