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
import math
import signal
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..errors import InvalidRequest, WrenError
from ..events import (
    Delta,
    Failed,
    FailureKind,
    Finished,
    FinishReason,
    SafetyNotice,
    Started,
    TitleUpdate,
    ToolCall,
    Usage,
    event_to_dict,
)
from ..inference.sampling import SamplingParams
from ..logs import log_event
from .body import DEFAULT_MAX_BODY, body_id, check_length, path_id, read_json, text_chars
from .gate import ApiError, Busy, Gate, Limiter, error_for
from .hosts import HostPolicy
from .logprobs import requested
from .serving import Serving
from .streams import AnswerLog, AnswerLogs
from .transport import ClosingStream, Server, WriteTimeout
from .wire import OpenAIAnswer, check_unsupported, question_text, sampling_from, send_options, sse, stream_flags

DEFAULT_PORT = 8765
DEFAULT_MAX_QUEUE = 16
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
KEEP_ALIVE_SECONDS = 75
TITLE_WAIT_SECONDS = 60.0  # how long a finished answer's stream waits for its title
SAMPLING_TTL = 5.0  # a change to the sampling settings reaches the OpenAI endpoints within this
DEFAULT_WRITE_TIMEOUT = 30.0


@dataclass
class ServerOptions:
    max_queue: int = DEFAULT_MAX_QUEUE  # answers running or waiting; beyond: 429
    cors_origins: tuple[str, ...] = ()  # empty: no CORS headers at all
    keep_seconds: float = 300.0  # a finished answer stays resumable this long
    make_token: Callable[[], str] | None = None  # resume tokens (tests make them predictable)
    coalesce: bool = True  # a stream's chunks ready at the same moment go out as one write
    http: str = "auto"  # uvicorn's HTTP implementation: "auto" (httptools when installed) or "h11"
    max_body: int = DEFAULT_MAX_BODY  # bytes; a larger request body: 413, refused before it is all read
    # seconds one write may wait on a client that reads nothing; then its connection is dropped
    # and what it held (a queue slot, a sequence) is freed
    write_timeout: float = DEFAULT_WRITE_TIMEOUT
    allow_hosts: tuple[str, ...] = ()  # Host names accepted beyond the loopback ones ("*": any)

    def __post_init__(self) -> None:
        if not isinstance(self.max_queue, int) or self.max_queue < 1:
            raise InvalidRequest(f"the request queue limit must be at least 1, got {self.max_queue!r}")
        if not isinstance(self.max_body, int) or self.max_body < 1024:
            raise InvalidRequest(f"the request body limit must be at least 1024 bytes, got {self.max_body!r}")
        if not (isinstance(self.write_timeout, (int, float)) and 0 < self.write_timeout < math.inf):
            raise InvalidRequest(f"the write timeout must be a positive number of seconds, got {self.write_timeout!r}")


# -- helpers ----------------------------------------------------------------------------


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


# -- the OpenAI endpoints' pieces -------------------------------------------------------


def _openai_model(body: dict, *, chat: bool) -> str | None:
    """The model a request names (None: the loaded one), after the checks before any work."""
    if chat and not isinstance(body.get("messages"), list):
        raise ApiError(400, "messages must be a non-empty list of {\"role\", \"content\"} objects",
                       param="messages")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise ApiError(400, "model must be a string", param="model")
    return model or None


def _client_extras(body: dict) -> dict[str, Any]:
    """A chat request's response format and client-defined functions, for stateless_chat."""
    extra: dict[str, Any] = {}
    if body.get("response_format"):
        extra["response_format"] = body["response_format"]
    if body.get("tools") or body.get("tool_choice") is not None:
        # client-defined functions: the calls come back to the client, who runs them
        extra.update(tools=body.get("tools"), tool_choice=body.get("tool_choice"),
                     parallel_tool_calls=body.get("parallel_tool_calls") is not False)
    return extra


async def _openai_chunks(out: OpenAIAnswer, answer: AsyncIterator, events: AsyncGenerator,
                         finish: Callable[[OpenAIAnswer], Awaitable[None]], *, chat: bool,
                         include_usage: bool) -> AsyncIterator[bytes]:
    """A streamed OpenAI answer's chunks from `answer` (the events, the first one included);
    at its end, however it ends, the events are closed and `finish` runs."""
    try:
        if chat:
            yield sse(out.chunk({"role": "assistant", "content": ""}, include_usage=include_usage))
        async for event in answer:
            if isinstance(event, Delta):
                yield out.delta_chunk(event, include_usage=include_usage)
            elif isinstance(event, ToolCall):
                for chunk in _tool_call_chunks(out, event, include_usage=include_usage):
                    yield chunk
            else:
                out.take(event)
        for chunk in _stream_end(out, chat=chat, include_usage=include_usage):
            yield chunk
    finally:
        await events.aclose()  # a client that left: its sequence is cancelled here
        await finish(out)


def _tool_call_chunks(out: OpenAIAnswer, event: ToolCall, *, include_usage: bool) -> list[bytes]:
    """A tool call in OpenAI's streamed shape: the call's index, id and name first, then its arguments."""
    index = len(out.calls)
    out.take(event)
    return [
        sse(out.chunk({"tool_calls": [{
            "index": index, "id": event.id, "type": "function",
            "function": {"name": event.name, "arguments": ""}}]}, include_usage=include_usage)),
        sse(out.chunk({"tool_calls": [{
            "index": index, "function": {"arguments": out.calls[index]["function"]["arguments"]}}]},
            include_usage=include_usage)),
    ]


def _stream_end(out: OpenAIAnswer, *, chat: bool, include_usage: bool) -> list[bytes]:
    """A stream's last chunks: the error, or the finish reason (and usage when asked); then [DONE]."""
    if out.error is not None:
        ends = [sse({"error": {"message": out.error, "type": "server_error", "code": out.error_code}})]
    else:
        ends = [sse(out.chunk({} if chat else "", finish=out.finish_reason, include_usage=include_usage))]
        if include_usage:
            ends.append(sse(out.usage_chunk()))
    return [*ends, b"data: [DONE]\n\n"]


# -- Wren's conversation endpoint's pieces -------------------------------------------------

CONVERSATION_ACTIONS = ("next", "variant", "edit", "continue")
# what an answer that goes on keeps from before (engine.chat.continue_answer): none of these may be given
_NOT_WITH_CONTINUE = ("content", "messages", "sampling", "system_prompt", "tools", "tool_choice", "response_format")


@dataclass(frozen=True)
class _ConversationAsk:
    """A checked POST /api/conversation body."""

    action: str  # one of CONVERSATION_ACTIONS
    text: str | None  # the question (next, edit); None for variant and continue
    options: Any  # SendOptions
    conversation_id: int | None
    message_id: int | None  # the message to answer again, edit or continue (every action but next)
    temporary: bool


def _conversation_action(body: dict) -> str:
    action = body.get("action", "next")
    if action not in CONVERSATION_ACTIONS:
        raise ApiError(400, f"action must be next, variant, edit or continue, got {action!r}", param="action")
    if action == "continue":
        # The answer goes on with its own model settings and seed (engine.chat.continue_answer).
        given = [name for name in _NOT_WITH_CONTINUE if body.get(name) is not None]
        if given:
            raise ApiError(400, f"action continue takes only message_id (the answer to go on with); "
                                f"{', '.join(given)} cannot be given", param=given[0])
    return action


def _conversation_ask(body: dict, window: int | None) -> _ConversationAsk:
    """The body's checks, in order, before any work; `window` is the loaded model's context."""
    action = _conversation_action(body)
    text = question_text(body) if action not in ("variant", "continue") else None
    options = send_options(body)
    conv_id = body.get("conversation_id")
    message_id = body.get("message_id")
    if action != "next":
        message_id = body_id(message_id, "message_id",
                             f"action {action} needs message_id (the message to answer again, edit or continue)")
    if conv_id is not None:
        conv_id = body_id(conv_id, "conversation_id", "conversation_id must be a whole number")
    if text is not None:
        check_length(len(text), window, "content")
    temporary = body.get("temporary", False)
    if not isinstance(temporary, bool):
        raise ApiError(400, "temporary must be true or false", param="temporary")
    return _ConversationAsk(action, text, options, conv_id, message_id, temporary)


def _refusal(outcome: BaseException | list) -> BaseException:
    """What an answer that ended before it started raises: its error, or (a list of its early
    events) its failure or the safety rule that blocked the message."""
    if isinstance(outcome, BaseException):
        return outcome
    failed = next((e for e in outcome if isinstance(e, Failed)), None)
    if failed is not None:
        status = 400 if failed.kind is FailureKind.INVALID_REQUEST else 500
        return ApiError(status, failed.error, kind="invalid_request_error" if status == 400 else "server_error",
                        code=failed.kind.value)
    return ApiError(400, "a safety rule blocked this message; it was not stored or sent", code="content_blocked",
                    extra={"safety": [event_to_dict(n) for n in outcome if isinstance(n, SafetyNotice)]})


class _AnswerRun:
    """One stored answer on its way into its AnswerLog: what `WrenApp._produce` keeps between events.

    Events before Started (safety and memory notices) are held until it comes, then written
    first; `started` resolves to Started, to those events when the answer ended before it
    started, or to the error that ended it."""

    def __init__(self, engine, log: AnswerLog, started: asyncio.Future, new: bool):
        self.engine = engine
        self.log = log
        self.started = started
        self.new = new  # the conversation was made for this answer: it gets a title beside it
        self.before: list = []
        self.title_task: asyncio.Task | None = None
        self.titled = False
        self.usage: Usage | None = None
        self.error: str | None = None
        self.reason: FinishReason | None = None

    def early(self, event) -> bool:
        """An event before Started; whether the answer ended there."""
        if isinstance(event, Started):
            self.log.message_id = event.assistant_message_id
            for early in self.before:
                self.log.typed(event_to_dict(early))
            self.started.set_result(event)
            return False
        self.before.append(event)
        if isinstance(event, Finished):
            self.started.set_result(self.before)
            return True
        return False

    def take(self, event) -> None:
        """An event after Started, written to the log or kept for the end."""
        log = self.log
        if isinstance(event, Delta):
            log.delta(event.text)
            if self.new and self.title_task is None:
                self._name_chat()
        elif isinstance(event, TitleUpdate):
            self.emit_title(event.title)
        elif isinstance(event, Usage):
            self.usage = event
        elif isinstance(event, Failed):
            self.error = event.error
            log.typed({"type": "error", "kind": event.kind.value, "error": event.error})
        elif isinstance(event, Finished):
            self.reason = event.reason
        else:  # prefill progress, safety and memory notices, tool calls and results
            log.typed(event_to_dict(event))

    def failed(self, exc: BaseException) -> None:
        """The events ended with `exc` after Started."""
        self.error = self.error or (str(exc) if isinstance(exc, WrenError) else "the answer failed")
        self.reason = FinishReason.ERROR

    def emit_title(self, title: str) -> None:
        if not self.titled and not self.log.done:
            self.titled = True
            self.log.typed({"type": "title_generation", "title": title, "conversation_id": self.log.conversation_id})

    def _name_chat(self) -> None:
        """The first words are out: name the chat beside the answer."""
        self.title_task = asyncio.ensure_future(self.engine.chat.generate_title(self.log.conversation_id))
        self.title_task.add_done_callback(self._title_done)

    def _title_done(self, task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is None:
            self.emit_title(task.result())

    def _metadata(self) -> dict[str, Any]:
        metadata: dict[str, Any] = {"message_id": self.log.message_id}
        if self.usage is not None:
            metadata["usage"] = {"prompt_tokens": self.usage.prompt_tokens,
                                 "completion_tokens": self.usage.completion_tokens,
                                 "cached_tokens": self.usage.cached_tokens}
        if self.error:
            metadata["error"] = self.error
        return metadata

    async def end(self, request_id: str) -> None:
        """The log's last chunks (the finish, the title if it comes in time) and its close."""
        log, started = self.log, self.started
        if not started.done():
            started.set_result(InvalidRequest("the answer ended before it started"))
        if log.done or not isinstance(started.result(), Started):
            log.close()
            return
        reason = self.reason or FinishReason.CANCELLED
        log.finish(reason, self._metadata())
        if self.title_task is not None and not self.title_task.done():
            await asyncio.wait({self.title_task}, timeout=TITLE_WAIT_SECONDS)
            self.title_task.cancel()  # past the wait: the stream ends without a title
        log.typed({"type": "message_stream_complete", "conversation_id": log.conversation_id})
        log.close()
        log_event("server.answer", request_id=request_id, conversation_id=log.conversation_id,
                  message_id=log.message_id, reason=reason.value, chunks=len(log.chunks))


# -- the app ----------------------------------------------------------------------------


class WrenApp:
    """Routes and their shared state over one Engine."""

    def __init__(self, engine, key: str, options: ServerOptions | None = None, *, host: str = "127.0.0.1"):
        self.engine = engine
        self.answers = Serving(engine)  # stateless answers (nothing stored)
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
            Route("/api/conversation/{id:wren_id}", self.conversation_get, methods=["GET"]),
            Route("/api/conversation/{id:wren_id}/stream", self.resume, methods=["GET"]),
            Route("/api/conversation/{id:wren_id}/stop", self.stop, methods=["POST"]),
            Route("/api/tools/{call_id}/approve", self.approve_tool, methods=["POST"]),
        ]
        middleware = []
        if self.options.cors_origins:
            from starlette.middleware.cors import CORSMiddleware

            middleware.append(Middleware(CORSMiddleware, allow_origins=list(self.options.cors_origins),
                                         allow_methods=["GET", "POST"],
                                         allow_headers=["Authorization", "Content-Type", "Last-Event-ID"],
                                         expose_headers=["X-Request-Id", "Retry-After"]))
        middleware.append(Middleware(Gate, key=key, hosts=HostPolicy(host, self.options.allow_hosts)))
        self.app = Starlette(routes=routes, middleware=middleware,
                             exception_handlers={
                                 ApiError: self._on_error, Busy: self._on_error, WrenError: self._on_error,
                                 Exception: self._on_error})

    async def _body(self, request: Request) -> dict:
        return await read_json(request, self.options.max_body)

    def _window(self) -> int | None:
        """The loaded model's context window in tokens (None before one is loaded)."""
        status = self.engine.models.current
        return getattr(status, "context_length", None)

    async def _defaults(self, model: str) -> SamplingParams:
        """The model's default sampling, read again at most every SAMPLING_TTL seconds
        (reading it takes several trips to the database thread; settings change rarely)."""
        now = time.monotonic()
        cached = self._sampling.get(model)
        if cached is None or now - cached[0] > SAMPLING_TTL:
            cached = (now, await self.engine.settings.default_sampling(model))
            self._sampling[model] = cached
        return cached[1]

    async def _on_error(self, request: Request, exc: Exception) -> Response:
        error = error_for(exc)
        if error.status >= 500:
            log_event("server.error", request_id=request.state.request_id, error=exc, level=40)
        return error.response()

    # -- OpenAI-compatible ------------------------------------------------------------

    async def _all_models(self) -> list:
        """Installed models, then the remote providers' ("provider/model")."""
        return [*await self.engine.models.installed(), *await self.engine.providers.models()]

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
        body = await self._body(request)
        check_unsupported(body, chat=True)
        return await self._openai(request, body, chat=True)

    async def completions(self, request: Request) -> Response:
        body = await self._body(request)
        check_unsupported(body, chat=False)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str) or not prompt:
            raise ApiError(400, "prompt must be a non-empty string (one prompt per request)", param="prompt")
        body["prompt"] = prompt
        return await self._openai(request, body, chat=False)

    async def _openai(self, request: Request, body: dict, *, chat: bool) -> Response:
        model = _openai_model(body, chat=chat)
        stream, include_usage = stream_flags(body)
        since = self.limiter.acquire()
        try:
            status = await _until_disconnect(request, self.answers.serving_model(model))
            # cheap, before the safety scan and the tokenizer see a prompt that cannot fit
            check_length(text_chars(body["messages"] if chat else body["prompt"]), status.context_length,
                         "messages" if chat else "prompt")
            params = sampling_from(body, await self._defaults(status.name))
            top = requested(body, chat=chat)
            if top is not None:  # each token's probability and its `top` likeliest alternatives
                params = params.with_(logprobs=top)
            events = (self.answers.stateless_chat(body["messages"], params, **_client_extras(body))
                      if chat else self.answers.stateless_completion(body["prompt"], params))
            # The first event is awaited here, so errors before any answer (a prompt too
            # long, a bad message) are HTTP errors rather than a broken stream.
            first = await _until_disconnect(request, events.__anext__())
        except BaseException:
            self.limiter.release(since)
            raise
        request_id = request.state.request_id
        ident = ("chatcmpl-" if chat else "cmpl-") + request_id.removeprefix("req_")
        created = int(time.time())
        out = OpenAIAnswer(ident, created, status.name, chat, logprobs=top is not None)

        async def replay() -> AsyncIterator:
            yield first
            async for event in events:
                yield event

        async def finish(answer: OpenAIAnswer) -> None:
            self.limiter.release(since)
            log_event("server.completion", request_id=request_id, model=status.name, stream=stream,
                      reason=answer.reason.value if answer.reason else None,
                      prompt_tokens=answer.usage.prompt_tokens if answer.usage else None,
                      completion_tokens=answer.usage.completion_tokens if answer.usage else None)

        if stream:
            return ClosingStream(_openai_chunks(out, replay(), events, finish, chat=chat, include_usage=include_usage),
                                 media_type="text/event-stream", headers=SSE_HEADERS)

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
        body = await self._body(request)
        ask = _conversation_ask(body, self._window())
        if body.get("model") is not None:
            if not isinstance(body["model"], str):
                raise ApiError(400, "model must be a string", param="model")
            await self.answers.serving_model(body["model"])
        since = self.limiter.acquire()
        created = False
        try:
            conv_id, created = await self._conversation_for(ask)
            log = self.logs.new(conv_id)
            started: asyncio.Future = asyncio.get_running_loop().create_future()
            task = asyncio.create_task(self._produce(log, self._answer_events(ask, conv_id), started, created, since,
                                                     request.state.request_id))
        except BaseException:
            self.limiter.release(since)
            if created:
                await self.engine.conversations.delete(conv_id)
            raise
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        outcome = await started  # Started, or the notices of a blocked message, or an error
        if not isinstance(outcome, Started):
            if created:
                await self.engine.conversations.delete(conv_id)
            raise _refusal(outcome)
        return ClosingStream(log.follow(0, coalesce=self.options.coalesce), media_type="text/event-stream",
                             headers=SSE_HEADERS)

    async def _conversation_for(self, ask: _ConversationAsk) -> tuple[int, bool]:
        """The conversation the answer goes into, and whether it was made for it."""
        conversations = self.engine.conversations
        if ask.action != "next":
            return (await conversations.message(ask.message_id)).conversation_id, False
        if ask.conversation_id is None:
            return (await conversations.create(temporary=ask.temporary)).id, True
        # (an unknown conversation_id: engine.chat.send raises NotFound before anything is
        # stored, and that comes back as the 404 — no round trip of its own here)
        return ask.conversation_id, False

    def _answer_events(self, ask: _ConversationAsk, conv_id: int) -> AsyncIterator:
        chat = self.engine.chat
        if ask.action == "next":
            return chat.send(conv_id, ask.text, ask.options)
        if ask.action == "edit":
            return chat.edit_and_resend(ask.message_id, ask.text, ask.options)
        if ask.action == "continue":  # the same message grows: the stream's append op extends its text
            return chat.continue_answer(ask.message_id)
        return chat.regenerate(ask.message_id, ask.options)

    async def _produce(self, log: AnswerLog, events: AsyncIterator, started: asyncio.Future, new: bool,
                       since: float, request_id: str) -> None:
        """Runs the answer to its end whoever is listening; writes every chunk to `log`."""
        run = _AnswerRun(self.engine, log, started, new)
        try:
            async for event in events:
                if started.done():
                    run.take(event)
                elif run.early(event):
                    return  # ended before it started
        except BaseException as exc:
            if not started.done():
                started.set_result(exc)
                return
            run.failed(exc)
            if not isinstance(exc, Exception):
                raise
            log_event("server.error", request_id=request_id, error=exc, level=40)
        finally:
            self.limiter.release(since)
            await run.end(request_id)

    async def resume(self, request: Request) -> Response:
        conv_id = path_id(request)
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
        return ClosingStream(log.follow(after_n, coalesce=self.options.coalesce), media_type="text/event-stream",
                             headers=SSE_HEADERS)

    async def conversation_get(self, request: Request) -> Response:
        conv_id = path_id(request)
        conv = await self.engine.conversations.get(conv_id)
        shown = await self.engine.conversations.messages(conv_id)
        return JSONResponse({
            "id": conv.id, "title": conv.title, "model": conv.model, "pinned": conv.pinned,
            "messages": [{
                "id": m.id, "parent_id": m.parent_id, "role": m.role.value, "content": m.content,
                "status": m.status.value, "model": m.model, "prompt_tokens": m.prompt_tokens,
                "completion_tokens": m.completion_tokens, "error": m.error,
            } for m in shown],
        })

    async def stop(self, request: Request) -> Response:
        conv_id = path_id(request)
        await self.engine.conversations.get(conv_id)
        self.engine.chat.stop(conv_id)
        return JSONResponse({"conversation_id": conv_id, "stopping": True})

    async def prepare(self, request: Request) -> Response:
        body = await self._body(request)
        conv_id = body.get("conversation_id")
        conv_id = body_id(conv_id, "conversation_id",
                          "conversation_id is needed: a draft is warmed as the next message of a conversation")
        draft = body.get("content", body.get("draft"))
        if not isinstance(draft, str):
            raise ApiError(400, "content must be the draft's text", param="content")
        check_length(len(draft), self._window(), "content")
        wait = body.get("wait", False)
        await self.engine.conversations.get(conv_id)
        tokens = await self.engine.chat.prepare(conv_id, draft, send_options(body))
        out: dict[str, Any] = {"conversation_id": conv_id, "prompt_tokens": tokens}
        if wait is True and tokens is not None:
            out["cached_tokens"] = await self.engine.chat.prepared()
        return JSONResponse(out)

    async def approve_tool(self, request: Request) -> Response:
        body = await self._body(request)
        decision = body.get("decision")
        if decision not in ("once", "always", "deny"):
            raise ApiError(400, "decision must be once, always or deny", param="decision")
        self.engine.tools.approve(request.path_params["call_id"], decision)
        return JSONResponse({"id": request.path_params["call_id"], "decision": decision})


# -- running it -------------------------------------------------------------------------


class WrenServer:
    """uvicorn serving a WrenApp on the current asyncio loop (the engine's)."""

    def __init__(self, engine, key: str, *, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
                 options: ServerOptions | None = None):
        import uvicorn

        self.web = WrenApp(engine, key, options, host=host)
        self.outer = WriteTimeout(self.web.app, self.web.options.write_timeout)
        config = uvicorn.Config(self.outer, host=host, port=port, lifespan="off", access_log=False,
                                http=self.web.options.http,
                                # idle keep-alive connections stay open well past clients' own
                                # expiry (httpx: 5 s), so a client never reuses one the server is
                                # closing at that moment (a ReadError on its next request)
                                timeout_keep_alive=KEEP_ALIVE_SECONDS,
                                log_level="warning", timeout_graceful_shutdown=5, log_config=None)
        self.server = Server(config, on_shutdown=self._stop_answers)
        self._task: asyncio.Task | None = None

    def _stop_answers(self) -> None:
        """At shutdown, before connections are closed: every answer stops within a token
        (kept as stopped, with its text), so open streams end with their last chunk."""
        self.outer.shutting_down = True
        self.web.engine.chat.stop()

    @property
    def interrupted(self) -> bool:
        """Whether Ctrl+C stopped the server."""
        return signal.SIGINT in self.server.signals

    @property
    def port(self) -> int:
        return self.server.servers[0].sockets[0].getsockname()[1]

    async def serve(self) -> None:
        """Serve until stopped (Ctrl+C, or `stop()`); answers still running are stopped."""
        try:
            await self.server.serve()
        finally:
            self.web.engine.chat.stop()
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
