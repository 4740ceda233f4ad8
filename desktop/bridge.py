"""Async engine calls and streams → Qt signals carrying the engine's own event dataclasses.

qasync runs asyncio on the Qt event loop, so an engine coroutine is awaited right on the
GUI thread without blocking it: the engine does its database and model work on its own
threads and comes back through the loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from wren.engine.errors import InvalidRequest, StoreError, WrenError
from wren.engine.events import (
    Delta,
    Event,
    Failed,
    FailureKind,
    Finished,
    FinishReason,
    MemoryNotice,
    PrefillProgress,
    Reasoning,
    SafetyNotice,
    Started,
    ToolApprovalNeeded,
    ToolCall,
    ToolResult,
    Usage,
)

log = logging.getLogger(__name__)

FLUSH_MS = 30  # one repaint per frame or two, however fast tokens come


def failure_for(exc: BaseException) -> Failed:
    """An exception from the engine, as the event a stream would have carried."""
    if isinstance(exc, InvalidRequest):
        kind = FailureKind.INVALID_REQUEST
    elif isinstance(exc, StoreError):
        kind = FailureKind.STORE
    elif isinstance(exc, WrenError):
        kind = FailureKind.MODEL
    else:
        kind = FailureKind.INTERNAL
    return Failed(str(exc) or type(exc).__name__, kind)


class Tasks(QObject):
    """Background coroutines started from Qt code: kept alive, errors reported, not lost."""

    error = Signal(str)

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._tasks: set[asyncio.Task] = set()

    def run(self, coro: Awaitable[Any], on_result: Callable[[Any], None] | None = None, *, what: str = "") -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)

        def done(t: asyncio.Task) -> None:
            self._tasks.discard(t)
            if t.cancelled():
                return
            exc = t.exception()
            if exc is not None:
                log.error("%s failed", what or "task", exc_info=exc)
                self.error.emit(f"{what}: {exc}" if what else str(exc))
            elif on_result is not None:
                on_result(t.result())

        task.add_done_callback(done)
        return task

    async def cancel_all(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


class TurnStream(QObject):
    """One answer streaming in. Deltas are coalesced: the first goes out at once, later ones
    at most every FLUSH_MS, so the view does one append per frame instead of one per token."""

    started = Signal(object)  # Started
    prefill = Signal(object)  # PrefillProgress: a long prompt is being read, before any text
    text = Signal(str)  # coalesced Delta text
    reasoning = Signal(str)  # coalesced Reasoning text: a thinking model's thinking, before its answer
    usage = Signal(object)  # Usage
    notice = Signal(object)  # SafetyNotice
    memory = Signal(object)  # MemoryNotice: saved, forgotten, refused, suggestions
    failed = Signal(object)  # Failed
    tool = Signal(object)  # ToolCall, ToolApprovalNeeded or ToolResult, after the text before it
    finished = Signal(object)  # Finished, always last, exactly once

    def __init__(self, events: AsyncIterator[Event], conversation_id: int, parent: QObject | None = None):
        super().__init__(parent)
        self.conversation_id = conversation_id
        self.started_event: Started | None = None
        self.prefill_event: PrefillProgress | None = None  # the latest, until text arrives
        self.usage_event: Usage | None = None
        self.failure: Failed | None = None
        self.notices: list[SafetyNotice] = []
        self.tool_events: list[tuple[int, Event]] = []  # (length of the text before it, event)
        self._received = 0
        self.memory_notice: MemoryNotice | None = None
        self.result: Finished | None = None
        self._events = events
        self._parts: list[str] = []
        self._pending: list[str] = []
        self.thinking: list[str] = []  # the thinking handed to the view so far
        self._thinking_pending: list[str] = []
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(FLUSH_MS)
        self._timer.timeout.connect(self._tick)
        self._task: asyncio.Task | None = None

    @property
    def assistant_id(self) -> int | None:
        return self.started_event.assistant_message_id if self.started_event else None

    @property
    def done(self) -> bool:
        return self.result is not None

    def received(self) -> str:
        """The text handed to the view so far (what a re-attached view must start from)."""
        return "".join(self._parts)

    def start(self) -> TurnStream:
        self._task = asyncio.ensure_future(self._run())
        return self

    async def wait(self) -> Finished:
        if self._task is not None:
            await asyncio.shield(self._task)
        assert self.result is not None
        return self.result

    async def _run(self) -> None:
        result = Finished(FinishReason.CANCELLED)
        try:
            async for event in self._events:
                if isinstance(event, (Delta, Reasoning)):
                    self.prefill_event = None
                    (self._pending if isinstance(event, Delta) else self._thinking_pending).append(event.text)
                    if not self._timer.isActive():
                        self._tick()
                    continue
                self._flush()
                if isinstance(event, Started):
                    self.started_event = event
                    self.started.emit(event)
                elif isinstance(event, PrefillProgress):
                    self.prefill_event = event
                    self.prefill.emit(event)
                elif isinstance(event, Usage):
                    self.usage_event = event
                    self.usage.emit(event)
                elif isinstance(event, SafetyNotice):
                    self.notices.append(event)
                    self.notice.emit(event)
                elif isinstance(event, MemoryNotice):
                    self.memory_notice = event
                    self.memory.emit(event)
                elif isinstance(event, (ToolCall, ToolApprovalNeeded, ToolResult)):
                    self.prefill_event = None
                    self.tool_events.append((self._received, event))
                    self.tool.emit(event)
                elif isinstance(event, Failed):
                    self.failure = event
                    self.failed.emit(event)
                elif isinstance(event, Finished):
                    result = event
        except Exception as exc:  # the engine refused the turn: it ends like a failed one
            log.warning("stream failed: %s", exc)
            self.failure = failure_for(exc)
            self._flush()
            self.failed.emit(self.failure)
            result = Finished(FinishReason.ERROR)
        finally:
            self._timer.stop()
            self._flush()
            self.result = result
            self.finished.emit(result)

    def _tick(self) -> None:
        if self._pending or self._thinking_pending:
            self._flush()
            self._timer.start()

    def _flush(self) -> None:
        if self._thinking_pending:  # thinking comes before the answer's text
            thought = "".join(self._thinking_pending)
            self._thinking_pending.clear()
            self.thinking.append(thought)
            self.reasoning.emit(thought)
        if self._pending:
            chunk = "".join(self._pending)
            self._pending.clear()
            self._parts.append(chunk)
            self._received += len(chunk)
            self.text.emit(chunk)


def describe_notices(notices: list[SafetyNotice] | list[dict]) -> str:
    """A short human line for safety findings: what was found and what Wren did about it."""
    verbs = {"warn": "flagged", "redact": "redacted", "block": "blocked", "allow": "allowed"}
    seen: dict[str, str] = {}
    for notice in notices:
        category = notice["category"] if isinstance(notice, dict) else notice.category
        action = notice["action"] if isinstance(notice, dict) else notice.action.value
        seen.setdefault(category, verbs.get(action) or str(action))
    return "; ".join(f"{verb}: {category}" for category, verb in seen.items())


def from_thread(callback: Callable[..., None]) -> Callable[..., None]:
    """Wrap a GUI callback so a worker thread (a model import) can call it safely."""
    loop = asyncio.get_running_loop()

    def relay(*args: Any) -> None:
        loop.call_soon_threadsafe(callback, *args)

    return relay
