"""Stateless answers for `wren serve`'s OpenAI-compatible endpoints: `Serving`, which the
server app builds over the engine's public surface.

An OpenAI client sends the whole conversation with every request and expects exactly
those messages to be the prompt. So these calls bypass conversations altogether: nothing
is stored, no chat appears in the user's list, memory neither reads nor saves anything, and
no Wren system prompt, instructions or summaries are added. What they share with
`engine.chat.send` is everything below the prompt: the loaded model's worker (and its batch
scheduler, so concurrent requests decode together), the safety policy on input and
output, the answer text's steps (engine/turn/text.py: call parsing, the output guard,
log-probabilities) and `engine.chat.stop()`, which stops them too.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InvalidRequest, ModelNotFound, ModelNotLoaded, WrenError
from ..events import (
    Delta,
    Event,
    Failed,
    FailureKind,
    Finished,
    FinishReason,
    Reasoning,
    SafetyNotice,
    ToolCall,
    Usage,
)
from ..inference.constrain import Constraint, ConstraintError
from ..inference.handoff import loop_sink
from ..inference.sampling import SamplingParams
from ..inference.worker import GenerationRequest, ModelWorker
from ..logprobs import AnswerLogprobs
from ..logs import log_event
from ..safety import OutputGuard, scan
from ..tools.parse import CallParser, ParsedCall
from ..tools.prompt import ToolPlan, plan_for
from ..tools.registry import ToolSpec
from ..turn.text import AnswerText, generation
from ..turn.thinking import splitter, template_vars, token_counter
from .jsonsafe import UnsafeJson, loads

if TYPE_CHECKING:
    from ..api import Engine
    from ..records import ModelStatus

# The owner recorded in Engine._active for requests that belong to no conversation.
STATELESS_OWNER = -1
ROLES = ("system", "user", "assistant", "tool")
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
CHOICES = ("auto", "none", "required")


class ModelBusy(WrenError):
    """A request named another model while answers from the loaded one are still streaming."""


class BadField(InvalidRequest):
    """A request field that is wrong; `param` names it (OpenAI's error `param`)."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


class PromptTooLong(InvalidRequest):
    """The prompt leaves no room for an answer in the model's context window."""

    def __init__(self, message: str, *, tokens: int, limit: int):
        super().__init__(message)
        self.tokens = tokens
        self.limit = limit


def _text(content: Any, where: str) -> str:
    if isinstance(content, list):  # content parts: only text ones are understood
        texts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise BadField(f"{where}[{j}] is a {kind!r} part; only text parts are supported", where)
            texts.append(part["text"])
        content = "".join(texts)
    if not isinstance(content, str):
        raise BadField(f"{where} must be a string or a list of text parts", where)
    return content


def check_messages(messages: Any) -> list[dict]:
    """OpenAI-style chat messages as plain dicts, a clear BadField naming the first thing
    that is wrong. {"role", "content"}; an assistant's calls as "tool_calls": [(id, name,
    arguments dict)]; a tool result as {"role": "tool", "content", "tool_call_id", "name"}
    (the name from the call it answers)."""
    if not isinstance(messages, list) or not messages:
        raise BadField("messages must be a non-empty list of {\"role\", \"content\"} objects", "messages")
    out: list[dict] = []
    called: dict[str, str] = {}  # call id -> tool name, from the assistant messages so far
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise BadField(f"messages[{i}] must be an object with role and content", f"messages[{i}]")
        role = msg.get("role")
        if role == "developer":  # newer OpenAI clients' name for the system role
            role = "system"
        if role not in ROLES:
            raise BadField(f"messages[{i}].role must be one of {', '.join(ROLES)}, got {role!r}", f"messages[{i}].role")
        content = msg.get("content")
        if content is None and role == "assistant":
            content = ""
        item: dict[str, Any] = {"role": role, "content": _text(content, f"messages[{i}].content")}
        if role == "assistant" and msg.get("tool_calls") not in (None, []):
            item["tool_calls"] = _calls_of(msg["tool_calls"], f"messages[{i}].tool_calls")
            called.update((ident, name) for ident, name, _ in item["tool_calls"])
        elif role == "tool":
            ident = msg.get("tool_call_id")
            if not isinstance(ident, str) or not ident:
                raise BadField(f"messages[{i}].tool_call_id must be the id of the call this result answers",
                               f"messages[{i}].tool_call_id")
            name = called.get(ident) or msg.get("name")
            if not isinstance(name, str) or not name:
                raise BadField(f"messages[{i}].tool_call_id {ident!r} answers no call of an earlier assistant "
                               "message", f"messages[{i}].tool_call_id")
            item.update(tool_call_id=ident, name=name)
        out.append(item)
    return out


def _scan_values(value: Any, check: Callable[[str], str]) -> Any:
    """`value` (a call's JSON arguments) with every string, keys excepted, passed through `check`."""
    if isinstance(value, str):
        return check(value)
    if isinstance(value, dict):
        return {key: _scan_values(item, check) for key, item in value.items()}
    if isinstance(value, list):
        return [_scan_values(item, check) for item in value]
    return value


def _calls_of(calls: Any, where: str) -> list[tuple[str, str, dict]]:
    if not isinstance(calls, list):
        raise BadField(f"{where} must be a list of calls", where)
    out = []
    for j, call in enumerate(calls):
        at = f"{where}[{j}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(call, dict) or call.get("type", "function") != "function" or not isinstance(function, dict):
            raise BadField(f"{at} must be {{\"id\", \"type\": \"function\", \"function\": {{\"name\", "
                           "\"arguments\"}}}}", at)
        ident, name, arguments = call.get("id"), function.get("name"), function.get("arguments", "{}")
        if not isinstance(ident, str) or not ident:
            raise BadField(f"{at}.id must be the call's id (a string)", f"{at}.id")
        if not isinstance(name, str) or not name:
            raise BadField(f"{at}.function.name must be the tool's name", f"{at}.function.name")
        if isinstance(arguments, str):
            try:
                arguments = loads(arguments, f"{at}.function.arguments") if arguments.strip() else {}
            except UnsafeJson as exc:
                inner = f" (at {exc.param})" if exc.param else ""
                raise BadField(f"{exc}{inner}", f"{at}.function.arguments") from None
        if not isinstance(arguments, dict):
            raise BadField(f"{at}.function.arguments must be a JSON object (as a string)", f"{at}.function.arguments")
        out.append((ident, name, arguments))
    return out


@dataclass(frozen=True)
class ClientTools:
    """The functions a client offered for one request (it runs them; Wren only writes the
    calls) and its tool_choice: "auto", "none", "required", or `forced` (a named function)."""

    specs: tuple[ToolSpec, ...]
    choice: str
    forced: str | None = None

    @property
    def offered(self) -> bool:
        return bool(self.specs) and self.choice != "none"


class ClientSource:
    """The plan's source for client-defined functions. Wren never runs them: the calls go
    back to the client."""

    name = "client"

    def __init__(self, specs: tuple[ToolSpec, ...]):
        self._specs = specs

    def specs(self) -> list[ToolSpec]:
        return list(self._specs)

    async def call(self, name: str, arguments: dict, cancel: asyncio.Event) -> tuple[str, bool]:
        return f"{name} is the client's function; Wren does not run it", True


def check_tools(tools: Any, tool_choice: Any) -> ClientTools | None:
    """OpenAI's `tools` and `tool_choice`, checked (BadField names the wrong field); None
    when there are no tools and the choice allows that."""
    if tools in (None, []):
        if tool_choice not in (None, "none", "auto"):
            raise BadField("tool_choice needs tools: the request offers no functions", "tool_choice")
        return None
    if not isinstance(tools, list):
        raise BadField("tools must be a list of {\"type\": \"function\", \"function\": {...}}", "tools")
    specs: list[ToolSpec] = []
    for i, tool in enumerate(tools):
        specs.append(_function_spec(tool, f"tools[{i}]", specs))
    choice, forced = _tool_choice(tool_choice, specs)
    return ClientTools(tuple(specs), choice, forced)


def _function_spec(tool: Any, at: str, earlier: list[ToolSpec]) -> ToolSpec:
    """One of the request's `tools`, checked: a function with a new name, a description and
    a JSON schema the arguments can be held to."""
    if not isinstance(tool, dict):
        raise BadField(f"{at} must be an object", at)
    if tool.get("type") != "function":
        raise BadField(f"{at}.type must be \"function\", got {tool.get('type')!r}", f"{at}.type")
    function = tool.get("function")
    if not isinstance(function, dict):
        raise BadField(f"{at}.function must be an object with name, description and parameters", f"{at}.function")
    name = function.get("name")
    if not isinstance(name, str) or not TOOL_NAME.match(name):
        raise BadField(f"{at}.function.name must be 1 to 64 letters, digits, _ or -, got {name!r}",
                       f"{at}.function.name")
    if any(s.name == name for s in earlier):
        raise BadField(f"{at}.function.name {name!r} is given twice", f"{at}.function.name")
    description = function.get("description", "")
    if description is None:
        description = ""
    if not isinstance(description, str):
        raise BadField(f"{at}.function.description must be a string", f"{at}.function.description")
    parameters = function.get("parameters")
    if parameters is None:
        parameters = {"type": "object", "properties": {}}
    if not isinstance(parameters, dict):
        raise BadField(f"{at}.function.parameters must be a JSON schema object", f"{at}.function.parameters")
    try:  # the schema must be one the arguments can be held to
        Constraint.tool_call(name, parameters)
    except ConstraintError as exc:
        raise BadField(f"{at}.function.parameters: {exc}", f"{at}.function.parameters") from None
    return ToolSpec(name, description, parameters)


def _tool_choice(tool_choice: Any, specs: list[ToolSpec]) -> tuple[str, str | None]:
    """OpenAI's `tool_choice`, checked: (auto, none, required or "function"; the forced name)."""
    if tool_choice is None:
        return "auto", None
    if isinstance(tool_choice, str):
        if tool_choice not in CHOICES:
            raise BadField(f"tool_choice must be one of {', '.join(CHOICES)} or "
                           f"{{\"type\": \"function\", \"function\": {{\"name\": …}}}}, got {tool_choice!r}",
                           "tool_choice")
        return tool_choice, None
    function = tool_choice.get("function") if isinstance(tool_choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(tool_choice, dict) or tool_choice.get("type") != "function" or not isinstance(name, str):
        raise BadField("tool_choice must be \"auto\", \"none\", \"required\" or "
                       "{\"type\": \"function\", \"function\": {\"name\": …}}", "tool_choice")
    if not any(s.name == name for s in specs):
        raise BadField(f"tool_choice names {name!r}, which is not among the request's tools "
                       f"({', '.join(s.name for s in specs)})", "tool_choice.function.name")
    return "function", name


@dataclass
class _Prepared:
    ids: list[int]
    plan: ToolPlan | None = None
    offered: ClientTools | None = None  # the tools the model may call in this answer
    constraint: Constraint | None = None
    # the chat as the model reads it (instructions, calls and results rendered), for a model
    # that takes messages rather than ids (a remote provider's)
    messages: list[dict] | None = None


def _model_type(worker: Any) -> str | None:
    """config.json's model_type: the call format where the template does not say."""
    try:
        config = json.loads((Path(worker.model_dir) / "config.json").read_text("utf-8"))
    except (OSError, ValueError, TypeError, AttributeError):
        return None
    found = config.get("model_type") if isinstance(config, dict) else None
    return found if isinstance(found, str) else None


def _prepare(worker: Any, messages: list[dict], tools: ClientTools | None, thinking: str | None = None) -> _Prepared:
    """The prompt ids for `messages`, with the offered tools, earlier calls and results
    rendered as the engine's own tool loop renders them (engine.tools.prompt), the thinking
    choice given to a template that takes it; on an executor thread."""
    tokenizer = worker.tokenizer.with_template_vars(**template_vars(thinking, worker.tokenizer.chat_template))
    history = any(m.get("tool_calls") or m["role"] == "tool" for m in messages)
    offered = tools if tools is not None and tools.offered else None
    if offered is None and not history:
        return _Prepared(tokenizer.encode_chat(messages))
    entries: list = []
    if offered is not None:
        source = ClientSource(offered.specs)
        entries = [(spec, source) for spec in offered.specs]
    plan = plan_for(tokenizer, entries, forced=offered.forced if offered else None, model_type=_model_type(worker))
    chat = []
    for m in messages:
        if m.get("tool_calls"):
            chat.append(plan.call_message(m["content"], m["tool_calls"]))
        elif m["role"] == "tool":
            chat.append(plan.result_message(m["tool_call_id"], m["name"], m["content"]))
        else:
            chat.append({"role": m["role"], "content": m["content"]})
    if offered is None:
        return _Prepared(tokenizer.encode_chat(chat), plan, messages=chat)
    ids = plan.encode(tokenizer, plan.instructed(chat), opened=True)  # a forced call's opening after it
    try:
        if plan.forced:
            constraint: Constraint | None = plan.forced_constraint()
        else:
            constraint = plan.calls_constraint(lazy=offered.choice != "required")
    except ConstraintError as exc:  # this family's grammar cannot take it: the calls are still parsed
        log_event("server.tools_unconstrained", reason=str(exc))
        constraint = None
    return _Prepared(ids, plan, offered, constraint, messages=plan.instructed(chat))


def _loaded(engine: Engine) -> ModelStatus:
    status = engine.models.current
    if status is None:
        raise ModelNotLoaded("the model was unloaded while this request was being prepared")
    return status


class Serving:
    """A server's stateless requests (nothing stored), over the engine's public surface."""

    def __init__(self, engine: Engine):
        self.engine = engine

    async def serving_model(self, name: str | None = None) -> ModelStatus:
        """The loaded model for a request naming `name` (None: whatever is loaded, else the
        default). Another installed model, or a remote provider's ("provider/model"), is
        loaded only while nothing streams; otherwise ModelBusy. An unknown name raises
        ModelNotFound."""
        e = self.engine
        status = e.models.current
        if name is None or (status is not None and status.name == name):
            await e.models.ensure_loaded()
            return _loaded(e)
        remotes = await e.providers.models()
        remote = any(m.name == name for m in remotes)
        if not remote:
            provider, _, model = name.partition("/")
            theirs = [m.model for m in remotes if m.provider == provider]
            if model and theirs:  # a provider's name with a model it does not list
                raise ModelNotFound(f"the provider {provider} lists no model {model!r} (it lists "
                                    f"{', '.join(theirs)}); `wren providers add` with --model adds one")
            info = await asyncio.get_running_loop().run_in_executor(None, e.registry.get, name)
            name = info.name
        if e.answering():
            loaded = status.name if status else "another model"
            raise ModelBusy(f"“{loaded}” is answering other requests; “{name}” can be loaded "
                            "when they finish")
        return await e.models.load(name)

    async def stateless_chat(self, messages: list[dict], params: SamplingParams, *,
                             response_format: dict | None = None, tools: list | None = None,
                             tool_choice: Any = None, parallel_tool_calls: bool = True,
                             thinking: str | None = None) -> AsyncGenerator[Event, None]:
        """Answer `messages` (as given, through the model's chat template) without storing
        anything: SafetyNotice, Delta, ToolCall, Usage, Failed and Finished events.
        `response_format` (OpenAI's: json_object or json_schema) constrains the answer to
        valid JSON. `tools` (OpenAI function definitions) and `tool_choice` offer the
        client's functions: they are rendered as the engine's tool loop renders its own, a
        call the model writes comes out as a ToolCall (never run here: the client runs it)
        and ends the answer; `parallel_tool_calls` False keeps only the first call. Bad
        input raises InvalidRequest (BadField naming the field) before anything runs.
        A thinking model's thinking comes as Reasoning events (never in the answer's text);
        `thinking` (records.THINKING_CHOICES) reaches a template that takes it."""
        messages = check_messages(messages)
        client = check_tools(tools, tool_choice)
        if client is not None and client.offered and response_format not in (None, {"type": "text"}):
            raise BadField("response_format cannot be combined with tools (one constraint per answer); "
                           "send tool_choice \"none\" or leave response_format out", "response_format")
        constraint = Constraint.from_response_format(response_format)
        notices, messages = await self._scan_messages(messages)
        for notice in notices:
            yield notice
        if notices and any(n.action.value == "block" for n in notices):
            yield Finished(FinishReason.BLOCKED)
            return
        worker: ModelWorker = await self.engine.models.ensure_loaded()
        uses_tools = (client is not None and client.offered) or any(
            m.get("tool_calls") or m["role"] == "tool" for m in messages)
        loop = asyncio.get_running_loop()
        prepared = await loop.run_in_executor(None, _prepare, worker, messages, client, thinking)
        if prepared.offered is not None:
            constraint = prepared.constraint
        if uses_tools and worker.model is not None and worker.model.takes_messages:
            # A remote provider's model reads the tools as the engine's own loop gives them to
            # it: instructions and earlier calls in the chat's text, its calls parsed from the
            # answer's text. Its server samples, so no constraint can hold it to a schema.
            messages, constraint = prepared.messages or messages, None
        async for event in self._generate(worker, prepared.ids, params, messages=messages, constraint=constraint,
                                          plan=prepared.plan if prepared.offered else None,
                                          single_call=not parallel_tool_calls, split=True):
            yield event

    async def stateless_completion(self, prompt: str, params: SamplingParams) -> AsyncGenerator[Event, None]:
        """Continue raw `prompt` text (no chat template), storing nothing."""
        if not isinstance(prompt, str) or not prompt:
            raise InvalidRequest("prompt must be a non-empty string")
        notices, checked = await self._scan_messages([{"role": "user", "content": prompt}])
        for notice in notices:
            yield notice
        if notices and any(n.action.value == "block" for n in notices):
            yield Finished(FinishReason.BLOCKED)
            return
        worker: ModelWorker = await self.engine.models.ensure_loaded()
        loop = asyncio.get_running_loop()
        ids = await loop.run_in_executor(None, worker.tokenizer.encode, checked[0]["content"])
        async for event in self._generate(worker, ids, params):
            yield event

    async def _scan_messages(self, messages: list[dict]) -> tuple[list[SafetyNotice], list[dict]]:
        """Every message through the input policy, as `engine.chat.send` scans a question; the
        string values in an assistant message's tool-call arguments too (the client wrote
        them, and they reach the model, or a remote provider, like any other text)."""
        e = self.engine
        policy, destination = e.policy, e.destination()
        notices: list[SafetyNotice] = []

        def check(text: str) -> str:
            result = scan(text, policy, destination)
            notices.extend(result.notices("input"))
            return result.redacted_text

        def checked(msg: dict) -> dict:
            item = {**msg, "content": check(msg["content"])}
            if msg.get("tool_calls"):
                item["tool_calls"] = [(ident, name, _scan_values(arguments, check))
                                      for ident, name, arguments in msg["tool_calls"]]
            return item

        out = await asyncio.get_running_loop().run_in_executor(None, lambda: [checked(m) for m in messages])
        return notices, out

    async def _generate(self, worker: ModelWorker, ids: list[int], params: SamplingParams, *,
                        messages: list[dict] | None = None, constraint: Constraint | None = None,
                        plan: ToolPlan | None = None, single_call: bool = False,
                        split: bool = False) -> AsyncGenerator[Event, None]:
        e = self.engine
        window = _loaded(e).context_length
        room = window - len(ids)
        if room < 1:
            raise PromptTooLong(f"the prompt is {len(ids):,} tokens; the model's context window holds {window:,}, "
                                "with room for at least one answer token", tokens=len(ids), limit=window)
        params = params.with_(max_tokens=max(1, min(params.max_tokens, room)))
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()
        sink = loop_sink(events, loop)  # called on the inference thread
        # `messages` is what a model that takes messages (a remote provider's) is sent instead.
        request = GenerationRequest(ids, params, sink, messages=messages, constraint=constraint)
        entry = (request, STATELESS_OWNER)
        e.answer_started(*entry)
        # With the client's tools offered, the answer's text goes through the call parser:
        # a call's text never shows, the calls come out as ToolCall events
        # (engine/turn/text.py, as a stored answer's rounds).
        parser = CallParser(plan.family) if plan is not None else None
        if plan is not None and parser is not None and plan.forced:
            parser.feed(plan.forced_prefix())
        # each shown Delta carries its tokens' probabilities
        # `split`: a chat's thinking comes apart as Reasoning (a raw completion is left as written)
        text = AnswerText(OutputGuard(e.policy, e.destination()), AnswerLogprobs(params, {}), parser,
                          split=splitter(worker, ids) if split else None, count=token_counter(worker),
                          thinking_guard=lambda: OutputGuard(e.policy, e.destination()))
        worker.submit(request)
        try:
            async for event in generation(events, text, request):
                if isinstance(event, (Delta, Reasoning, SafetyNotice, Usage, Failed)):
                    yield event
        finally:
            request.cancel.set()  # a consumer that walks away (client disconnect) stops the sequence
            e.answer_ended(*entry)
        reason, calls = (FinishReason.BLOCKED if text.blocked else text.reason), text.calls
        if reason is not FinishReason.BLOCKED and calls:
            async for event in self._calls_out(calls[:1] if single_call else calls, reason):
                if isinstance(event, Finished):
                    reason = event.reason
                else:
                    yield event
        yield Finished(reason)

    async def _calls_out(self, calls: list[ParsedCall], reason: FinishReason) -> AsyncGenerator[Event, None]:
        """The parsed calls as ToolCall events, their arguments through the output policy;
        a call the model could not finish (out of tokens) is dropped, one it wrote badly is
        an error."""
        e = self.engine
        ended = reason
        for parsed in calls:
            if parsed.error is not None:
                if reason is FinishReason.LENGTH:
                    break  # max_tokens ran out inside the call: the answer ends at its length
                yield Failed(f"the model wrote a tool call that could not be read: {parsed.error}", FailureKind.MODEL)
                yield Finished(FinishReason.ERROR)
                return
            notices: list[SafetyNotice] = []

            def walk(value: Any, notices: list = notices) -> Any:  # every string the call carries, through the output policy
                if isinstance(value, str):
                    found = scan(value, e.policy, e.destination())
                    notices.extend(found.notices("output"))
                    return found.redacted_text
                if isinstance(value, dict):
                    return {walk(k): walk(v) for k, v in value.items()}
                if isinstance(value, list):
                    return [walk(v) for v in value]
                return value

            arguments = await asyncio.get_running_loop().run_in_executor(None, walk, parsed.arguments)
            for notice in notices:
                yield notice
            if any(n.action.value == "block" for n in notices):
                yield Finished(FinishReason.BLOCKED)
                return
            yield ToolCall("call_" + secrets.token_hex(12), parsed.name, arguments)
            ended = FinishReason.STOP
        yield Finished(ended)
