"""One `wren ask` question as a typed value, and how an engine answers it.

`wren ask` reads its command line into an AskRequest. Answered in the asking process, the
request goes straight to `answer`; sent to the resident engine or to Wren's window, it
crosses the socket as one JSON object (`to_wire`) and the engine side reads it back with
`from_wire`, which checks every field's type, refuses fields it does not know and says
which field was wrong. `answer` runs a request over the Engine's public surface alone: it
parses no command line and prints nothing, so the engine that hosts the terminal's
questions (resident_host.py) never runs the terminal's own code.
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, fields
from typing import Any

from ..errors import InvalidRequest
from ..records import ORIGIN_KEY, TERMINAL_ORIGIN

# false: `wren ask` and `wren chat` keep nothing (as --no-save)
SAVE_SETTING = "cli.save_questions"
# How long a question waits for a database another program holds locked before it is
# refused (the store's busy timeout alone is 3 s; an answer's last write waits 60 s).
QUESTION_LOCK_WAIT = 30.0

_OPTIONAL_TEXT = ("model", "backend", "tools", "thinking", "project")
_WHOLE = ("seed", "top_k", "max_tokens", "logprobs")
_REAL = ("temperature", "top_p", "keep_alive")
_SAMPLING = ("seed", "temperature", "top_p", "top_k", "max_tokens", "logprobs")


@dataclass(frozen=True)
class AskRequest:
    """What one `wren ask` asks. None leaves a choice to the engine's settings."""

    text: str  # the whole question: attached files, standard input and the words
    title: str = ""  # the new conversation's title
    model: str | None = None  # None: the default model
    backend: str | None = None  # None: the `backend` setting, else auto
    seed: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    max_tokens: int | None = None
    logprobs: int | None = None  # alternatives per token (0-20) in each delta
    tools: str | None = None  # as typed: "NAME,NAME", "all" or "none"; None: the chat's
    tool_choice: str = "auto"  # "auto", "none" or a tool's name
    response_format: dict | None = None  # OpenAI's response_format (a JSON schema)
    save: bool | None = None  # None: the cli.save_questions setting
    keep_alive: float | None = None  # seconds a resident engine stays after this; None: its setting
    thinking: str | None = None  # records.THINKING_CHOICES for a thinking model; None: its default
    documents: bool | None = None  # the document library on/off for this question; None: the settings
    project: str | None = None  # a project's documents and instructions (the chat joins it)
    expand_query: bool | None = None  # the model's other phrasings searched too; None: the setting

    def to_wire(self) -> dict[str, Any]:
        """The request as a JSON object (AskRequest.from_wire reads it back)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_wire(cls, data: Any) -> AskRequest:
        """The request in `data` (a decoded JSON object); InvalidRequest naming the field
        when one is missing, unknown or of the wrong type."""
        if not isinstance(data, dict):
            raise InvalidRequest(f"a question must be a JSON object, not {_kind(data)}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(str(k) for k in data if k not in known)
        if unknown:
            raise InvalidRequest(f"a question has no field {', '.join(map(repr, unknown))}")
        if "text" not in data:
            raise InvalidRequest("a question needs its 'text'")
        _check(data, "text", str, "text")
        _check(data, "title", str, "text")
        _check(data, "tool_choice", str, "text")
        for name in _OPTIONAL_TEXT:
            _check(data, name, (str, type(None)), "text or null")
        for name in _WHOLE:
            _check(data, name, (int, type(None)), "a whole number or null")
        for name in _REAL:
            _check(data, name, (int, float, type(None)), "a number or null")
            value = data.get(name)
            if isinstance(value, float) and not math.isfinite(value):
                raise InvalidRequest(f"a question's {name!r} must be a finite number, not {value}")
        _check(data, "response_format", (dict, type(None)), "an object or null")
        _check(data, "save", (bool, type(None)), "true, false or null")
        _check(data, "documents", (bool, type(None)), "true, false or null")
        _check(data, "expand_query", (bool, type(None)), "true, false or null")
        values = dict(data)
        for name in _REAL:
            if values.get(name) is not None:
                values[name] = float(values[name])
        return cls(**values)

    def sampling(self, base: Any) -> Any:
        """`base` (SamplingParams: the chat's or the defaults) with what the question sets."""
        changes = {name: getattr(self, name) for name in _SAMPLING if getattr(self, name) is not None}
        return base.with_(**changes)


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _check(data: dict, name: str, types: type | tuple[type, ...], wanted: str) -> None:
    if name not in data:
        return
    value = data[name]
    # JSON's true and false are Python's bools, and bool is an int: not a number here
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise InvalidRequest(f"a question's {name!r} must be {wanted}, not {value!r}")
    if not isinstance(value, types):
        raise InvalidRequest(f"a question's {name!r} must be {wanted}, not {_kind(value)}")


# -- answering: the Engine's public surface only ------------------------------------------

Load = Callable[[Any, AskRequest], Awaitable[None]]


async def load_asked_model(engine: Any, request: AskRequest) -> None:
    """The model the question names (else the default), on its backend (else the setting's)."""
    if request.model or request.backend:
        await engine.models.load(request.model, backend=request.backend)
    else:
        await engine.models.load()


def policy_notices(engine) -> list[str]:
    """The safety policy's warnings, as a terminal question says them before its answer: a
    policy file with a mistake leaves the user's own rules out (the shipped policy is in
    force), which `wren ask` and `wren chat` went on without a word."""
    return [f"safety policy: {warning}" for warning in engine.policy_warnings]


async def answer(engine: Any, request: AskRequest, load: Load = load_asked_model) -> AsyncIterator[Any]:
    """The question's answer as events: its checks, the model (`load`), the send. The
    checks come before the model loads; the chat is made only once the question is accepted
    (no empty chat is left)."""
    from ..records import SendOptions

    await engine.chat.check_question(request.text, request.model)  # empty, too long, too many tokens
    tool_options = await tool_fields(engine, request.tools, request.tool_choice)  # unknown names
    saving = await keeps(engine, request)
    if saving:
        await wait_writable(engine)
    await load(engine, request)
    params = request.sampling(await engine.settings.default_sampling())
    options = SendOptions(sampling=params, response_format=request.response_format, thinking=request.thinking,
                          documents=request.documents, project=request.project, expand_query=request.expand_query,
                          **tool_options)
    async for event in engine.chat.send_new(request.text, options, title=request.title,
                                            settings={ORIGIN_KEY: TERMINAL_ORIGIN}, temporary=not saving):
        yield event


async def keeps(engine: Any, request: AskRequest) -> bool:
    """Whether the question's conversation is kept: its own choice, else the setting."""
    if request.save is not None:
        return request.save
    return bool(await engine.settings.get(SAVE_SETTING, True))


async def wait_writable(engine: Any) -> None:
    """Wait (at most QUESTION_LOCK_WAIT s, in short steps a stop can cut) while another
    program holds the database locked, so a question is treated alike in the asking process
    and in a resident engine, whose model is loaded already; still locked, the first write
    says so."""
    deadline = time.monotonic() + QUESTION_LOCK_WAIT
    while not await engine.db(engine.store.writable, 0.25) and time.monotonic() < deadline:
        pass


async def tool_fields(engine: Any, tools: str | None, tool_choice: str | None) -> dict:
    """SendOptions' tool fields for `--tools` and `--tool-choice` as typed (a bad name
    fails before anything runs)."""
    found: dict = {}
    # An MCP server's tools are in the registry once it has listed them: start the servers
    # the question names (every enabled one for `--tools all`) before checking the names.
    value = (tools or "").strip()
    choice = (tool_choice or "auto").strip()
    wanted = [n.strip() for n in value.split(",") if n.strip() and value not in ("all", "none")]
    if choice not in ("auto", "none"):
        wanted.append(choice)
    if value == "all":
        await engine.tools.prepare_sources()
    elif wanted:
        await engine.tools.prepare_sources(wanted)
    known = [t.name for t in await engine.tools.list()]
    if tools is not None:
        found["tools"] = tuple(await _tool_names(engine, value, known))
    if choice not in ("auto", "none") and choice not in known:
        raise InvalidRequest(f"--tool-choice {choice} is not auto, none or a tool; the tools are: {', '.join(known)}")
    found["tool_choice"] = choice
    return found


async def _tool_names(engine: Any, value: str, known: list[str]) -> list[str]:
    if value == "all":
        return [t.name for t in await engine.tools.list() if t.enabled]
    if value in ("none", ""):
        return []
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise InvalidRequest(f"--tools names {', '.join(unknown)}, which {'is' if len(unknown) == 1 else 'are'} "
                             f"not a tool; the tools are: {', '.join(known)}")
    return names
