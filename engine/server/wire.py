"""What requests and answers look like on the wire: the OpenAI fields Wren takes or refuses,
their sampling and stream flags, an OpenAI answer's chunks and whole body, the conversation
endpoint's message and options, and one SSE event."""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

from ..errors import InvalidRequest
from ..events import Delta, Failed, FailureKind, Finished, FinishReason, Reasoning, TokenLogprob, ToolCall, Usage
from ..inference.sampling import SamplingParams
from .gate import ApiError
from .logprobs import LogprobsError, chat_logprobs, completion_logprobs, requested


def sse(payload) -> bytes:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n".encode()


def openai_usage(usage: Usage | None) -> dict:
    prompt = usage.prompt_tokens if usage else 0
    completion = usage.completion_tokens if usage else 0
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": usage.cached_tokens if usage else 0},
            "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens if usage else 0}}


_EFFORTS = {"none": "off", "minimal": "off", "low": "low", "medium": "medium", "high": "high"}


def thinking_choice(body: dict) -> str | None:
    """How much a thinking model thinks, from OpenAI's reasoning_effort or the
    chat_template_kwargs.enable_thinking that vLLM and llama.cpp's server take (None: the
    model's default); engine/turn/thinking.py gives it to the template that takes it."""
    effort = body.get("reasoning_effort")
    if effort is not None and effort not in _EFFORTS:
        raise ApiError(400, f"reasoning_effort must be one of {', '.join(_EFFORTS)}, not {effort!r}",
                       param="reasoning_effort")
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise ApiError(400, "chat_template_kwargs must be an object", param="chat_template_kwargs")
    switch = (kwargs or {}).get("enable_thinking")
    if switch is not None and not isinstance(switch, bool):
        raise ApiError(400, "chat_template_kwargs.enable_thinking must be true or false", param="chat_template_kwargs")
    if effort is not None:
        return _EFFORTS[effort]
    return None if switch is None else "on" if switch else "off"


FINISH = {FinishReason.STOP: "stop", FinishReason.LENGTH: "length", FinishReason.BLOCKED: "content_filter",
           FinishReason.CANCELLED: "stop", FinishReason.ERROR: "stop"}


def engine_supports(option: str) -> bool:
    from ..records import SendOptions

    return option in {f.name for f in fields(SendOptions)}


# OpenAI request fields with a meaning Wren does not have (yet): refused, never ignored.
REFUSED = {
    "functions": "functions (the old form of tools) are not supported",
    "function_call": "function_call (the old form of tool_choice) is not supported",
    "audio": "audio output is not supported",
    "prediction": "predicted outputs are not supported",
}


def check_unsupported(body: dict, *, chat: bool) -> None:
    """A 400 for the first OpenAI parameter Wren does not do (in the order below), before any work."""
    _check_refused(body)
    try:
        requested(body, chat=chat)
    except LogprobsError as exc:
        raise ApiError(400, str(exc), param=exc.param) from None
    _check_one_plain_answer(body)
    _check_tools(body, chat=chat)
    _check_response_format(body.get("response_format"), chat=chat)
    if not chat and body.get("stream_options") and not body.get("stream"):
        raise ApiError(400, "stream_options needs stream: true", param="stream_options")


def _check_refused(body: dict) -> None:
    """The parameters Wren refuses outright, n and the OpenAI penalties."""
    for name, why in REFUSED.items():
        if body.get(name) not in (None, [], {}):
            raise ApiError(400, why, param=name, code="unsupported_parameter")
    if body.get("n", 1) != 1:
        raise ApiError(400, "n other than 1 is not supported: Wren writes one answer per request", param="n", code="unsupported_parameter")
    for name in ("presence_penalty", "frequency_penalty"):
        if body.get(name) not in (None, 0, 0.0):
            raise ApiError(400, f"{name} is not supported; use repetition_penalty (1 is off) or dry_multiplier",
                           param=name, code="unsupported_parameter")


def _check_one_plain_answer(body: dict) -> None:
    """One text answer, as written: no logit_bias, best_of, echo, suffix or other modalities."""
    if body.get("logit_bias") not in (None, {}):
        raise ApiError(400, "logit_bias is not supported", param="logit_bias", code="unsupported_parameter")
    if body.get("best_of", 1) != 1 or body.get("echo") or body.get("suffix"):
        raise ApiError(400, "best_of, echo and suffix are not supported", code="unsupported_parameter")
    if body.get("modalities") not in (None, ["text"]):
        raise ApiError(400, "only text output is supported (modalities: [\"text\"])", param="modalities",
                       code="unsupported_parameter")


def _check_tools(body: dict, *, chat: bool) -> None:
    if not chat and (body.get("tools") not in (None, []) or body.get("tool_choice") not in (None, "none", "auto")):
        raise ApiError(400, "tools are not supported by /v1/completions; use /v1/chat/completions", param="tools",
                       code="unsupported_parameter")
    if body.get("parallel_tool_calls") not in (None, True, False):
        raise ApiError(400, "parallel_tool_calls must be true or false", param="parallel_tool_calls")


def _check_response_format(fmt: Any, *, chat: bool) -> None:
    """Any response_format but plain text needs constrained decoding, and the chat endpoint."""
    if fmt is None:
        return
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return
    if not engine_supports("response_format"):
        raise ApiError(400, f"response_format {kind or fmt!r} is not supported yet; only {{\"type\": \"text\"}} "
                            "(this engine has no constrained decoding)",
                       param="response_format", code="unsupported_parameter")
    if not chat:
        raise ApiError(400, "response_format is not supported by /v1/completions; use /v1/chat/completions",
                       param="response_format", code="unsupported_parameter")


def sampling_from(body: dict, base: SamplingParams) -> SamplingParams:
    changes: dict[str, Any] = {}
    for name in ("temperature", "top_p", "seed", "top_k", "min_p", "repetition_penalty", "dry_multiplier"):
        if body.get(name) is not None:
            changes[name] = body[name]
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    if limit is not None:
        if isinstance(limit, float) and limit.is_integer():  # JSON's 1e3, or 256.0: a whole number
            limit = int(limit)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ApiError(400, f"max_tokens must be a whole number from 1 to 1,000,000, got {limit!r}",
                           param="max_tokens")
        changes["max_tokens"] = limit  # past the top, SamplingParams names its limit
    stop = body.get("stop")
    if stop is not None:
        stop = [stop] if isinstance(stop, str) else stop
        if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop) or len(stop) > 16:
            raise ApiError(400, "stop must be a string or a list of at most 16 non-empty strings", param="stop")
        changes["stop"] = tuple(stop)
    try:
        return base.with_(**changes)
    except InvalidRequest as exc:
        raise ApiError(400, str(exc), param=getattr(exc, "param", None)) from None


def stream_flags(body: dict) -> tuple[bool, bool]:
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


# Stands for a delta's text while a chunk's frame is cut out (no model name or id holds it).
_MARK = "\x00wren-delta\x00"


class OpenAIAnswer:
    """What one OpenAI-style answer has gathered, and its chunks' shapes."""

    def __init__(self, ident: str, created: int, model: str, chat: bool, *, logprobs: bool = False):
        self.ident, self.created, self.model, self.chat = ident, created, model, chat
        self.logprobs = logprobs  # asked for: the choices carry each token's probabilities
        self.entries: list[TokenLogprob] = []
        self.unrated = False  # a delta came without them (a remote model): the choice says null
        self.offset = 0  # characters streamed so far (a completion's text_offset)
        self.parts: list[str] = []
        self.thinking: list[str] = []  # Reasoning events' text: message.reasoning_content
        self.usage: Usage | None = None
        self.reason: FinishReason | None = None
        self.error: str | None = None
        self.error_code: str | None = None
        self.calls: list[dict] = []  # the client's functions the model called
        self._frames: dict[bool, tuple[bytes, bytes]] = {}  # delta_chunk's, by include_usage

    def take(self, event) -> None:
        if isinstance(event, Reasoning):
            self.thinking.append(event.text)
        elif isinstance(event, Delta):
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
            elif event.reason is FinishReason.CANCELLED and self.error is None:
                # OpenAI's format has no "stopped": said as "stop", a cut answer read as a whole one
                self.error, self.error_code = ("the answer was stopped before it finished (the server is shutting "
                                               "down); what came is all of it", "cancelled")

    @property
    def finish_reason(self) -> str:
        if self.calls and self.reason is FinishReason.STOP:
            return "tool_calls"
        return FINISH[self.reason or FinishReason.CANCELLED]

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

    def delta_chunk(self, event: Delta, *, include_usage: bool = False) -> bytes:
        """A streamed Delta as its SSE event: the bytes of sse(chunk(...)) for it. Only the
        text is encoded per token; the rest of the chunk, the same for the whole answer, is
        encoded once (a chunk a token is the server's busiest path)."""
        logprobs = self.delta_logprobs(event)
        if logprobs is None:
            if include_usage not in self._frames:
                self._frames[include_usage] = self._frame(include_usage)
            head, tail = self._frames[include_usage]
            if head:
                return head + json.dumps(event.text, ensure_ascii=False).encode() + tail
        return sse(self.chunk({"content": event.text} if self.chat else event.text,
                              include_usage=include_usage, logprobs=logprobs))

    def _frame(self, include_usage: bool) -> tuple[bytes, bytes]:
        """The chunk's bytes before and after its text; (b"", b"") where they cannot be cut
        out cleanly (then every chunk is encoded whole)."""
        mark = json.dumps(_MARK).encode()
        parts = sse(self.chunk({"content": _MARK} if self.chat else _MARK, include_usage=include_usage)).split(mark)
        return (parts[0], parts[1]) if len(parts) == 2 else (b"", b"")

    def chunk(self, delta, *, finish: str | None = None, include_usage: bool = False,
              logprobs: dict | None = None) -> dict:
        choice = ({"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish} if self.chat
                  else {"index": 0, "text": delta, "logprobs": logprobs, "finish_reason": finish})
        out = {**self._head(), "choices": [choice]}
        if include_usage:
            out["usage"] = None
        return out

    def usage_chunk(self) -> dict:
        return {**self._head(), "choices": [], "usage": openai_usage(self.usage)}

    def whole(self) -> dict:
        text = "".join(self.parts)
        message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
        if self.thinking:  # the field vLLM, llama.cpp's server and DeepSeek's API use
            message["reasoning_content"] = "".join(self.thinking)
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
                "choices": [choice], "usage": openai_usage(self.usage)}


def question_text(body: dict) -> str:
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


def send_options(body: dict):
    from ..records import SendOptions

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
        if not engine_supports(name):
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
        if not engine_supports("response_format"):
            raise ApiError(400, "response_format is not supported yet: this engine has no constrained decoding",
                           param="response_format", code="unsupported_parameter")
        changes["response_format"] = body["response_format"]
    try:
        return SendOptions(**changes)
    except InvalidRequest as exc:  # a schema that cannot be enforced, a bad tool choice
        raise ApiError(400, str(exc)) from None
