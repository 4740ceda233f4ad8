"""A backend for any OpenAI-compatible server: vLLM, SGLang, llama.cpp's server, Ollama's
/v1, OpenAI, or another Wren (`wren serve`).

A remote model answers chat messages, not token ids, so it does not run in the
token-level ModelWorker: a `RemoteWorker` has the same face the turn code uses (`submit`
a GenerationRequest, events through its sink; `tokenizer`, `model`, `loaded`, `close`) and
sends the request's assembled `messages`. The tokenizer it carries is a local one, used to
budget the context and to count tokens when the server reports no usage.

Its transport, `OpenAIClient`, is in remote_http.py; the wire format it reads, in
remote_stream.py.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...events import Delta, Failed, FailureKind, Finished, FinishReason, Usage
from ...threadloop import LoopThread
from ..backend import ChatChunk, ModelBase, Unsupported
from .remote_context import context_from_info as context_from_info  # its callers import it from here
from .remote_context import discover_context
from .remote_http import OpenAIClient, Transport, chat_body, check_base_url, retry_after_seconds
from .remote_stream import (
    RemoteError,
    RemoteInterrupted,
    RemoteProtocolError,
    RemoteTimeout,
    RemoteTLSError,
    ThinkingTags,
)

# What callers import from here: this module's own, and its transport's and wire format's.
__all__ = ["CANCEL_POLL", "DEFAULT_CONTEXT", "OpenAIClient", "RemoteBackend", "RemoteError", "RemoteInterrupted",
           "RemoteModel", "RemoteProtocolError", "RemoteSpec", "RemoteTLSError", "RemoteTimeout", "RemoteWorker",
           "Transport", "chat_body", "check_base_url", "context_from_info", "retry_after_seconds"]

log = logging.getLogger(__name__)

DEFAULT_CONTEXT = 8192  # when neither the server's model info nor a setting says
CANCEL_POLL = 0.05  # seconds between looks at a request's cancel flag
# A model's context window is asked of its provider at load; a hanging server held the load for
# 30 s (3 connect timeouts) before the default stood.
CONTEXT_LOOKUP_SECONDS = 8.0


class RemoteModel(ModelBase):
    """One model on one provider. Takes chat messages (`chat_stream`); token-level calls
    raise. Used from its RemoteWorker's event loop."""

    backend = "remote"
    takes_messages = True
    vocab_size = 0

    def __init__(self, provider: str, model: str, client: OpenAIClient, context_length: int) -> None:
        self.provider = provider
        self.model = model
        self.client = client
        self.context_length = context_length

    def prefill(self, ids, start: int, slot: int = 0) -> np.ndarray:
        raise Unsupported("a remote model answers chat messages, not token ids")

    def decode(self, token: int, pos: int, slot: int = 0) -> np.ndarray:
        raise Unsupported("a remote model answers chat messages, not token ids")

    def chat_stream(self, messages: list[dict], params: Any, *,
                    request_id: str | None = None) -> AsyncIterator[ChatChunk]:
        return self.client.stream_chat(self.model, messages, params, request_id=request_id)

    def close(self) -> None:
        """The client is closed by its worker, on the loop it belongs to."""


@dataclass
class RemoteSpec:
    """Everything needed to talk to one remote model; the key never leaves memory."""

    provider: str
    model: str
    base_url: str
    api_key: str | None = field(default=None, repr=False)  # never in a repr, a log or a traceback's text
    allow_http: bool = False
    context_length: int | None = None  # a setting; else the server's model info
    transport: Transport | None = None
    http_transport: Any = None  # tests: an httpx transport


class RemoteBackend:
    """The Backend for one provider's model: `load` builds the client (no network)."""

    name = "remote"

    def __init__(self, spec: RemoteSpec) -> None:
        self.spec = spec

    def available(self) -> bool:
        return self.unavailable_reason() is None

    def unavailable_reason(self) -> str | None:
        try:
            import httpx  # noqa: F401
        except ImportError as exc:  # pragma: no cover - a declared dependency
            return f"httpx is not installed ({exc})"
        return None

    def load(self, model_dir: Path | None = None, *, dtype: str = "auto", slots: int | None = None) -> RemoteModel:
        s = self.spec
        client = OpenAIClient(s.base_url, s.api_key, allow_http=s.allow_http, transport=s.transport,
                              http_transport=s.http_transport)
        return RemoteModel(s.provider, s.model, client, s.context_length or DEFAULT_CONTEXT)


class _RemoteAnswer:
    """One remote answer's stream: its text handed to the sink as it comes, then how it
    ended (reason, and the error with its kind) and the server's token counts."""

    def __init__(self, model: RemoteModel, sink) -> None:
        self.model, self.sink = model, sink
        self.parts: list[str] = []
        self.first_at: float | None = None
        self.server_usage: tuple[int | None, int | None] = (None, None)
        self.reason = FinishReason.STOP
        self.error: str | None = None
        self.kind = FailureKind.MODEL  # the server refused or failed the answer
        self.tags = ThinkingTags()

    async def _consume(self, messages: list[dict], params) -> None:
        async for chunk in self.model.chat_stream(messages, params, request_id=str(uuid.uuid4())):
            text = self.tags.text(chunk)
            if text:
                if self.first_at is None:
                    self.first_at = time.perf_counter()
                self.parts.append(text)
                self.sink(Delta(text))
            if chunk.finish_reason == "length":
                self.reason = FinishReason.LENGTH
            if chunk.prompt_tokens is not None or chunk.completion_tokens is not None:
                self.server_usage = (chunk.prompt_tokens, chunk.completion_tokens)

    async def stream(self, messages: list[dict], request) -> None:
        """Until the stream ends, fails, or the request is cancelled (polled: the cancel is a
        thread event)."""
        stream = asyncio.ensure_future(self._consume(messages, request.params))
        try:
            while not stream.done():
                await asyncio.wait({stream}, timeout=CANCEL_POLL)
                if request.cancel.is_set() and not stream.done():
                    stream.cancel()
                    self.reason = FinishReason.CANCELLED
            if not stream.cancelled():
                stream.result()
        except asyncio.CancelledError:
            self.reason = FinishReason.CANCELLED
        except RemoteInterrupted as exc:  # broke after the answer began: kept, marked interrupted
            self._failed(str(exc), FailureKind.INTERRUPTED)
        except RemoteError as exc:
            self._failed(str(exc), FailureKind.MODEL)
        except Exception as exc:  # a bug or an unexpected transport fault: said, not lost
            log.exception("remote generation failed")
            self._failed(f"the remote answer failed: {exc}", FailureKind.INTERNAL)
        finally:
            if not stream.done():
                stream.cancel()

    def _failed(self, error: str, kind: FailureKind) -> None:
        self.error, self.kind, self.reason = error, kind, FinishReason.ERROR


class RemoteWorker:
    """The ModelWorker face for a remote model: requests run concurrently on the worker's
    own event loop thread; events reach each request's sink from that thread."""

    prefill_chunk = 0

    def __init__(self, name: str, backend: RemoteBackend, tokenizer, *, policy=None,
                 on_info: Callable[[int | None], None] | None = None) -> None:
        self.name = name
        self.backend = backend
        self.tokenizer = tokenizer  # local: context budgeting and counting without usage
        self.model_dir = None  # a remote model has no folder here: no card or generation_config.json to read
        self.policy = policy  # the safety policy, applied once more to what leaves (destination remote)
        self.model: RemoteModel | None = None
        self.sent_messages: int = 0
        self._loaded: Future = Future()
        self._tasks: set[asyncio.Task] = set()
        self._thread = LoopThread(f"wren-remote-{name}")  # a plain loop even under the window's qasync policy
        self._loop = self._thread.loop
        asyncio.run_coroutine_threadsafe(self._load(), self._loop)

    @property
    def loaded(self) -> Future:
        return self._loaded

    async def _load(self) -> None:
        from ...network.purpose import Part, acting

        with acting(Part.REMOTE_PROVIDER, f"loading the remote model {self.name}"):
            await self._load_model()

    async def _load_model(self) -> None:
        if not self._loaded.set_running_or_notify_cancel():  # as ModelWorker._run: a waiter gave up first
            return
        try:
            model = self.backend.load(None)
        except BaseException as exc:
            self._loaded.set_exception(exc)
            return
        if self.backend.spec.context_length is None:
            try:
                found = await asyncio.wait_for(discover_context(model.client, model.model),
                                               min(CONTEXT_LOOKUP_SECONDS, 3 * model.client.transport.connect_timeout))
                if found:
                    model.context_length = found
            except Exception as exc:  # the provider says nothing of it; the default stands
                log.warning("could not read the context window of %s from its provider: %s", self.name,
                            str(exc) or type(exc).__name__)  # a timeout's text is empty
        self.model = model
        self._loaded.set_result(model)

    def submit(self, request) -> None:
        from ..worker import WarmRequest

        if isinstance(request, WarmRequest):  # nothing to pre-warm on a remote server
            request.prefilled = 0
            request.done.set()
            return
        self._loop.call_soon_threadsafe(self._start, request)

    def announces_progress(self, prompt_tokens: int, cached: int) -> bool:
        return False

    def _start(self, request) -> None:
        task = self._loop.create_task(self._answered(request))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answered(self, request) -> None:
        """_answer, and whatever goes wrong in it still ends the request: a request left
        without its Finished would keep the chat waiting forever."""
        try:
            await self._answer(request)
        except Exception as exc:
            log.exception("a remote answer failed")
            request.sink(Failed(f"the remote answer failed: {exc}", FailureKind.INTERNAL))
            request.sink(Finished(FinishReason.ERROR))

    def _outgoing(self, messages: list[dict]) -> list[dict]:
        """The messages with what the policy hides from a remote destination masked, as a
        last line behind the engine's own input scan (history and memories included)."""
        if self.policy is None:
            return [dict(m) for m in messages]
        from ...safety import scan

        return [{**m, "content": scan(m["content"], self.policy, "remote").redacted_text}
                if isinstance(m.get("content"), str) else dict(m) for m in messages]

    async def _answer(self, request) -> None:
        sink = request.sink
        if request.cancel.is_set():
            sink(Finished(FinishReason.CANCELLED))
            return
        if request.messages is None:
            sink(Failed("a remote model needs the request's chat messages, and it has only token ids",
                        FailureKind.INTERNAL))
            sink(Finished(FinishReason.ERROR))
            return
        assert self.model is not None
        run = _RemoteAnswer(self.model, sink)
        messages = self._outgoing(request.messages)
        self.sent_messages += 1
        from ...network.purpose import Part, acting

        with acting(Part.REMOTE_PROVIDER, f"an answer from the remote model {self.name}"):
            await run.stream(messages, request)
        end = time.perf_counter()
        prompt_tokens, completion_tokens = run.server_usage
        if prompt_tokens is None:
            prompt_tokens = len(request.prompt_ids)
        if completion_tokens is None:
            completion_tokens = self.tokenizer.count("".join(run.parts)) if run.parts else 0
        first_at = run.first_at
        ttft = (first_at if first_at is not None else end) - request.submitted_at
        decode = end - first_at if first_at is not None else 0.0
        rate = (completion_tokens - 1) / decode if completion_tokens > 1 and decode > 0 else 0.0
        if run.error is not None:
            sink(Failed(run.error, run.kind))
        sink(Usage(prompt_tokens, completion_tokens, ttft, rate, 0))
        sink(Finished(run.reason))

    def close(self, timeout: float = 10.0) -> None:
        async def shut() -> None:
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.wait(set(self._tasks), timeout=timeout)
            if self.model is not None:
                await self.model.client.aclose()

        if self._loop.is_closed():
            return
        try:
            asyncio.run_coroutine_threadsafe(shut(), self._loop).result(timeout)
        except Exception:
            log.exception("closing the remote worker")
        self._thread.stop(timeout)
