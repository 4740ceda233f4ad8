"""Stateless answers for `wren serve`'s OpenAI-compatible endpoints: a mixin `Engine` inherits.

An OpenAI client sends the whole conversation with every request and expects exactly
those messages to be the prompt. So these calls bypass conversations altogether: nothing
is stored, no chat appears in the user's list, memory neither reads nor saves anything, and
no Wren system prompt, instructions or summaries are added. What they share with
`Engine.send` is everything below the prompt: the loaded model's worker (and its batch
scheduler, so concurrent requests decode together), the safety policy on input and
output, and `Engine.stop()`, which stops them too.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from engine.errors import InvalidRequest, WrenError
from engine.events import (
    Delta,
    Event,
    Failed,
    Finished,
    FinishReason,
    SafetyNotice,
    Usage,
)
from engine.inference.constrain import Constraint
from engine.inference.sampling import SamplingParams
from engine.inference.worker import GenerationRequest, ModelWorker
from engine.safety import OutputGuard, scan

if TYPE_CHECKING:
    from engine.api import ModelStatus

# The owner recorded in Engine._active for requests that belong to no conversation.
STATELESS_OWNER = -1
ROLES = ("system", "user", "assistant")


class ModelBusy(WrenError):
    """A request named another model while answers from the loaded one are still streaming."""


class PromptTooLong(InvalidRequest):
    """The prompt leaves no room for an answer in the model's context window."""

    def __init__(self, message: str, *, tokens: int, limit: int):
        super().__init__(message)
        self.tokens = tokens
        self.limit = limit


def check_messages(messages: Any) -> list[dict]:
    """OpenAI-style chat messages as plain {"role", "content"} dicts; a clear
    InvalidRequest naming the first thing that is wrong."""
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("messages must be a non-empty list of {\"role\", \"content\"} objects")
    out = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise InvalidRequest(f"messages[{i}] must be an object with role and content")
        role = msg.get("role")
        if role == "developer":  # newer OpenAI clients' name for the system role
            role = "system"
        if role not in ROLES:
            raise InvalidRequest(f"messages[{i}].role must be one of {', '.join(ROLES)}, got {role!r}")
        content = msg.get("content")
        if isinstance(content, list):  # content parts: only text ones are understood
            texts = []
            for j, part in enumerate(content):
                if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                    kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                    raise InvalidRequest(f"messages[{i}].content[{j}] is a {kind!r} part; only text parts are supported")
                texts.append(part["text"])
            content = "".join(texts)
        if content is None and role == "assistant":
            content = ""
        if not isinstance(content, str):
            raise InvalidRequest(f"messages[{i}].content must be a string or a list of text parts")
        out.append({"role": role, "content": content})
    return out


class Serving:
    """Facade methods for a server's stateless requests (mixed into `Engine`)."""

    async def serving_model(self, name: str | None = None) -> ModelStatus:
        """The loaded model for a request naming `name` (None: whatever is loaded, else the
        default). Another installed model is loaded only while nothing streams; otherwise
        ModelBusy. An unknown name raises ModelNotFound."""
        e: Any = self
        status = e.current_model
        if name is None or (status is not None and status.name == name):
            await e._ensure_model()
            return e.current_model
        info = await asyncio.get_running_loop().run_in_executor(None, e.registry.get, name)
        if e._active:
            loaded = status.name if status else "another model"
            raise ModelBusy(f"“{loaded}” is answering other requests; “{info.name}” can be loaded "
                            "when they finish")
        return await e.load_model(info.name)

    async def stateless_chat(self, messages: list[dict], params: SamplingParams, *,
                             response_format: dict | None = None) -> AsyncIterator[Event]:
        """Answer `messages` (as given, through the model's chat template) without storing
        anything: SafetyNotice, Delta, Usage, Failed and Finished events. `response_format`
        (OpenAI's: json_object or json_schema) constrains the answer to valid JSON; a bad
        one raises InvalidRequest (ConstraintError) before anything runs."""
        messages = check_messages(messages)
        constraint = Constraint.from_response_format(response_format)
        notices, messages = await self._scan_messages(messages)
        for notice in notices:
            yield notice
        if notices and any(n.action.value == "block" for n in notices):
            yield Finished(FinishReason.BLOCKED)
            return
        worker: ModelWorker = await self._ensure_model()  # type: ignore[attr-defined]
        loop = asyncio.get_running_loop()
        ids = await loop.run_in_executor(None, worker.tokenizer.encode_chat, messages)
        async for event in self._generate(worker, ids, params, messages=messages, constraint=constraint):
            yield event

    async def stateless_completion(self, prompt: str, params: SamplingParams) -> AsyncIterator[Event]:
        """Continue raw `prompt` text (no chat template), storing nothing."""
        if not isinstance(prompt, str) or not prompt:
            raise InvalidRequest("prompt must be a non-empty string")
        notices, checked = await self._scan_messages([{"role": "user", "content": prompt}])
        for notice in notices:
            yield notice
        if notices and any(n.action.value == "block" for n in notices):
            yield Finished(FinishReason.BLOCKED)
            return
        worker: ModelWorker = await self._ensure_model()  # type: ignore[attr-defined]
        loop = asyncio.get_running_loop()
        ids = await loop.run_in_executor(None, worker.tokenizer.encode, checked[0]["content"])
        async for event in self._generate(worker, ids, params):
            yield event

    async def _scan_messages(self, messages: list[dict]) -> tuple[list[SafetyNotice], list[dict]]:
        """Every message through the input policy, as `Engine.send` scans a question."""
        e: Any = self
        notices: list[SafetyNotice] = []
        out = []
        for msg in messages:
            result = await asyncio.get_running_loop().run_in_executor(
                None, scan, msg["content"], e.policy, e._destination())
            notices.extend(result.notices("input"))
            out.append({**msg, "content": result.redacted_text})
        return notices, out

    async def _generate(self, worker: ModelWorker, ids: list[int], params: SamplingParams, *,
                        messages: list[dict] | None = None,
                        constraint: Constraint | None = None) -> AsyncIterator[Event]:
        e: Any = self
        window = e.current_model.context_length
        room = window - len(ids)
        if room < 1:
            raise PromptTooLong(f"the prompt is {len(ids):,} tokens; the model's context window holds {window:,}, "
                                "with room for at least one answer token", tokens=len(ids), limit=window)
        params = params.with_(max_tokens=max(1, min(params.max_tokens, room)))
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()

        def sink(event: Event) -> None:  # called on the inference thread
            loop.call_soon_threadsafe(events.put_nowait, event)

        # `messages` is what a model that takes messages (a remote provider's) is sent instead.
        request = GenerationRequest(ids, params, sink, messages=messages, constraint=constraint)
        entry = (request, STATELESS_OWNER)
        e._active.append(entry)
        guard = OutputGuard(e.policy, e._destination())
        reason = FinishReason.CANCELLED
        worker.submit(request)
        try:
            while True:
                event = await events.get()
                if isinstance(event, Delta):
                    step = guard.feed(event.text)
                elif isinstance(event, Finished):
                    reason = event.reason
                    step = guard.finish()
                else:
                    step = None
                if step is not None:
                    for notice in step.notices:
                        yield notice
                    if step.text and not step.blocked:
                        yield Delta(step.text)
                    if step.blocked:
                        reason = FinishReason.BLOCKED
                        break
                if isinstance(event, (Usage, Failed)):
                    yield event
                elif isinstance(event, Finished):
                    break
        finally:
            request.cancel.set()  # a consumer that walks away (client disconnect) stops the sequence
            if entry in e._active:
                e._active.remove(entry)
        yield Finished(reason)
