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
import errno
import math
import signal
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..errors import InvalidRequest, WrenError
from ..events import Started
from ..inference.sampling import SamplingParams
from ..logs import log_event
from .body import DEFAULT_MAX_BODY, body_id, check_length, path_id, read_json, text_chars
from .conversation import AnswerRun, ConversationAsk, conversation_ask, refusal
from .gate import ApiError, Busy, Gate, Limiter, error_for, routing_error
from .hosts import HostPolicy
from .logprobs import requested
from .openai_stream import client_extras, openai_chunks, openai_model
from .serving import Serving
from .streams import AnswerLog, AnswerLogs
from .transport import ClosingStream, Server, WriteTimeout
from .wire import OpenAIAnswer, check_unsupported, sampling_from, send_options, stream_flags

DEFAULT_PORT = 8765
DEFAULT_MAX_QUEUE = 16
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
KEEP_ALIVE_SECONDS = 75
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
                                 HTTPException: self._on_routing_error, Exception: self._on_error})

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
        if isinstance(exc, ClientDisconnect):  # the client left while its body came: not Wren's error
            log_event("server.client_gone", request_id=request.state.request_id, level=20)
            return Response(status_code=499)
        error = error_for(exc)
        if error.status >= 500:
            log_event("server.error", request_id=request.state.request_id, error=exc, level=40)
        return error.response()

    async def _on_routing_error(self, request: Request, exc: Exception) -> Response:
        # an unknown path or a wrong method: Starlette raises these from its router
        if not isinstance(exc, HTTPException):
            return await self._on_error(request, exc)
        return routing_error(exc, request.method, request.url.path).response()

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
        model = openai_model(body, chat=chat)
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
            events = (self.answers.stateless_chat(body["messages"], params, **client_extras(body))
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
            return ClosingStream(openai_chunks(out, replay(), events, finish, chat=chat, include_usage=include_usage),
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
            current = self.engine.models.current
            if current is not None and current.backend == "remote" and out.error_code != "cancelled":
                # the provider's server failed, not this one: a gateway error, as a proxy says it
                raise ApiError(502, out.error, kind="server_error", code="upstream_error")
            raise ApiError(500, out.error, kind="server_error", code=out.error_code)
        return JSONResponse(out.whole())

    # -- Wren's conversation stream ----------------------------------------------------

    async def conversation(self, request: Request) -> Response:
        body = await self._body(request)
        ask = conversation_ask(body, self._window())
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
            raise refusal(outcome)
        return ClosingStream(log.follow(0, coalesce=self.options.coalesce), media_type="text/event-stream",
                             headers=SSE_HEADERS)

    async def _conversation_for(self, ask: ConversationAsk) -> tuple[int, bool]:
        """The conversation the answer goes into, and whether it was made for it."""
        conversations = self.engine.conversations
        if ask.action != "next":
            return (await conversations.message(ask.message_id)).conversation_id, False
        if ask.conversation_id is None:
            return (await conversations.create(temporary=ask.temporary)).id, True
        # (an unknown conversation_id: engine.chat.send raises NotFound before anything is
        # stored, and that comes back as the 404 — no round trip of its own here)
        return ask.conversation_id, False

    def _answer_events(self, ask: ConversationAsk, conv_id: int) -> AsyncIterator:
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
        run = AnswerRun(self.engine, log, started, new)
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
        if after_n < 0:
            raise ApiError(400, f"from must be a chunk number from 0 on, got {after_n}", param="from")
        if after_n > len(log.chunks):
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


def check_port(host: str, port: int) -> None:
    """WrenError, in a sentence, if `host`:`port` cannot be listened on (in use, say): asked
    before the model loads (uvicorn's own refusal came after it, as a 40-line traceback)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise WrenError(f"port {port} on {host} is in use (another wren serve?); choose another with "
                                "--port N, or --port 0 for any free one") from None
            raise WrenError(f"cannot listen on {host} port {port}: {exc.strerror or exc}") from None


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
