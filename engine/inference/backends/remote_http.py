"""The HTTP client of a remote backend: an OpenAI-compatible endpoint, used from one asyncio loop.

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
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlsplit

from ...loopback import is_loopback
from ..backend import ChatChunk
from .remote_stream import (
    RemoteError,
    RemoteInterrupted,
    RemoteProtocolError,
    RemoteTimeout,
    RemoteTLSError,
    error_message,
    parse_stream,
    whole_answer,
)

log = logging.getLogger(__name__)

RETRY_STATUSES = (429, 502, 503, 504)


def check_base_url(base_url: str, *, allow_http: bool = False) -> str:
    """The base URL without a trailing slash, or ValueError saying what is wrong with it."""
    if not isinstance(base_url, str) or not base_url.strip():
        raise ValueError("the base URL is empty; give one like https://api.example.com/v1")
    url = base_url.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{base_url!r} is not an http(s) URL with a host, like https://api.example.com/v1")
    try:
        parts.port  # noqa: B018  (urlsplit checks the port only when it is read)
    except ValueError:
        port = parts.netloc.rpartition(":")[2]
        raise ValueError(f"{base_url!r} has the port {port!r}; a port is a whole number from 1 to 65535") from None
    if parts.port == 0:
        raise ValueError(f"{base_url!r} has the port 0; a port is a whole number from 1 to 65535")
    if parts.username is not None or parts.password is not None:
        # kept in the URL it would be stored, listed and said in every error in plain text
        raise ValueError(f"the base URL has a user name or password in it ({parts.scheme}://…@{parts.hostname}); "
                         "give the key as the provider's API key instead, which is stored as a secret")
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
            began = given = False  # the request was answered; a chunk of it came
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
                    content_type = response.headers.get("content-type", "")
                    if "text/event-stream" not in content_type.lower():
                        text = (await response.aread()).decode("utf-8", "replace")
                        yield whole_answer(text, content_type.split(";")[0].strip(), self.base_url)
                        return
                    # an async generator under httpx's AsyncIterator annotation; closed below
                    lines = cast(AsyncGenerator[str, None], response.aiter_lines())
                    chunks = parse_stream(lines, self.base_url)
                    try:
                        async for chunk in chunks:
                            given = True
                            yield chunk
                    finally:  # closed here, in this task, not later by the garbage collector
                        await chunks.aclose()
                        await lines.aclose()
                    return
            except httpx.HTTPError as exc:
                if began:
                    kept = "the partial answer is kept" if given else "nothing of the answer came"
                    raise RemoteInterrupted(
                        f"the connection to {self.base_url} broke mid-answer ({_describe(exc)}); "
                        f"{kept} and the request was not sent again"
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
            return RemoteError(f"{self.base_url} refused the key (HTTP {status}): {message}. The key may be "
                               "wrong or expired: adding the provider again under its name stores a new one "
                               "(`wren providers add NAME --base-url URL`, or Settings ▸ Providers); a key read "
                               "from an environment variable is changed there")
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
