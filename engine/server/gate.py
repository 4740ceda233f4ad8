"""The server's gate: request ids, the key, one log line per request; the request queue's
limit; and API errors with the status and body each one answers with."""

from __future__ import annotations

import math
import secrets
import time

from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse

from ..context import ContextOverflow
from ..errors import InvalidRequest, ModelNotFound, ModelNotLoaded, NotFound, WrenError
from ..logs import log_event
from .hosts import HostPolicy
from .keys import same_key
from .serving import ModelBusy, PromptTooLong


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


def error_for(exc: BaseException) -> ApiError:
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
    if isinstance(exc, ModelNotLoaded):  # another request switched the model while this one was prepared
        return ApiError(409, f"{exc}: another request loaded a different model; try again", code="model_busy",
                        param="model")
    if isinstance(exc, WrenError):
        return ApiError(500, str(exc), kind="server_error")
    return ApiError(500, "the server failed; the log has the details under this request's id", kind="server_error")


def routing_error(exc: HTTPException, method: str, path: str) -> ApiError:
    """Starlette's own refusals, raised before any endpoint runs (no route for the path, a
    method its route does not answer), as the API errors every other refusal is: clients
    read one JSON shape whatever went wrong, not Starlette's plain text."""
    shown = path if len(path) <= 200 else path[:200] + "…"
    if exc.status_code == 404:
        return ApiError(404, f"there is no endpoint at {shown}: this server answers /v1/chat/completions, "
                             "/v1/completions, /v1/models and /api/conversation (docs/server.md lists them all)",
                        code="not_found")
    if exc.status_code == 405:
        # Starlette joins a set, so its order changes from one process to the next
        allowed = ", ".join(sorted(m.strip() for m in (exc.headers or {}).get("Allow", "").split(",") if m.strip()))
        return ApiError(405, f"{shown} does not answer {method}; it answers {allowed}", code="method_not_allowed",
                        headers={"Allow": allowed})
    return ApiError(exc.status_code, exc.detail, headers=dict(exc.headers or {}))


class Gate:
    """Pure ASGI middleware (streams pass through untouched)."""

    def __init__(self, app, key: str, hosts: HostPolicy | None = None):
        self.app = app
        self.key = key
        self.hosts = hosts or HostPolicy("127.0.0.1")

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
            host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), None)
            if not self.hosts.accepts(host):  # first: a rebinding page learns nothing, not even 401
                shown = (host or "")[:100]
                error = ApiError(421, f"this server does not answer for Host {shown!r}: it answers this computer's "
                                      "loopback names (localhost, 127.0.0.1, [::1]) and the address it listens on; "
                                      "`wren serve --allow-host NAME` adds a name", code="invalid_host")
                await error.response()(scope, receive, send_with_id)
            elif self._authorized(scope):
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
