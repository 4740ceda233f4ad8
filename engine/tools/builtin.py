"""Wren's built-in tools, all local: a calculator, the current date and time, reading a
file the user attached, and searching the user's own conversations and memories.

The file and search tools need to know whose call this is; the turn that runs a call sets
`CALL_CONTEXT` (a context variable, so each call's task sees its own)."""

from __future__ import annotations

import asyncio
import contextvars
import datetime as dt
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .calculator import MAX_CHARS as CALC_MAX_CHARS
from .calculator import CalcError, evaluate, format_value
from .files import ToolFailed, read_text_file
from .registry import BUILTIN, ToolSpec

if TYPE_CHECKING:
    from ..core import Core

READ_CHARS = 24_000  # one read returns at most this much; `offset` reads on


@dataclass(frozen=True)
class CallContext:
    """Who is calling: the conversation and the files its user attached."""

    conversation_id: int | None = None
    attachments: tuple[Path, ...] = ()
    result_tokens: int = 0  # the answer's budget for one result (0: none); a read stays within it


CALL_CONTEXT: contextvars.ContextVar[CallContext] = contextvars.ContextVar("wren_tool_call", default=CallContext())  # noqa: B039 (frozen)


CALC_PATTERN = r"^[0-9A-Za-z_.,+*/%^()×÷− \t-]*$"  # numbers, names, operators, parentheses, spaces


CALCULATOR = ToolSpec(
    "calculator",
    "Evaluate an arithmetic expression exactly, e.g. \"(17.5 * 3) / 4\" or \"sqrt(2) ** 10\". "
    "Supports + - * / // % ** (or ^), parentheses, sqrt, log, ln, exp, sin, cos, tan, abs, round, "
    "floor, ceil, min, max, factorial, and the constants pi and e.",
    {
        "type": "object",
        # The pattern keeps a constrained call to what an expression can hold: a small model
        # that runs on into `}}</tool_call> ...` inside the string must close it instead.
        "properties": {"expression": {"type": "string", "maxLength": CALC_MAX_CHARS,
                                      "pattern": CALC_PATTERN,
                                      "description": "the arithmetic expression"}},
        "required": ["expression"],
        "additionalProperties": False,
    },
)
DATETIME = ToolSpec(
    "current_datetime",
    "The current date, time and weekday, in the user's time zone or a named one.",
    {
        "type": "object",
        "properties": {
            "timezone": {"type": "string", "description": "an IANA time zone such as Europe/Paris (default: the user's)"},
        },
        "additionalProperties": False,
    },
)
READ_FILE = ToolSpec(
    "read_attachment",
    "Read the text of a file the user attached to this conversation (text, Markdown, code, CSV or PDF). "
    f"Returns at most {READ_CHARS:,} characters per call; pass offset to read further.",
    {
        "type": "object",
        "properties": {
            "file": {"type": "string", "description": "the attached file's name"},
            "offset": {"type": "integer", "minimum": 0, "description": "the character to start at (default 0)"},
        },
        "required": ["file"],
        "additionalProperties": False,
    },
)
SEARCH = ToolSpec(
    "search_history",
    "Search the user's own past conversations and saved memories for a word or phrase.",
    {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "words to look for"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 20, "description": "most results (default 5)"},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
)


class BuiltinTools:
    """The `builtin` tool source."""

    name = BUILTIN

    def __init__(self, engine: Core) -> None:
        self._engine = engine
        self._run: dict[str, Callable[[dict], Awaitable[str]]] = {
            CALCULATOR.name: self._calculator,
            DATETIME.name: self._datetime,
            READ_FILE.name: self._read_file,
            SEARCH.name: self._search,
        }

    def specs(self) -> list[ToolSpec]:
        return [CALCULATOR, DATETIME, READ_FILE, SEARCH]

    async def call(self, name: str, arguments: dict, cancel: asyncio.Event) -> tuple[str, bool]:
        run = self._run.get(name)
        if run is None:
            return f"the built-in tools have no tool named {name!r}", True
        try:
            return await run(arguments), False
        except ToolFailed as exc:
            return str(exc), True

    # -- the tools -------------------------------------------------------------------

    async def _calculator(self, arguments: dict) -> str:
        expression = arguments.get("expression", "")
        try:
            return format_value(evaluate(expression))
        except CalcError as exc:
            raise ToolFailed(f"the calculator could not evaluate {expression!r}: {exc}") from None

    async def _datetime(self, arguments: dict) -> str:
        zone_name = arguments.get("timezone")
        if zone_name:
            try:
                zone: dt.tzinfo = ZoneInfo(zone_name)
            except (ZoneInfoNotFoundError, ValueError):
                raise ToolFailed(f"{zone_name!r} is not a known time zone; use an IANA name such as Europe/Paris") from None
            now = dt.datetime.now(zone)
        else:
            now = dt.datetime.now().astimezone()
        return json.dumps({
            "iso": now.isoformat(timespec="seconds"),
            "date": now.strftime("%Y-%m-%d"),
            "time": now.strftime("%H:%M:%S"),
            "weekday": now.strftime("%A"),
            "timezone": zone_name or now.tzname() or "local",
            "utc_offset": now.strftime("%z"),
        })

    async def _read_file(self, arguments: dict) -> str:
        context = CALL_CONTEXT.get()
        wanted = str(arguments.get("file", "")).strip()
        offset = int(arguments.get("offset", 0) or 0)
        path = _attached(context.attachments, wanted)
        text = await asyncio.get_running_loop().run_in_executor(None, read_text_file, path)
        if offset >= len(text) and text:
            raise ToolFailed(f"{path.name} has {len(text):,} characters; offset {offset:,} is past its end")
        size = READ_CHARS if not context.result_tokens else max(500, min(READ_CHARS, context.result_tokens * 2))
        chunk = text[offset:offset + size]
        end = offset + len(chunk)
        if end < len(text):
            chunk += f"\n[… {path.name} goes on: characters {end:,} to {len(text):,} remain; read again with offset={end}]"
        return chunk

    async def _search(self, arguments: dict) -> str:
        query = str(arguments.get("query", "")).strip()
        if not query:
            raise ToolFailed("the search query is empty")
        limit = int(arguments.get("limit", 5) or 5)
        e = self._engine
        current = CALL_CONTEXT.get().conversation_id
        return await e.db(_search_history, e, query, limit, current)


def _attached(attachments: tuple[Path, ...], wanted: str) -> Path:
    if not attachments:
        raise ToolFailed("no file is attached to this conversation; ask the user to attach it")
    names = ", ".join(p.name for p in attachments)
    if not wanted:
        raise ToolFailed(f"say which file to read; attached: {names}")
    for path in attachments:
        if wanted in (str(path), path.name) or Path(wanted).name == path.name:
            return path
    raise ToolFailed(f"{wanted!r} is not an attached file; attached: {names}")


def _search_history(engine: Core, query: str, limit: int, current: int | None) -> str:
    """Runs on the database thread."""
    out: dict[str, Any] = {"memories": [], "conversations": []}
    for memory in engine.memory.search(query, limit):
        out["memories"].append({"id": memory.id, "text": memory.text})
    words = [w.lower() for w in query.split() if w.strip()]
    store = engine.store
    for conv in store.list_conversations(query, limit=limit + 1):
        if conv.id == current:
            continue
        hits = []
        for message in store.messages(conv.id):
            low = message.content.lower()
            at = next((low.find(w) for w in words if w in low), -1)
            if at >= 0:
                start = max(0, at - 120)
                snippet = message.content[start:at + 200].replace("\n", " ")
                hits.append({"role": message.role.value, "text": ("…" if start else "") + snippet})
            if len(hits) >= 3:
                break
        out["conversations"].append({"id": conv.id, "title": conv.title or "(untitled)", "matches": hits})
        if len(out["conversations"]) >= limit:
            break
    if not out["memories"] and not out["conversations"]:
        return f"nothing in the user's conversations or memories matches {query!r}"
    return json.dumps(out, ensure_ascii=False)
