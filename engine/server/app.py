"""The HTTP app of `wren serve`: Starlette routes served by uvicorn on the engine's own loop.

Endpoints (see docs/server.md): OpenAI-compatible `POST /v1/chat/completions`,
`POST /v1/completions`, `GET /v1/models`; Wren's own `POST /api/conversation` (SSE in the
v1 delta encoding, resumable), `POST /api/conversation/prepare`,
`GET /api/conversation/{id}/stream`, `GET /api/conversation/{id}`,
`POST /api/conversation/{id}/stop`.

Every request needs `Authorization: Bearer KEY`. Each response carries `X-Request-Id`; the
log gets one `server.request` line per request (id, method, path, status, duration) and
never a prompt, an answer or a query string.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import math
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, fields
from typing import Any

from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..context import ContextOverflow
from ..errors import InvalidRequest, ModelNotFound, NotFound, WrenError
from ..events import (
    Delta,
    Failed,
    FailureKind,
    Finished,
    FinishReason,
    PrefillProgress,
    SafetyNotice,
    Started,
    TitleUpdate,
    TokenLogprob,
    ToolCall,
    Usage,
    event_to_dict,
)
from ..inference.sampling import SamplingParams
from ..logs import log_event
from .keys import same_key
from .logprobs import LogprobsError, chat_logprobs, completion_logprobs, requested
from .serving import ModelBusy, PromptTooLong
from .streams import AnswerLog, AnswerLogs

DEFAULT_PORT = 8765
DEFAULT_MAX_QUEUE = 16
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
KEEP_ALIVE_SECONDS = 75
TITLE_WAIT_SECONDS = 60.0  # how long a finished answer's stream waits for its title
SAMPLING_TTL = 5.0  # a change to the sampling settings reaches the OpenAI endpoints within this


@dataclass
class ServerOptions:
    max_queue: int = DEFAULT_MAX_QUEUE  # answers running or waiting; beyond: 429
    cors_origins: tuple[str, ...] = ()  # empty: no CORS headers at all
    keep_seconds: float = 300.0  # a finished answer stays resumable this long
    make_token: Callable[[], str] | None = None  # resume tokens (tests make them predictable)
    coalesce: bool = True  # a stream's chunks ready at the same moment go out as one write
    http: str = "auto"  # uvicorn's HTTP implementation: "auto" (httptools when installed) or "h11"

    def __post_init__(self) -> None:
        if not isinstance(self.max_queue, int) or self.max_queue < 1:
            raise InvalidRequest(f"the request queue limit must be at least 1, got {self.max_queue!r}")


class Busy(Exception):
    """Over the request queue limit."""

    def __init__(self, retry_after: int):
        self.retry_after = retry_after


class Limiter:
    """Answers admitted (running or waiting for the model), at most `limit` at once. The
    Retry-After it suggests is a recent answer's typical length, 1 to 60 seconds."""

    def __init__(self, limit: int):
        self.limit = limit
        self.admitted = 0
        self._typical = 1.0

    def acquire(self) -> float:
        if self.admitted >= self.limit:
            raise Busy(max(1, min(60, math.ceil(self._typical))))
        self.admitted += 1
        return time.monotonic()

    def release(self, since: float) -> None:
        self.admitted -= 1
        self._typical = 0.8 * self._typical + 0.2 * (time.monotonic() - since)


class ApiError(Exception):
    def __init__(self, status: int, message: str, *, kind: str = "invalid_request_error", code: str | None = None,
                 param: str | None = None, headers: dict | None = None, extra: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.code, self.param = status, message, kind, code, param
        self.headers = headers or {}
        self.extra = extra or {}

    def response(self) -> JSONResponse:
        body = {"message": self.message, "type": self.kind, "param": self.param, "code": self.code, **self.extra}
        return JSONResponse({"error": body}, status_code=self.status, headers=self.headers)


def _error_for(exc: BaseException) -> ApiError:
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, Busy):
        return ApiError(429, "too many requests are running or waiting; try again after Retry-After seconds",
                        kind="rate_limit_exceeded", code="queue_full", headers={"Retry-After": str(exc.retry_after)})
    if isinstance(exc, (ContextOverflow, PromptTooLong)):
        return ApiError(400, str(exc), code="context_length_exceeded")
    if isinstance(exc, ModelNotFound):
        return ApiError(404, str(exc), code="model_not_found", param="model")
    if isinstance(exc, NotFound):
        return ApiError(404, str(exc), code="not_found")
    if isinstance(exc, InvalidRequest):
        return ApiError(400, str(exc), param=getattr(exc, "param", None))
    if isinstance(exc, ModelBusy):
        return ApiError(409, str(exc), code="model_busy", param="model")
    if isinstance(exc, WrenError):
        return ApiError(500, str(exc), kind="server_error")
    return ApiError(500, "the server failed; the log has the details under this request's id", kind="server_error")


# -- the gate: request ids, auth, one log line per request ---------------------------------


class Gate:
    """Pure ASGI middleware (streams pass through untouched)."""

    def __init__(self, app, key: str):
        self.app = app
        self.key = key

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = "req_" + secrets.token_hex(12)
        scope.setdefault("state", {})["request_id"] = request_id
        started = time.perf_counter()
        status = 0

        async def send_with_id(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                MutableHeaders(scope=message).append("X-Request-Id", request_id)
            await send(message)

        try:
            if self._authorized(scope):
                await self.app(scope, receive, send_with_id)
            else:
                error = ApiError(401, "missing or wrong API key: send `Authorization: Bearer KEY` "
                                      "(`wren serve --show-key` prints the key)", code="invalid_api_key",
                                 headers={"WWW-Authenticate": 'Bearer realm="wren"'})
                await error.response()(scope, receive, send_with_id)
        finally:
            log_event("server.request", request_id=request_id, method=scope["method"], path=scope["path"],
                      status=status, duration_ms=round((time.perf_counter() - started) * 1000, 2))

    def _authorized(self, scope) -> bool:
        header = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
        scheme, _, given = header.decode("latin-1").partition(" ")
        # the comparison runs whatever was sent, so its time says nothing about the key
        return same_key(given.strip(), self.key) and scheme.lower() == "bearer"


# -- helpers ----------------------------------------------------------------------------


async def _body(request: Request) -> dict:
    raw = await request.body()
    try:
        body = json.loads(raw or b"null")
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ApiError(400, f"the request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return body


async def _until_disconnect(request: Request, work: Awaitable) -> Any:
    """`work`'s result; cancelled (and ApiError 499) if the client goes away first."""
    task = asyncio.ensure_future(work)

    async def gone() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.ensure_future(gone())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if not task.done():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)  # its cleanup runs (the sequence stops)
        raise ApiError(499, "the client closed the connection", code="client_closed")
    return task.result()


def _sse(payload) -> bytes:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n".encode()


def _openai_usage(usage: Usage | None) -> dict:
    prompt = usage.prompt_tokens if usage else 0
    completion = usage.completion_tokens if usage else 0
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": usage.cached_tokens if usage else 0}}


_FINISH = {FinishReason.STOP: "stop", FinishReason.LENGTH: "length", FinishReason.BLOCKED: "content_filter",
           FinishReason.CANCELLED: "stop", FinishReason.ERROR: "stop"}


def _engine_supports(option: str) -> bool:
    from ..api import SendOptions

    return option in {f.name for f in fields(SendOptions)}


# OpenAI request fields with a meaning Wren does not have (yet): refused, never ignored.
_REFUSED = {
    "functions": "functions (the old form of tools) are not supported",
    "function_call": "function_call (the old form of tool_choice) is not supported",
    "audio": "audio output is not supported",
    "prediction": "predicted outputs are not supported",
}


def _check_unsupported(body: dict, *, chat: bool) -> None:
    for name, why in _REFUSED.items():
        if body.get(name) not in (None, [], {}):
            raise ApiError(400, why, param=name, code="unsupported_parameter")
    if body.get("n", 1) != 1:
        raise ApiError(400, "n other than 1 is not supported: Wren writes one answer per request", param="n", code="unsupported_parameter")
    for name in ("presence_penalty", "frequency_penalty"):
        if body.get(name) not in (None, 0, 0.0):
            raise ApiError(400, f"{name} is not supported; use repetition_penalty (1 is off) or dry_multiplier",
                           param=name, code="unsupported_parameter")
    try:
        requested(body, chat=chat)
    except LogprobsError as exc:
        raise ApiError(400, str(exc), param=exc.param) from None
    if body.get("logit_bias") not in (None, {}):
        raise ApiError(400, "logit_bias is not supported", param="logit_bias", code="unsupported_parameter")
    if body.get("best_of", 1) != 1 or body.get("echo") or body.get("suffix"):
        raise ApiError(400, "best_of, echo and suffix are not supported", code="unsupported_parameter")
    modalities = body.get("modalities")
    if modalities not in (None, ["text"]):
        raise ApiError(400, "only text output is supported (modalities: [\"text\"])", param="modalities",
                       code="unsupported_parameter")
    if not chat and (body.get("tools") not in (None, []) or body.get("tool_choice") not in (None, "none", "auto")):
        raise ApiError(400, "tools are not supported by /v1/completions; use /v1/chat/completions", param="tools",
                       code="unsupported_parameter")
    if body.get("parallel_tool_calls") not in (None, True, False):
        raise ApiError(400, "parallel_tool_calls must be true or false", param="parallel_tool_calls")
    fmt = body.get("response_format")
    if fmt is not None and not _engine_supports("response_format"):
        kind = fmt.get("type") if isinstance(fmt, dict) else None
        if kind != "text":
            raise ApiError(400, f"response_format {kind or fmt!r} is not supported yet; only {{\"type\": \"text\"}} "
                                "(this engine has no constrained decoding)",
                           param="response_format", code="unsupported_parameter")
    if fmt is not None and not chat:
        kind = fmt.get("type") if isinstance(fmt, dict) else None
        if kind != "text":
            raise ApiError(400, "response_format is not supported by /v1/completions; use /v1/chat/completions",
                           param="response_format", code="unsupported_parameter")
    if not chat and body.get("stream_options") and not body.get("stream"):
        raise ApiError(400, "stream_options needs stream: true", param="stream_options")


def _sampling(body: dict, base: SamplingParams) -> SamplingParams:
    changes: dict[str, Any] = {}
    for name in ("temperature", "top_p", "seed", "top_k", "min_p", "repetition_penalty", "dry_multiplier"):
        if body.get(name) is not None:
            changes[name] = body[name]
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ApiError(400, f"max_tokens must be a whole number of at least 1, got {limit!r}", param="max_tokens")
        changes["max_tokens"] = limit
    stop = body.get("stop")
    if stop is not None:
        stop = [stop] if isinstance(stop, str) else stop
        if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop) or len(stop) > 16:
            raise ApiError(400, "stop must be a string or a list of at most 16 non-empty strings", param="stop")
        changes["stop"] = tuple(stop)
    try:
        return base.with_(**changes)
    except InvalidRequest as exc:
        raise ApiError(400, str(exc)) from None


def _stream_flags(body: dict) -> tuple[bool, bool]:
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError(400, "stream must be true or false", param="stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise ApiError(400, "stream_options must be an object", param="stream_options")
    include = options.get("include_usage", False)
    if not isinstance(include, bool):
        raise ApiError(400, "stream_options.include_usage must be true or false", param="stream_options")
    return stream, include


# -- the app ----------------------------------------------------------------------------


class WrenApp:
    """Routes and their shared state over one Engine."""

    def __init__(self, engine, key: str, options: ServerOptions | None = None):
        self.engine = engine
        self.options = options or ServerOptions()
        self.limiter = Limiter(self.options.max_queue)
        self.logs = AnswerLogs(self.options.keep_seconds, **(
            {"make_token": self.options.make_token} if self.options.make_token else {}))
        self.tasks: set[asyncio.Task] = set()  # answers that outlive their request
        self._sampling: dict[str, tuple[float, SamplingParams]] = {}
        routes = [
            Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/models/{name:path}", self.model, methods=["GET"]),
            Route("/api/conversation", self.conversation, methods=["POST"]),
            Route("/api/conversation/prepare", self.prepare, methods=["POST"]),
            Route("/api/conversation/{id:int}", self.conversation_get, methods=["GET"]),
            Route("/api/conversation/{id:int}/stream", self.resume, methods=["GET"]),
            Route("/api/conversation/{id:int}/stop", self.stop, methods=["POST"]),
            Route("/api/tools/{call_id}/approve", self.approve_tool, methods=["POST"]),
        ]
        middleware = []
        if self.options.cors_origins:
            from starlette.middleware.cors import CORSMiddleware

            middleware.append(Middleware(CORSMiddleware, allow_origins=list(self.options.cors_origins),
                                         allow_methods=["GET", "POST"],
                                         allow_headers=["Authorization", "Content-Type", "Last-Event-ID"],
                                         expose_headers=["X-Request-Id", "Retry-After"]))
        middleware.append(Middleware(Gate, key=key))
        self.app = Starlette(routes=routes, middleware=middleware,
                             exception_handlers={
                                 ApiError: self._on_error, Busy: self._on_error, WrenError: self._on_error,
                                 Exception: self._on_error})

    async def _defaults(self, model: str) -> SamplingParams:
        """The model's default sampling, read again at most every SAMPLING_TTL seconds
        (reading it takes several trips to the database thread; settings change rarely)."""
        now = time.monotonic()
        cached = self._sampling.get(model)
        if cached is None or now - cached[0] > SAMPLING_TTL:
            cached = (now, await self.engine.default_sampling(model))
            self._sampling[model] = cached
        return cached[1]

    async def _on_error(self, request: Request, exc: Exception) -> Response:
        error = _error_for(exc)
        if error.status >= 500:
            log_event("server.error", request_id=request.state.request_id, error=exc, level=40)
        return error.response()

    # -- OpenAI-compatible ------------------------------------------------------------

    async def _all_models(self) -> list:
        """Installed models, then the remote providers' ("provider/model")."""
        found = list(await self.engine.installed_models())
        if hasattr(self.engine, "remote_models"):
            found += await self.engine.remote_models()
        return found

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [self._model_card(m) for m in await self._all_models()]})

    async def model(self, request: Request) -> Response:
        name = request.path_params["name"]
        for info in await self._all_models():
            if info.name == name:
                return JSONResponse(self._model_card(info))
        raise ApiError(404, f"no installed or remote model is called {name!r}", code="model_not_found")

    @staticmethod
    def _model_card(info) -> dict:
        try:
            stamp = int(info.path.stat().st_mtime)  # when it was installed
        except (OSError, AttributeError):
            stamp = 0  # a remote model has no file
        provider = getattr(info, "provider", None) if getattr(info, "remote", False) else None
        return {"id": info.name, "object": "model", "created": stamp, "owned_by": provider or "wren",
                "context_length": info.context_length}

    async def chat_completions(self, request: Request) -> Response:
        body = await _body(request)
        _check_unsupported(body, chat=True)
        return await self._openai(request, body, chat=True)

    async def completions(self, request: Request) -> Response:
        body = await _body(request)
        _check_unsupported(body, chat=False)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str) or not prompt:
            raise ApiError(400, "prompt must be a non-empty string (one prompt per request)", param="prompt")
        body["prompt"] = prompt
        return await self._openai(request, body, chat=False)

    async def _openai(self, request: Request, body: dict, *, chat: bool) -> Response:
        if chat and not isinstance(body.get("messages"), list):
            raise ApiError(400, "messages must be a non-empty list of {\"role\", \"content\"} objects",
                           param="messages")
        model = body.get("model")
        if model is not None and not isinstance(model, str):
            raise ApiError(400, "model must be a string", param="model")
        stream, include_usage = _stream_flags(body)
        since = self.limiter.acquire()
        try:
            status = await _until_disconnect(request, self.engine.serving_model(model or None))
            params = _sampling(body, await self._defaults(status.name))
            top = requested(body, chat=chat)
            if top is not None:  # each token's probability and its `top` likeliest alternatives
                params = params.with_(logprobs=top)
            extra: dict[str, Any] = {}
            if chat and body.get("response_format"):
                extra["response_format"] = body["response_format"]
            if chat and (body.get("tools") or body.get("tool_choice") is not None):
                # client-defined functions: the calls come back to the client, who runs them
                extra.update(tools=body.get("tools"), tool_choice=body.get("tool_choice"),
                             parallel_tool_calls=body.get("parallel_tool_calls") is not False)
            events = (self.engine.stateless_chat(body["messages"], params, **extra)
                      if chat else self.engine.stateless_completion(body["prompt"], params))
            # The first event is awaited here, so errors before any answer (a prompt too
            # long, a bad message) are HTTP errors rather than a broken stream.
            first = await _until_disconnect(request, events.__anext__())
        except BaseException:
            self.limiter.release(since)
            raise
        request_id = request.state.request_id
        ident = ("chatcmpl-" if chat else "cmpl-") + request_id.removeprefix("req_")
        created = int(time.time())
        out = _OpenAIAnswer(ident, created, status.name, chat, logprobs=top is not None)

        async def replay() -> AsyncIterator:
            yield first
            async for event in events:
                yield event

        async def finish(answer: _OpenAIAnswer) -> None:
            self.limiter.release(since)
            log_event("server.completion", request_id=request_id, model=status.name, stream=stream,
                      reason=answer.reason.value if answer.reason else None,
                      prompt_tokens=answer.usage.prompt_tokens if answer.usage else None,
                      completion_tokens=answer.usage.completion_tokens if answer.usage else None)

        if stream:
            async def chunks() -> AsyncIterator[bytes]:
                try:
                    if chat:
                        yield _sse(out.chunk({"role": "assistant", "content": ""}, include_usage=include_usage))
                    async for event in replay():
                        if isinstance(event, Delta):
                            yield _sse(out.chunk({"content": event.text} if chat else event.text,
                                                 include_usage=include_usage, logprobs=out.delta_logprobs(event)))
                        elif isinstance(event, ToolCall):
                            # OpenAI's shape: the call's index, id and name first, then its arguments
                            index = len(out.calls)
                            out.take(event)
                            yield _sse(out.chunk({"tool_calls": [{
                                "index": index, "id": event.id, "type": "function",
                                "function": {"name": event.name, "arguments": ""}}]}, include_usage=include_usage))
                            yield _sse(out.chunk({"tool_calls": [{
                                "index": index, "function": {"arguments": out.calls[index]["function"]["arguments"]}}]},
                                include_usage=include_usage))
                        else:
                            out.take(event)
                    if out.error is not None:
                        yield _sse({"error": {"message": out.error, "type": "server_error", "code": out.error_code}})
                    else:
                        yield _sse(out.chunk({} if chat else "", finish=out.finish_reason, include_usage=include_usage))
                        if include_usage:
                            yield _sse(out.usage_chunk())
                    yield b"data: [DONE]\n\n"
                finally:
                    await events.aclose()  # a client that left: its sequence is cancelled here
                    await finish(out)

            return StreamingResponse(chunks(), media_type="text/event-stream", headers=SSE_HEADERS)

        async def collect() -> None:
            async for event in replay():
                out.take(event)

        try:
            await _until_disconnect(request, collect())
        finally:
            await events.aclose()
            await finish(out)
        if out.error is not None:
            raise ApiError(500, out.error, kind="server_error", code=out.error_code)
        return JSONResponse(out.whole())

    # -- Wren's conversation stream ----------------------------------------------------

    async def conversation(self, request: Request) -> Response:
        body = await _body(request)
        engine = self.engine
        action = body.get("action", "next")
        if action not in ("next", "variant", "edit", "continue"):
            raise ApiError(400, f"action must be next, variant, edit or continue, got {action!r}", param="action")
        if action == "continue":
            # The answer goes on with its own model settings and seed (Engine.continue_answer).
            given = [name for name in ("content", "messages", "sampling", "system_prompt", "tools", "tool_choice",
                                       "response_format") if body.get(name) is not None]
            if given:
                raise ApiError(400, f"action continue takes only message_id (the answer to go on with); "
                                    f"{', '.join(given)} cannot be given", param=given[0])
        text = _question(body) if action not in ("variant", "continue") else None
        options = _send_options(body)
        conv_id = body.get("conversation_id")
        message_id = body.get("message_id")
        if action != "next" and not _is_id(message_id):
            raise ApiError(400, f"action {action} needs message_id (the message to answer again, edit or continue)",
                           param="message_id")
        if conv_id is not None and not _is_id(conv_id):
            raise ApiError(400, "conversation_id must be a whole number", param="conversation_id")
        temporary = body.get("temporary", False)
        if not isinstance(temporary, bool):
            raise ApiError(400, "temporary must be true or false", param="temporary")
        if body.get("model") is not None:
            if not isinstance(body["model"], str):
                raise ApiError(400, "model must be a string", param="model")
            await engine.serving_model(body["model"])
        since = self.limiter.acquire()
        created = False
        try:
            if action != "next":
                conv_id = (await engine.get_message(message_id)).conversation_id
            elif conv_id is None:
                conv_id = (await engine.create_conversation(temporary=temporary)).id
                created = True
            # (an unknown conversation_id: Engine.send raises NotFound before anything is
            # stored, and that comes back below as the 404 — no round trip of its own here)
            if action == "next":
                events = engine.send(conv_id, text, options)
            elif action == "edit":
                events = engine.edit_and_resend(message_id, text, options)
            elif action == "continue":  # the same message grows: the stream's append op extends its text
                events = engine.continue_answer(message_id)
            else:
                events = engine.regenerate(message_id, options)
            log = self.logs.new(conv_id)
            started: asyncio.Future = asyncio.get_running_loop().create_future()
            task = asyncio.create_task(self._produce(log, events, started, created, since,
                                                     request.state.request_id))
        except BaseException:
            self.limiter.release(since)
            if created:
                await engine.delete_conversation(conv_id)
            raise
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        outcome = await started  # Started, or the notices of a blocked message, or an error
        if isinstance(outcome, BaseException):
            if created:
                await engine.delete_conversation(conv_id)
            raise outcome
        if isinstance(outcome, list):  # ended before it started: refused, or blocked before anything was stored
            if created:
                await engine.delete_conversation(conv_id)
            failed = next((e for e in outcome if isinstance(e, Failed)), None)
            if failed is not None:
                status = 400 if failed.kind is FailureKind.INVALID_REQUEST else 500
                raise ApiError(status, failed.error, kind="invalid_request_error" if status == 400 else "server_error",
                               code=failed.kind.value)
            raise ApiError(400, "a safety rule blocked this message; it was not stored or sent", code="content_blocked",
                           extra={"safety": [event_to_dict(n) for n in outcome if isinstance(n, SafetyNotice)]})
        return StreamingResponse(log.follow(0, coalesce=self.options.coalesce), media_type="text/event-stream",
                                 headers=SSE_HEADERS)

    async def _produce(self, log: AnswerLog, events: AsyncIterator, started: asyncio.Future, new: bool,
                       since: float, request_id: str) -> None:
        """Runs the answer to its end whoever is listening; writes every chunk to `log`."""
        engine = self.engine
        before: list = []  # events before Started: safety and memory notices
        title_task: asyncio.Task | None = None
        titled = False
        usage: Usage | None = None
        error: str | None = None
        reason: FinishReason | None = None

        def emit_title(title: str) -> None:
            nonlocal titled
            if not titled and not log.done:
                titled = True
                log.typed({"type": "title_generation", "title": title, "conversation_id": log.conversation_id})

        def title_done(task: asyncio.Task) -> None:
            if not task.cancelled() and task.exception() is None:
                emit_title(task.result())

        try:
            async for event in events:
                if not started.done():
                    if isinstance(event, Started):
                        log.message_id = event.assistant_message_id
                        for early in before:
                            log.typed(event_to_dict(early))
                        started.set_result(event)
                        continue
                    before.append(event)
                    if isinstance(event, Finished):
                        started.set_result(before)
                        return
                    continue
                if isinstance(event, Delta):
                    log.delta(event.text)
                    if new and title_task is None:
                        # The first words are out: name the chat beside the answer.
                        title_task = asyncio.ensure_future(engine.generate_title(log.conversation_id))
                        title_task.add_done_callback(title_done)
                elif isinstance(event, TitleUpdate):
                    emit_title(event.title)
                elif isinstance(event, Usage):
                    usage = event
                elif isinstance(event, Failed):
                    error = event.error
                    log.typed({"type": "error", "kind": event.kind.value, "error": event.error})
                elif isinstance(event, Finished):
                    reason = event.reason
                elif isinstance(event, PrefillProgress):
                    log.typed(event_to_dict(event))
                else:  # safety and memory notices, tool calls and results
                    log.typed(event_to_dict(event))
        except BaseException as exc:
            if not started.done():
                started.set_result(exc)
                return
            error = error or (str(exc) if isinstance(exc, WrenError) else "the answer failed")
            reason = FinishReason.ERROR
            if not isinstance(exc, Exception):
                raise
            log_event("server.error", request_id=request_id, error=exc, level=40)
        finally:
            self.limiter.release(since)
            if not started.done():
                started.set_result(InvalidRequest("the answer ended before it started"))
            if log.done or not started.done() or not isinstance(started.result(), Started):
                log.close()
            else:
                metadata: dict[str, Any] = {"message_id": log.message_id}
                if usage is not None:
                    metadata["usage"] = {"prompt_tokens": usage.prompt_tokens,
                                         "completion_tokens": usage.completion_tokens,
                                         "cached_tokens": usage.cached_tokens}
                if error:
                    metadata["error"] = error
                log.finish(reason or FinishReason.CANCELLED, metadata)
                if title_task is not None and not title_task.done():
                    await asyncio.wait({title_task}, timeout=TITLE_WAIT_SECONDS)
                    title_task.cancel()  # past the wait: the stream ends without a title
                log.typed({"type": "message_stream_complete", "conversation_id": log.conversation_id})
                log.close()
                log_event("server.answer", request_id=request_id, conversation_id=log.conversation_id,
                          message_id=log.message_id, reason=(reason or FinishReason.CANCELLED).value,
                          chunks=len(log.chunks))

    async def resume(self, request: Request) -> Response:
        conv_id = request.path_params["id"]
        token = request.query_params.get("resume")
        if not token:
            raise ApiError(400, "resume=TOKEN is missing (the token is the first event of the stream)",
                           param="resume")
        after = request.query_params.get("from") or request.headers.get("last-event-id") or "0"
        try:
            after_n = int(after)
        except ValueError:
            raise ApiError(400, f"from must be a chunk number, got {after!r}", param="from") from None
        log = self.logs.find(token, conv_id)
        if log is None:
            raise ApiError(404, f"no answer of conversation {conv_id} can be resumed with that token (it may have "
                                "finished more than a few minutes ago: GET /api/conversation/{id} has it)",
                           code="not_found")
        if not 0 <= after_n <= len(log.chunks):
            raise ApiError(400, f"from={after_n} is beyond the {len(log.chunks)} chunks sent", param="from")
        return StreamingResponse(log.follow(after_n, coalesce=self.options.coalesce), media_type="text/event-stream",
                                 headers=SSE_HEADERS)

    async def conversation_get(self, request: Request) -> Response:
        conv_id = request.path_params["id"]
        conv = await self.engine.get_conversation(conv_id)
        shown = await self.engine.messages(conv_id)
        return JSONResponse({
            "id": conv.id, "title": conv.title, "model": conv.model, "pinned": conv.pinned,
            "messages": [{
                "id": m.id, "parent_id": m.parent_id, "role": m.role.value, "content": m.content,
                "status": m.status.value, "model": m.model, "prompt_tokens": m.prompt_tokens,
                "completion_tokens": m.completion_tokens, "error": m.error,
            } for m in shown],
        })

    async def stop(self, request: Request) -> Response:
        conv_id = request.path_params["id"]
        await self.engine.get_conversation(conv_id)
        self.engine.stop(conv_id)
        return JSONResponse({"conversation_id": conv_id, "stopping": True})

    async def prepare(self, request: Request) -> Response:
        body = await _body(request)
        conv_id = body.get("conversation_id")
        if not _is_id(conv_id):
            raise ApiError(400, "conversation_id is needed: a draft is warmed as the next message of a conversation",
                           param="conversation_id")
        draft = body.get("content", body.get("draft"))
        if not isinstance(draft, str):
            raise ApiError(400, "content must be the draft's text", param="content")
        wait = body.get("wait", False)
        await self.engine.get_conversation(conv_id)
        tokens = await self.engine.prepare(conv_id, draft, _send_options(body))
        out: dict[str, Any] = {"conversation_id": conv_id, "prompt_tokens": tokens}
        if wait is True and tokens is not None:
            out["cached_tokens"] = await self.engine.prepared()
        return JSONResponse(out)

    async def approve_tool(self, request: Request) -> Response:
        if not hasattr(self.engine, "approve_tool"):
            raise ApiError(400, "this engine has no tools yet", code="unsupported")
        body = await _body(request)
        decision = body.get("decision")
        if decision not in ("once", "always", "deny"):
            raise ApiError(400, "decision must be once, always or deny", param="decision")
        self.engine.approve_tool(request.path_params["call_id"], decision)
        return JSONResponse({"id": request.path_params["call_id"], "decision": decision})


class _OpenAIAnswer:
    """What one OpenAI-style answer has gathered, and its chunks' shapes."""

    def __init__(self, ident: str, created: int, model: str, chat: bool, *, logprobs: bool = False):
        self.ident, self.created, self.model, self.chat = ident, created, model, chat
        self.logprobs = logprobs  # asked for: the choices carry each token's probabilities
        self.entries: list[TokenLogprob] = []
        self.unrated = False  # a delta came without them (a remote model): the choice says null
        self.offset = 0  # characters streamed so far (a completion's text_offset)
        self.parts: list[str] = []
        self.usage: Usage | None = None
        self.reason: FinishReason | None = None
        self.error: str | None = None
        self.error_code: str | None = None
        self.calls: list[dict] = []  # the client's functions the model called

    def take(self, event) -> None:
        if isinstance(event, Delta):
            self.parts.append(event.text)
            if event.logprobs is None:
                self.unrated = True
            else:
                self.entries.extend(event.logprobs)
        elif isinstance(event, ToolCall):
            self.calls.append({"id": event.id, "type": "function", "function": {
                "name": event.name, "arguments": json.dumps(event.arguments, ensure_ascii=False)}})
        elif isinstance(event, Usage):
            self.usage = event
        elif isinstance(event, Failed):
            self.error = event.error
            self.error_code = event.kind.value
        elif isinstance(event, Finished):
            self.reason = event.reason
            if event.reason is FinishReason.ERROR and self.error is None:
                self.error, self.error_code = "the answer failed", FailureKind.INTERNAL.value

    @property
    def finish_reason(self) -> str:
        if self.calls and self.reason is FinishReason.STOP:
            return "tool_calls"
        return _FINISH[self.reason or FinishReason.CANCELLED]

    def _head(self) -> dict:
        return {"id": self.ident, "object": "chat.completion.chunk" if self.chat else "text_completion",
                "created": self.created, "model": self.model, "system_fingerprint": None}

    def delta_logprobs(self, event: Delta) -> dict | None:
        """A streamed delta's own tokens in the endpoint's logprobs shape (None: not asked
        for, or the model gave none)."""
        start = self.offset
        self.offset += len(event.text)
        if not self.logprobs or event.logprobs is None:
            return None
        return chat_logprobs(event.logprobs) if self.chat else completion_logprobs(event.logprobs, start)

    def chunk(self, delta, *, finish: str | None = None, include_usage: bool = False,
              logprobs: dict | None = None) -> dict:
        choice = ({"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish} if self.chat
                  else {"index": 0, "text": delta, "logprobs": logprobs, "finish_reason": finish})
        out = {**self._head(), "choices": [choice]}
        if include_usage:
            out["usage"] = None
        return out

    def usage_chunk(self) -> dict:
        return {**self._head(), "choices": [], "usage": _openai_usage(self.usage)}

    def whole(self) -> dict:
        text = "".join(self.parts)
        message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
        if self.calls:
            message["content"] = text or None
            message["tool_calls"] = self.calls
        rated = None
        if self.logprobs and not self.unrated:
            rated = chat_logprobs(self.entries) if self.chat else completion_logprobs(self.entries)
        choice = ({"index": 0, "message": message,
                   "logprobs": rated, "finish_reason": self.finish_reason} if self.chat
                  else {"index": 0, "text": text, "logprobs": rated, "finish_reason": self.finish_reason})
        return {"id": self.ident, "object": "chat.completion" if self.chat else "text_completion",
                "created": self.created, "model": self.model, "system_fingerprint": None,
                "choices": [choice], "usage": _openai_usage(self.usage)}


def _is_id(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _question(body: dict) -> str:
    """The new message's text: `content` (a string), or the seed's shape,
    messages[-1].content.parts (text parts joined)."""
    if "content" in body:
        text = body["content"]
        if not isinstance(text, str):
            raise ApiError(400, "content must be the message's text", param="content")
        return text
    messages = body.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[-1], dict):
        content = messages[-1].get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        if isinstance(parts, list) and parts and all(isinstance(p, str) for p in parts):
            role = (messages[-1].get("author") or {}).get("role", "user")
            if role != "user":
                raise ApiError(400, f"the new message must be the user's, got author.role {role!r}", param="messages")
            return "".join(parts)
    raise ApiError(400, "the message is missing: send \"content\": \"…\" or "
                        "\"messages\": [{\"author\": {\"role\": \"user\"}, \"content\": {\"content_type\": \"text\", "
                        "\"parts\": [\"…\"]}}]", param="content")


def _send_options(body: dict):
    from ..api import SendOptions

    changes: dict[str, Any] = {}
    sampling = body.get("sampling")
    if sampling is not None:
        if not isinstance(sampling, dict):
            raise ApiError(400, "sampling must be an object of sampling settings", param="sampling")
        try:
            changes["sampling"] = SamplingParams.from_dict(sampling)
        except (InvalidRequest, TypeError) as exc:
            raise ApiError(400, str(exc), param="sampling") from None
    system = body.get("system_prompt")
    if system is not None:
        if not isinstance(system, str):
            raise ApiError(400, "system_prompt must be a string", param="system_prompt")
        changes["system_prompt"] = system
    for name in ("tools", "tool_choice"):
        if body.get(name) is None:
            continue
        if not _engine_supports(name):
            raise ApiError(400, f"{name} is not supported yet: this engine has no tool calling",
                           param=name, code="unsupported_parameter")
        value = body[name]
        if name == "tools":
            if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
                raise ApiError(400, "tools must be a list of Wren tool names (see the tools settings)", param="tools")
            value = tuple(value)
        elif not isinstance(value, str):
            raise ApiError(400, "tool_choice must be \"auto\", \"none\" or a tool's name", param="tool_choice")
        changes[name] = value
    if body.get("response_format") is not None:
        if not _engine_supports("response_format"):
            raise ApiError(400, "response_format is not supported yet: this engine has no constrained decoding",
                           param="response_format", code="unsupported_parameter")
        changes["response_format"] = body["response_format"]
    try:
        return SendOptions(**changes)
    except InvalidRequest as exc:  # a schema that cannot be enforced, a bad tool choice
        raise ApiError(400, str(exc)) from None


# -- running it -------------------------------------------------------------------------


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class WrenServer:
    """uvicorn serving a WrenApp on the current asyncio loop (the engine's)."""

    def __init__(self, engine, key: str, *, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
                 options: ServerOptions | None = None):
        import uvicorn

        self.web = WrenApp(engine, key, options)
        config = uvicorn.Config(self.web.app, host=host, port=port, lifespan="off", access_log=False,
                                http=self.web.options.http,
                                # idle keep-alive connections stay open well past clients' own
                                # expiry (httpx: 5 s), so a client never reuses one the server is
                                # closing at that moment (a ReadError on its next request)
                                timeout_keep_alive=KEEP_ALIVE_SECONDS,
                                log_level="warning", timeout_graceful_shutdown=5, log_config=None)
        self.server = uvicorn.Server(config)
        self._task: asyncio.Task | None = None

    @property
    def port(self) -> int:
        return self.server.servers[0].sockets[0].getsockname()[1]

    async def serve(self) -> None:
        """Serve until stopped (Ctrl+C, or `stop()`); answers still running are stopped."""
        try:
            await self.server.serve()
        finally:
            self.web.engine.stop()
            for task in list(self.web.tasks):
                await asyncio.wait({task}, timeout=5)

    async def start(self) -> int:
        """Serve in the background; the port once it listens."""
        self._task = asyncio.create_task(self.serve())
        while not self.server.started:
            if self._task.done():
                self._task.result()
                raise RuntimeError("the server stopped before it started")
            await asyncio.sleep(0.01)
        return self.port

    async def wait(self) -> None:
        """Until the server stops (Ctrl+C)."""
        if self._task is not None:
            await self._task

    async def stop(self) -> None:
        self.server.should_exit = True
        if self._task is not None:
            await self._task
