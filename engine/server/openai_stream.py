"""The OpenAI-compatible endpoints' pieces: a request's first checks, a chat request's client
extras, and a streamed answer's chunks (app.py's WrenApp._openai puts them together)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

from ..events import Delta, Reasoning, ToolCall
from .gate import ApiError
from .wire import OpenAIAnswer, sse, thinking_choice


def openai_model(body: dict, *, chat: bool) -> str | None:
    """The model a request names (None: the loaded one), after the checks before any work."""
    if chat and not isinstance(body.get("messages"), list):
        raise ApiError(400, "messages must be a non-empty list of {\"role\", \"content\"} objects",
                       param="messages")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise ApiError(400, "model must be a string", param="model")
    return model or None


def client_extras(body: dict) -> dict[str, Any]:
    """A chat request's response format and client-defined functions, for stateless_chat."""
    extra: dict[str, Any] = {}
    if body.get("response_format"):
        extra["response_format"] = body["response_format"]
    if body.get("tools") or body.get("tool_choice") is not None:
        # client-defined functions: the calls come back to the client, who runs them
        extra.update(tools=body.get("tools"), tool_choice=body.get("tool_choice"),
                     parallel_tool_calls=body.get("parallel_tool_calls") is not False)
    thinking = thinking_choice(body)  # reasoning_effort, chat_template_kwargs.enable_thinking
    if thinking is not None:
        extra["thinking"] = thinking
    return extra


async def openai_chunks(out: OpenAIAnswer, answer: AsyncIterator, events: AsyncGenerator,
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
            elif isinstance(event, Reasoning):  # thinking, apart from the answer's content
                out.take(event)
                yield sse(out.chunk({"reasoning_content": event.text}, include_usage=include_usage))
            elif isinstance(event, ToolCall):
                for chunk in tool_call_chunks(out, event, include_usage=include_usage):
                    yield chunk
            else:
                out.take(event)
        for chunk in stream_end(out, chat=chat, include_usage=include_usage):
            yield chunk
    finally:
        await events.aclose()  # a client that left: its sequence is cancelled here
        await finish(out)


def tool_call_chunks(out: OpenAIAnswer, event: ToolCall, *, include_usage: bool) -> list[bytes]:
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


def stream_end(out: OpenAIAnswer, *, chat: bool, include_usage: bool) -> list[bytes]:
    """A stream's last chunks: the error, or the finish reason (and usage when asked); then [DONE]."""
    if out.error is not None:
        ends = [sse({"error": {"message": out.error, "type": "server_error", "code": out.error_code}})]
    else:
        ends = [sse(out.chunk({} if chat else "", finish=out.finish_reason, include_usage=include_usage))]
        if include_usage:
            ends.append(sse(out.usage_chunk()))
    return [*ends, b"data: [DONE]\n\n"]
