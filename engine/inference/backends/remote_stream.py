"""The OpenAI wire format as a remote backend reads it: a chat stream's server-sent events
parsed into ChatChunks (`parse_stream`), a server's thinking turned into the `<think>` tags the
turn splits off (`ThinkingTags`), an error body's message (`error_message`), and the errors a
remote provider's answer ends with (re-exported by remote.py, where callers import them)."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from ...errors import WrenError
from ..backend import ChatChunk

MAX_ERROR_BODY = 2000  # characters of an error response quoted back


class RemoteError(WrenError):
    """The remote provider could not give an answer."""


class RemoteTLSError(RemoteError):
    """The server's certificate failed verification."""


class RemoteTimeout(RemoteError):
    """Nothing came from the server within a timeout."""


class RemoteInterrupted(RemoteError):
    """The stream broke after it had started; it is not sent again."""


class RemoteProtocolError(RemoteError):
    """The server sent something that is not an OpenAI-compatible stream."""


def error_message(text: str) -> str:
    text = text[:MAX_ERROR_BODY]
    try:
        body = json.loads(text)
    except ValueError:
        return text.strip() or "no details"
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return error["message"]
        if isinstance(error, str):
            return error
        if isinstance(body.get("message"), str):
            return body["message"]
    return text.strip()


async def parse_stream(lines: AsyncIterator[str], where: str) -> AsyncGenerator[ChatChunk, None]:
    """Server-sent events of an OpenAI-compatible chat stream, as ChatChunks. A chunk that
    is not JSON, or an error event, raises RemoteProtocolError / RemoteError; a body that ends
    before the answer did (no finish_reason and no [DONE]: the connection was closed
    mid-answer) raises RemoteInterrupted once what came is given (it was kept as complete)."""
    data: list[str] = []
    done = finished = False
    given = 0  # chunks yielded
    async for line in lines:
        if done:  # read on to the end of the body, so every layer below finishes cleanly
            continue
        if line.startswith(":"):  # a comment (keep-alive)
            continue
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
            continue
        if line.strip():  # event:, id:, retry: fields carry nothing Wren needs
            continue
        if not data:
            continue
        payload, data = "\n".join(data), []
        if payload.strip() == "[DONE]":
            done = True
            continue
        chunk = _chunk(payload, where)
        if chunk is not None:
            finished = finished or chunk.finish_reason is not None
            given += 1
            yield chunk
    if data and not done:  # a last event without its blank line
        payload = "\n".join(data)
        if payload.strip() == "[DONE]":
            done = True
        else:
            chunk = _chunk(payload, where)
            if chunk is not None:
                finished = finished or chunk.finish_reason is not None
                given += 1
                yield chunk
    if not (done or finished):
        kept = "the partial answer is kept" if given else "nothing of the answer came"
        raise RemoteInterrupted(f"the stream from {where} ended before the answer did (no finish_reason and no "
                                f"[DONE]: the server closed it mid-answer); {kept}")


def whole_answer(text: str, content_type: str, where: str) -> ChatChunk:
    """A response to a streamed request that is not an event stream: a server that ignores
    `stream` and answers with the whole chat.completion JSON gives that answer as one chunk;
    anything else (an HTML page from a proxy, say) is a RemoteProtocolError quoting it (it
    read as an empty answer that succeeded)."""
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    choices = body.get("choices") if isinstance(body, dict) else None
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        message = choices[0].get("message") or {}
        content = message.get("content") if isinstance(message, dict) else None
        usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        return ChatChunk(content if isinstance(content, str) else "", choices[0].get("finish_reason") or "stop",
                         prompt if isinstance(prompt, int) else None,
                         completion if isinstance(completion, int) else None, _reasoning_of(message))
    if isinstance(body, dict) and "error" in body:
        raise RemoteError(f"{where} reported an error: {error_message(text)}")
    shown = " ".join(text.split())
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    raise RemoteProtocolError(f"{where} answered with {content_type or 'no content type'}, not an event stream "
                              f"or a chat completion: {shown!r}")


def _chunk(payload: str, where: str) -> ChatChunk | None:
    try:
        body = json.loads(payload)
    except ValueError:
        shown = payload if len(payload) <= 80 else payload[:77] + "..."
        raise RemoteProtocolError(f"{where} sent a malformed stream chunk (not JSON): {shown!r}") from None
    if not isinstance(body, dict):
        raise RemoteProtocolError(f"{where} sent a stream chunk that is not a JSON object")
    if "error" in body:
        raise RemoteError(f"{where} reported an error mid-stream: {error_message(json.dumps(body))}")
    text, finish, thought = "", None, ""
    choices = body.get("choices") or []
    if choices and isinstance(choices[0], dict):
        delta = choices[0].get("delta") or {}
        content = delta.get("content") if isinstance(delta, dict) else None
        if isinstance(content, str):
            text = content
        thought = _reasoning_of(delta)
        finish = choices[0].get("finish_reason")
    usage = body.get("usage")
    if not isinstance(usage, dict):
        usage = {}
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if not text and not thought and finish is None and prompt is None and completion is None:
        return None  # the role-only first chunk, and the like
    return ChatChunk(text, finish, prompt if isinstance(prompt, int) else None,
                     completion if isinstance(completion, int) else None, thought)


def _reasoning_of(delta: Any) -> str:
    """A delta's thinking: reasoning_content (vLLM, llama.cpp's server, DeepSeek), or
    reasoning (OpenRouter, Ollama's OpenAI endpoint)."""
    if not isinstance(delta, dict):
        return ""
    for key in ("reasoning_content", "reasoning"):
        value = delta.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


class ThinkingTags:
    """A server's thinking as the `<think>…</think>` text the turn's reasoning step splits
    off (engine/turn/thinking.py reads a remote model's stream as <think> tags): the tag
    opens before the first thinking and closes before the answer's first text."""

    def __init__(self) -> None:
        self.open = False

    def text(self, chunk: ChatChunk) -> str:
        out = ""
        if chunk.reasoning:
            out += ("" if self.open else "<think>") + chunk.reasoning
            self.open = True
        if chunk.text and self.open:
            out += "</think>"
            self.open = False
        return out + chunk.text
