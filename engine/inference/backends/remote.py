"""A backend for any OpenAI-compatible server: vLLM, SGLang, llama.cpp's server, Ollama's
/v1, OpenAI, or another Wren (`wren serve`).

A remote model answers chat messages, not token ids, so it does not run in the
token-level ModelWorker: a `RemoteWorker` has the same face the turn code uses (`submit`
a GenerationRequest, events through its sink; `tokenizer`, `model`, `loaded`, `close`) and
sends the request's assembled `messages`. The tokenizer it carries is a local one, used to
budget the context and to count tokens when the server reports no usage.

Transport (`OpenAIClient`, httpx):
- TLS verification always on; a failed certificate says so by name. `http://` only to a
  loopback address unless `allow_http` (the user confirmed it).
- A connect timeout and a per-chunk (read) timeout.
- Retries, with exponential backoff and full jitter, of what never reached the model:
  connection failures and resets before the response began, 429/502/503/504 (honouring
  Retry-After). Once a 200 response has begun the request is never sent again: a drop
  then ends the answer as interrupted, its partial text kept.
- Every request carries an Idempotency-Key, the same one on each retry.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import numpy as np

from ...events import Delta, Failed, FailureKind, Finished, FinishReason, Usage
from ...loopback import is_loopback
from ...threadloop import LoopThread
from ..backend import ChatChunk, ModelBase, Unsupported
from .remote_context import context_from_info as context_from_info  # its callers import it from here
from .remote_context import discover_context
from .remote_stream import (
    RemoteError,
    RemoteInterrupted,
    RemoteProtocolError,
    RemoteTimeout,
    RemoteTLSError,
    ThinkingTags,
    error_message,
    parse_stream,
)

log = logging.getLogger(__name__)

DEFAULT_CONTEXT = 8192  # when neither the server's model info nor a setting says
RETRY_STATUSES = (429, 502, 503, 504)
CANCEL_POLL = 0.05  # seconds between looks at a request's cancel flag


def check_base_url(base_url: str, *, allow_http: bool = False) -> str:
    """The base URL without a trailing slash, or ValueError saying what is wrong with it."""
    if not isinstance(base_url, str) or not base_url.strip():
        raise ValueError("the base URL is empty; give one like https://api.example.com/v1")
    url = base_url.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{base_url!r} is not an http(s) URL with a host, like https://api.example.com/v1")
    if parts.scheme == "http" and not is_loopback(parts.hostname) and not allow_http:
        raise ValueError(
            f"{url} is plain http:// to another machine: keys and chats would cross the network "
            "unencrypted. Use https://, or confirm plain http explicitly (--allow-http)."
        )
    return url


def retry_after_seconds(value: str | None, now: float) -> float | None:
    """A Retry-After header (seconds, or an HTTP date) as seconds from `now` (wall time)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now)


@dataclass
class Transport:
    """How patient the client is. `sleep` and `clock` are injectable (tests use a fake clock)."""

    connect_timeout: float = 10.0
    chunk_timeout: float = 60.0  # longest silence between two chunks (and before the first)
    retries: int = 4  # attempts after the first
    backoff: float = 0.5  # seconds before the first retry; doubles each time
    max_backoff: float = 30.0
    max_retry_after: float = 120.0  # a server asking to wait longer is an error, not a wait
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    clock: Callable[[], float] = time.time
    jitter: Callable[[], float] = random.random

    def backoff_for(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            # The server's word is the floor; a little jitter spreads clients that got the same.
            return retry_after + 0.1 * self.jitter() * min(retry_after, 1.0)
        ceiling = min(self.max_backoff, self.backoff * 2 ** attempt)
        return ceiling * (0.5 + 0.5 * self.jitter())


class OpenAIClient:
    """An OpenAI-compatible endpoint at `base_url` (…/v1), used from one asyncio loop."""

    def __init__(self, base_url: str, api_key: str | None = None, *, allow_http: bool = False,
                 transport: Transport | None = None, http_transport: Any = None) -> None:
        import httpx

        self.base_url = check_base_url(base_url, allow_http=allow_http)
        self.transport = transport or Transport()
        self._api_key = api_key
        t = self.transport
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(connect=t.connect_timeout, read=t.chunk_timeout,
                                  write=t.chunk_timeout, pool=t.connect_timeout),
            verify=True, transport=http_transport, follow_redirects=False,
        )
        self.requests_sent = 0  # attempts, retries included

    def __repr__(self) -> str:  # never the key
        return f"OpenAIClient({self.base_url!r})"

    def _headers(self, idempotency_key: str) -> dict[str, str]:
        headers = {"Idempotency-Key": idempotency_key, "Accept": "text/event-stream"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    async def aclose(self) -> None:
        await self._client.aclose()

    async def list_models(self) -> list[dict]:
        """GET /models: the server's model objects (id, and context fields where it has them)."""
        import httpx

        try:
            response = await self._send("GET", "/models", None)
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from None
        try:
            body = response.json()
        except ValueError:
            raise RemoteProtocolError(f"{self.base_url}/models did not answer JSON") from None
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list):
            raise RemoteProtocolError(f"{self.base_url}/models has no 'data' list of models")
        return [m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]

    async def root_json(self, method: str, path: str, body: dict | None = None) -> Any:
        """A server's own JSON route beside its /v1 (llama.cpp's /props, Ollama's /api/show)."""
        import httpx

        root = self.base_url.removesuffix("/v1")
        try:
            return (await self._send(method, path, body, url=root + path)).json()
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from None

    async def _send(self, method: str, path: str, body: dict | None, *, url: str | None = None):
        """A non-streamed request, with the retry rules; raises RemoteError on an error status."""
        import httpx

        from ...network.purpose import Part, unless_named

        self._check_lock()
        key = str(uuid.uuid4())
        attempt = 0
        while True:
            self.requests_sent += 1
            try:
                with unless_named(Part.REMOTE_PROVIDER, f"a request to {self.base_url}{path}"):  # `wren providers test`
                    response = await self._client.request(method, url or self.base_url + path, json=body,
                                                          headers=self._headers(key))
            except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError) as exc:
                if attempt >= self.transport.retries or self._is_tls(exc):
                    raise
                await self.transport.sleep(self.transport.backoff_for(attempt, None))
                attempt += 1
                continue
            if response.status_code in RETRY_STATUSES and attempt < self.transport.retries:
                await self.transport.sleep(self._delay(response, attempt))
                attempt += 1
                continue
            if response.status_code >= 400:
                raise self._status_error(response.status_code, response.text)
            return response

    def _delay(self, response, attempt: int) -> float:
        wait = retry_after_seconds(response.headers.get("retry-after"), self.transport.clock())
        if wait is not None and wait > self.transport.max_retry_after:
            raise RemoteError(f"{self.base_url} is busy and asks to wait {wait:.0f} s; try again later")
        return self.transport.backoff_for(attempt, wait)

    async def stream_chat(self, model: str, messages: list[dict], params: Any, *,
                          request_id: str | None = None) -> AsyncIterator[ChatChunk]:
        """POST /chat/completions with stream=true; ChatChunks as they arrive."""
        import httpx

        self._check_lock()
        body = chat_body(model, messages, params)
        key = request_id or str(uuid.uuid4())
        attempt = 0
        while True:
            began = False
            self.requests_sent += 1
            try:
                async with self._client.stream("POST", self.base_url + "/chat/completions", json=body,
                                               headers=self._headers(key)) as response:
                    if response.status_code in RETRY_STATUSES and attempt < self.transport.retries:
                        delay = self._delay(response, attempt)
                        await response.aclose()
                        log.info("remote provider answered %d; retrying in %.1f s", response.status_code, delay)
                        await self.transport.sleep(delay)
                        attempt += 1
                        continue
                    if response.status_code >= 400:
                        text = (await response.aread()).decode("utf-8", "replace")
                        raise self._status_error(response.status_code, text)
                    began = True  # from here on the request is never sent again
                    # an async generator under httpx's AsyncIterator annotation; closed below
                    lines = cast(AsyncGenerator[str, None], response.aiter_lines())
                    chunks = parse_stream(lines, self.base_url)
                    try:
                        async for chunk in chunks:
                            yield chunk
                    finally:  # closed here, in this task, not later by the garbage collector
                        await chunks.aclose()
                        await lines.aclose()
                    return
            except httpx.HTTPError as exc:
                if began:
                    raise RemoteInterrupted(
                        f"the connection to {self.base_url} broke mid-answer ({_describe(exc)}); "
                        "the partial answer is kept and the request was not sent again"
                    ) from None
                retryable = isinstance(exc, (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError,
                                             httpx.WriteError)) and not self._is_tls(exc)
                if not retryable or attempt >= self.transport.retries:
                    raise self._transport_error(exc) from None
                delay = self.transport.backoff_for(attempt, None)
                log.info("remote provider unreachable (%s); retrying in %.1f s", type(exc).__name__, delay)
                await self.transport.sleep(delay)
                attempt += 1

    def _check_lock(self) -> None:
        """The offline lock refuses a provider that is not loopback here, in its own words
        (a RemoteError: the answer fails saying so), before httpx retries a refused connection."""
        from ...network.guard import check_url
        from ...network.lock import OfflineLocked

        try:
            check_url(self.base_url)
        except OfflineLocked as exc:
            raise RemoteError(str(exc)) from None

    @staticmethod
    def _is_tls(exc: BaseException) -> bool:
        import ssl

        seen: BaseException | None = exc
        while seen is not None:
            if isinstance(seen, ssl.SSLError) or "CERTIFICATE_VERIFY_FAILED" in str(seen):
                return True
            seen = seen.__cause__ or seen.__context__
        return False

    def _transport_error(self, exc: BaseException) -> RemoteError:
        import httpx

        from ...network.lock import locked_in

        if (locked := locked_in(exc)) is not None:  # refused under the lock past _check_lock (a redirect)
            return RemoteError(str(locked))

        if self._is_tls(exc):
            return RemoteTLSError(
                f"the TLS certificate of {self.base_url} could not be verified ({_describe(exc)}); "
                "Wren does not connect to a server it cannot verify. If it uses a private "
                "certificate authority, add that to the system's trusted certificates."
            )
        if isinstance(exc, httpx.ConnectTimeout):
            return RemoteTimeout(f"could not connect to {self.base_url} within {self.transport.connect_timeout:g} s")
        if isinstance(exc, httpx.TimeoutException):
            return RemoteTimeout(f"{self.base_url} sent nothing for {self.transport.chunk_timeout:g} s; gave up waiting")
        if isinstance(exc, httpx.ConnectError):
            return RemoteError(f"could not connect to {self.base_url}: {_describe(exc)}")
        return RemoteError(f"the request to {self.base_url} failed: {_describe(exc)}")

    def _status_error(self, status: int, text: str) -> RemoteError:
        message = error_message(text)
        if status in (401, 403):
            return RemoteError(f"{self.base_url} refused the key (HTTP {status}): {message}. "
                               "Check it with `wren providers test`, or set it again.")
        if status == 404:
            return RemoteError(f"{self.base_url} has no such model or endpoint (HTTP 404): {message}")
        return RemoteError(f"{self.base_url} answered HTTP {status}: {message}")


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


# What an OpenAI-compatible server reads of a chat message (tool calls and results included);
# anything else Wren keeps on a message stays on this machine.
_MESSAGE_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id")


def chat_body(model: str, messages: list[dict], params: Any) -> dict:
    """The JSON of a streamed chat completion with Wren's sampling settings (the fields an
    OpenAI-compatible server knows; the rest stay local)."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [{k: m[k] for k in _MESSAGE_KEYS if k in m} for m in messages],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if params is not None:
        body["temperature"] = params.temperature
        body["top_p"] = params.top_p
        body["max_tokens"] = params.max_tokens
        if params.stop:
            body["stop"] = list(params.stop)
        if params.seed is not None:
            body["seed"] = params.seed
    return body


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
        try:
            model = self.backend.load(None)
        except BaseException as exc:
            self._loaded.set_exception(exc)
            return
        if self.backend.spec.context_length is None:
            try:
                found = await asyncio.wait_for(discover_context(model.client, model.model),
                                               3 * model.client.transport.connect_timeout)
                if found:
                    model.context_length = found
            except Exception as exc:  # the provider says nothing of it; the default stands
                log.warning("could not read the context window of %s from its provider: %s", self.name, exc)
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
