"""The tools Wren can offer a model: each a name, a description, a JSON schema for its
arguments and whether a call waits for the user's approval, grouped by the source that
runs it (the built-in tools, one MCP server each).

A source is any object with

    name: str                                   # "builtin", "mcp:SERVER"
    def specs(self) -> list[ToolSpec]           # what it offers now (cheap: no I/O)
    async def call(self, name, arguments, cancel: asyncio.Event) -> tuple[str, bool]

`call` returns (content, is_error); it should return soon after `cancel` is set (the
caller also cancels its task). Raising is fine: the caller turns it into an error result.
A source with many tools may also have `current_revision() -> int`, which changes whenever
its specs may have: look-ups by name then use an index instead of scanning its specs.
"""

from __future__ import annotations

import asyncio
import difflib
import functools
import json
import re
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..errors import InvalidRequest

NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,63}$")
BUILTIN = "builtin"


@dataclass(frozen=True)
class ToolSpec:
    """What a source says about one of its tools."""

    name: str
    description: str
    parameters: dict = field(default_factory=lambda: {"type": "object", "properties": {}})
    needs_approval: bool = False


@dataclass(frozen=True)
class ToolInfo:
    """A tool as front ends see it (engine.tools.list())."""

    name: str
    description: str
    parameters: dict
    needs_approval: bool
    source: str  # "builtin" or "mcp:SERVER"
    enabled: bool


@runtime_checkable
class ToolSource(Protocol):
    name: str

    def specs(self) -> list[ToolSpec]: ...

    async def call(self, name: str, arguments: dict, cancel: asyncio.Event) -> tuple[str, bool]: ...


def check_spec(spec: ToolSpec) -> None:
    if not isinstance(spec.name, str) or not NAME_RE.match(spec.name):
        raise InvalidRequest(
            f"{spec.name!r} is not a usable tool name: use letters, digits, _ . - (at most 64, not starting with a digit)"
        )
    if not isinstance(spec.parameters, dict) or spec.parameters.get("type", "object") != "object":
        raise InvalidRequest(f"tool {spec.name}: its parameters must be a JSON schema of type object")
    check_schema(spec.parameters, spec.name)


def check_schema(schema: dict, tool: str) -> None:
    problem = _schema_problem(json.dumps(schema, sort_keys=True, default=repr))
    if problem is not None:
        raise InvalidRequest(f"tool {tool}: its parameter schema is not valid JSON schema: {problem}")


@functools.lru_cache(maxsize=4096)
def _schema_problem(schema_text: str) -> str | None:
    """Checking against the meta-schema takes about a millisecond: a server's many tools
    often share a schema, which is then checked once."""
    import jsonschema

    schema = json.loads(schema_text)
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        return str(exc.message)
    return None


def validate_arguments(schema: dict, arguments: Any, tool: str) -> str | None:
    """None when `arguments` fits `schema`, else one clear sentence naming what is wrong."""
    import jsonschema

    if not isinstance(arguments, dict):
        return f"the arguments for {tool} must be a JSON object, not {type(arguments).__name__}"
    cls = jsonschema.validators.validator_for(schema)
    errors = sorted(cls(schema).iter_errors(arguments), key=lambda e: (len(e.path), list(map(str, e.path))))
    if not errors:
        return None
    first = errors[0]
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first.path) or "the arguments"
    where = where.lstrip(".")
    more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
    return f"invalid arguments for {tool}: {where}: {first.message}{more}"


class ToolRegistry:
    """Every source's tools by name. Names are unique across sources: a source whose tool
    name is taken already is refused when added (MCP servers prefix theirs)."""

    def __init__(self) -> None:
        self._sources: dict[str, ToolSource] = {}
        self._indexes: dict[str, tuple[ToolSource, Any, dict[str, ToolSpec]]] = {}

    def add_source(self, source: ToolSource) -> None:
        """Add (or replace, by its name) a source."""
        if not isinstance(source, ToolSource):
            raise InvalidRequest(f"{source!r} is not a tool source (needs name, specs() and async call())")
        taken = {s.name: src for src in self._sources.values() if src.name != source.name for s in src.specs()}
        for spec in source.specs():
            check_spec(spec)
            if spec.name in taken:
                raise InvalidRequest(
                    f"the tool name {spec.name!r} of {source.name} is used by {taken[spec.name].name} already"
                )
        self._sources[source.name] = source

    def remove_source(self, name: str) -> None:
        self._sources.pop(name, None)

    def sources(self) -> list[ToolSource]:
        return list(self._sources.values())

    def entries(self) -> list[tuple[ToolSpec, ToolSource]]:
        """Every tool with its source, the built-in ones first. A name that turns up twice
        (a source whose list changed after it was added) keeps its first owner."""
        seen: set[str] = set()
        out = []
        for source in sorted(self._sources.values(), key=lambda s: (s.name != BUILTIN, s.name)):
            for spec in source.specs():
                if spec.name not in seen:
                    seen.add(spec.name)
                    out.append((spec, source))
        return out

    def find(self, name: str) -> tuple[ToolSpec, ToolSource] | None:
        """The tool named `name` and its first owner, as entries() has it. A source with a
        current_revision() is looked up in an index kept until its revision changes: one
        look-up per name of a 5,000-tool server rebuilt every spec (minutes for `--tools all`)."""
        for source in sorted(self._sources.values(), key=lambda s: (s.name != BUILTIN, s.name)):
            spec = self._spec_in(source, name)
            if spec is not None:
                return spec, source
        return None

    def _spec_in(self, source: ToolSource, name: str) -> ToolSpec | None:
        revision = getattr(source, "current_revision", None)
        if revision is None:
            return next((s for s in source.specs() if s.name == name), None)
        key = revision()
        cached = self._indexes.get(source.name)
        if cached is None or cached[0] is not source or cached[1] != key:
            index: dict[str, ToolSpec] = {}
            for spec in source.specs():
                index.setdefault(spec.name, spec)
            cached = self._indexes[source.name] = (source, key, index)
        return cached[2].get(name)

    def names(self) -> list[str]:
        return [s.name for s, _ in self.entries()]


def no_tool_named(name: str, names: list[str], where: str = "") -> str:
    """The message for a tool name nobody offers (`where`: e.g. " in this chat"), with the
    names it most likely meant first: an MCP server's tool is offered as SERVER__NAME, so
    a bare NAME points at every server's tool of that name, then close spellings."""
    suffix = [n for n in names if n.endswith("__" + name)]
    close = [n for n in difflib.get_close_matches(name, names, n=3, cutoff=0.75) if n not in suffix]
    known = ", ".join(names) or "none"
    if not suffix and not close:
        return f"there is no tool named {name!r}{where}; the tools are: {known}"
    return f"there is no tool named {name!r}{where}; did you mean {' or '.join(map(repr, suffix + close))}? " \
           f"The tools are: {known}"
