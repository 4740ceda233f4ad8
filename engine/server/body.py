"""Request bodies and ids, read defensively: a size limit enforced while the body arrives,
and JSON that Wren can hold (engine/server/jsonsafe.py), each failure a 400 or 413 that
names the field, never a 500."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.convertors import Convertor, register_url_convertor
from starlette.requests import Request

from .gate import ApiError
from .jsonsafe import MAX_ID, UnsafeJson, loads

DEFAULT_MAX_BODY = 8 * 1024 * 1024  # bytes: a 128k-token prompt of text fits several times over
OFF_LOOP_BYTES = 256 * 1024  # a body this big is parsed on a worker thread, not the event loop
# A prompt this many characters per token of the model's context cannot fit: refused
# before tokenizing it. A token rarely holds more than ~10 characters of ordinary text;
# 32 leaves room for runs of spaces or repeated symbols that tokenize densely.
CHARS_PER_TOKEN_BOUND = 32


def parse_json(raw: bytes) -> dict:
    """The body as a checked JSON object; ApiError 400 naming the field otherwise."""
    try:
        body = loads(raw or b"null")
    except UnsafeJson as exc:
        raise ApiError(400, str(exc), param=exc.param) from None
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return body


def _too_large(limit: int) -> ApiError:
    return ApiError(413, f"the request body is larger than this server's limit of {limit:,} bytes "
                         "(wren serve --max-body)", code="request_too_large",
                    # the rest of the body is not read: the connection ends with this answer
                    headers={"Connection": "close"})


async def read_body(request: Request, limit: int) -> bytes:
    """The raw body, refused with 413 as soon as it is known to exceed `limit`: from
    Content-Length before reading anything, else counted while a chunked body arrives."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise ApiError(400, "Content-Length must be a number of bytes")
        if len(declared) > 18 or int(declared) > limit:
            raise _too_large(limit)
    parts: list[bytes] = []
    size = 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            raise _too_large(limit)
        parts.append(part)
    return b"".join(parts)


async def read_json(request: Request, limit: int) -> dict:
    raw = await read_body(request, limit)
    if len(raw) < OFF_LOOP_BYTES:
        return parse_json(raw)
    return await asyncio.get_running_loop().run_in_executor(None, parse_json, raw)


def check_length(chars: int, window: int | None, param: str) -> None:
    """A prompt of `chars` characters that cannot fit a `window`-token context, refused
    before anything counts its tokens."""
    if window and chars > window * CHARS_PER_TOKEN_BOUND:
        raise ApiError(400, f"{param} is {chars:,} characters: far more than the model's context window of "
                            f"{window:,} tokens can hold", param=param, code="context_length_exceeded")


def text_chars(value: Any) -> int:
    """The characters of every string in `value` (a prompt, or chat messages and their parts)."""
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return total


# -- ids ----------------------------------------------------------------------------------

_OVERSIZE = MAX_ID + 1  # what a path id of more digits than fit reads as (checked in the route)


class IdConvertor(Convertor):
    """`{id:wren_id}`: digits as an int; one too long for 64 bits reads as MAX_ID + 1 (never
    int() of thousands of digits), which path_id refuses with a 400."""

    regex = "[0-9]+"

    def convert(self, value: str) -> int:
        return int(value) if len(value) <= 19 else _OVERSIZE

    def to_string(self, value: int) -> str:
        return str(value)


register_url_convertor("wren_id", IdConvertor())


def path_id(request: Request) -> int:
    value = request.path_params["id"]
    if not 0 < value <= MAX_ID:
        raise ApiError(400, f"the conversation id in the path must be a whole number from 1 to {MAX_ID} "
                            "(a 64-bit integer)", param="id")
    return value


def body_id(value: Any, param: str, needed: str) -> int:
    """`value` as a stored id (1 to MAX_ID), else ApiError 400 naming `param`; `needed`
    says what the id is for."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_ID:
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value > MAX_ID:
        raise ApiError(400, f"{param} {value} is beyond the largest id, {MAX_ID} (a 64-bit integer)", param=param)
    raise ApiError(400, needed, param=param)
