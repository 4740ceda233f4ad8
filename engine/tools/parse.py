"""Find tool calls in a model's streamed answer, in the format its family was trained on:

- "hermes" (Qwen 2.5/3, Hermes, SmolLM3, and Wren's own format for templates without
  tools): `<tool_call>{"name": …, "arguments": {…}}</tool_call>`, anywhere in the answer;
- "llama3": a JSON object `{"name": …, "parameters": {…}}` as the whole answer, or after
  `<|python_tag|>`; several separated by `;`;
- "mistral": `[TOOL_CALLS][{"name": …, "arguments": {…}}, …]` (or `[TOOL_CALLS]name[ARGS]{…}`);
  the marker is a control token most tokenizers hide, so an answer that starts with
  `[{"name"` counts too.
- "granite": `<|tool_call|>[{"name": …, "arguments": {…}}, …]`, a JSON list after the tag;
- "phi4": `<|tool_call|>{"name": …, "arguments": {…}}<|/tool_call|>`, each call in its tags.

The parser is fed the answer's deltas as they arrive and returns the text that is safe to
show plus the calls it completed. Text that may still turn out to be the start of a call
is held back, so a call's text never reaches the user. Once a call is complete, anything
but another call ends the round (`done`): what a model writes after its call, before it
has the result, is not an answer.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ..inference.families import DEFAULT_TOOL_FORMAT, TOOL_FORMATS, tool_format_for

_WRITTEN_NAME = re.compile(r'\s*\[?\s*\{\s*"name"\s*:\s*"([A-Za-z0-9_.:-]{1,128})"')

MAX_CALL_CHARS = 100_000  # a call longer than this is refused, not parsed


@dataclass(frozen=True)
class ParsedCall:
    name: str
    arguments: Any  # a dict when the call parsed; {} with `error` when it did not
    error: str | None = None  # why the call could not be read
    raw: str = ""


Piece = str | ParsedCall


def family_for(chat_template: str | None, model_type: str | None = None) -> str:
    """The call format a model writes, read from its chat template (then its config's
    model_type, as its family in engine.inference.families declares); "hermes" when
    neither says."""
    t = chat_template or ""
    if "<tool_call>" in t:
        return "hermes"
    if "[TOOL_CALLS]" in t or "[AVAILABLE_TOOLS]" in t:
        return "mistral"
    if "<|python_tag|>" in t or "<|eom_id|>" in t or ("ipython" in t and "<|start_header_id|>" in t):
        return "llama3"
    declared = tool_format_for(model_type, t)
    return (declared or DEFAULT_TOOL_FORMAT).name


def json_end(text: str, start: int) -> int | None:
    """The index just past the JSON object or array that opens at `start`, or None while
    it is not closed yet. Strings and their escapes are skipped."""
    depth = 0
    in_string = False
    escaped = False
    for i in range(start, len(text)):
        c = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


def call_from(obj: Any, raw: str) -> ParsedCall:
    """A call from the JSON a model wrote, in any of the shapes the families use."""
    if not isinstance(obj, dict):
        return ParsedCall("", {}, f"a tool call must be a JSON object with a name, not {type(obj).__name__}", raw)
    if isinstance(obj.get("function"), dict):  # {"type": "function", "function": {...}}
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return ParsedCall("", {}, "the tool call has no \"name\"", raw)
    arguments = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError as exc:
            return ParsedCall(name.strip(), {}, f"the arguments are not valid JSON: {exc}", raw)
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return ParsedCall(name.strip(), {}, f"the arguments must be a JSON object, not {type(arguments).__name__}", raw)
    return ParsedCall(name.strip(), arguments, None, raw)


class _Scan:
    """Where a hermes call's text stands, kept between deltas: inside a string or not, the
    bracket depth, where its JSON ended and where the closing tag is (-1: not yet)."""

    MARK = "</tool_call>"

    def __init__(self) -> None:
        self.pos = 0
        self.in_string = self.escaped = self.opened = False
        self.depth = 0
        self.end: int | None = None
        self.closer = -1

    def run(self, text: str) -> None:
        i = self.pos
        while i < len(text) and self.closer < 0:
            c = text[i]
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif c == "\\":
                    self.escaped = True
                elif c == '"':
                    self.in_string = False
            elif c == '"':
                self.in_string = True
            elif c == "<":
                if text.startswith(self.MARK, i):
                    self.closer = i
                    break
                if self.MARK.startswith(text[i:]):
                    break  # maybe the tag, cut by the delta: look again with more text
            elif c in "{[":
                self.depth += 1
                self.opened = True
            elif c in "}]":
                self.depth -= 1
                if self.depth == 0 and self.opened and self.end is None:
                    self.end = i + 1
            i += 1
        self.pos = i


def _loads(body: str) -> tuple[Any, str | None]:
    try:
        return json.loads(body), None
    except ValueError as exc:
        return None, f"the tool call is not valid JSON ({exc})"


def _held_prefix(text: str, marker: str) -> int:
    """The length of the longest end of `text` that `marker` starts with."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


class CallParser:
    """Feed the deltas of one generation; show the text pieces; run the calls."""

    def __init__(self, family: str = "hermes") -> None:
        if family not in TOOL_FORMATS:
            raise ValueError(f"unknown tool-call family {family!r}; known: {', '.join(TOOL_FORMATS)}")
        self.family = family
        self.marker = TOOL_FORMATS[family].marker
        # the tag that closes one call (phi4's <|/tool_call|>); hermes' is read by its scan
        self.closer = "" if family == "hermes" else TOOL_FORMATS[family].after.strip()
        self._buf = ""
        self._state = "text"  # text | start | call | after | done
        self._scan = _Scan()
        self._at_start = TOOL_FORMATS[family].bare  # llama3/mistral calls may be the bare answer
        self.calls = 0
        self.done = False  # a call is complete and the model went on with other text

    def feed(self, text: str) -> list[Piece]:
        if self.done:
            return []
        self._buf += text
        return self._run(final=False)

    def finish(self) -> list[Piece]:
        """What is left when the generation ended."""
        if self.done:
            return []
        return self._run(final=True)

    # -- the state machine -------------------------------------------------------------

    def _run(self, final: bool) -> list[Piece]:
        out: list[Piece] = []
        while True:
            step = getattr(self, f"_{self._state}")(out, final)
            if not step:
                break
        if final and self._buf and self._state in ("text", "start"):
            out.append(self._buf)
            self._buf = ""
        return [p for p in out if not (isinstance(p, str) and not p)]

    def _text(self, out: list[Piece], final: bool) -> bool:
        if self._at_start:
            stripped = self._buf.lstrip()
            if not stripped:
                return False  # only whitespace so far: it may still precede a call
            opener = "{" if self.family == "llama3" else "["
            if stripped[0] == opener:
                self._state = "start"
                return True
            if not (self.marker.startswith(stripped) or stripped.startswith(self.marker)):
                self._at_start = False
        i = self._buf.find(self.marker)
        if i >= 0:
            out.append(self._buf[:i])
            self._buf = self._buf[i + len(self.marker):]
            self._state = "call"
            self._scan = _Scan()
            self._at_start = False
            return True
        keep = 0 if final else _held_prefix(self._buf, self.marker)
        out.append(self._buf[:len(self._buf) - keep])
        self._buf = self._buf[len(self._buf) - keep:]
        return False

    def _start(self, out: list[Piece], final: bool) -> bool:
        """A llama3/mistral answer that opens with JSON: a call, or text that looks like one."""
        lead = len(self._buf) - len(self._buf.lstrip())
        body = self._buf[lead:]
        if self.family == "mistral":
            rest = body[1:].lstrip()
            if rest and rest[0] != "{":
                return self._release()  # "[a link](…)" and the like: plain text
        else:
            rest = body[1:].lstrip()
            if rest and rest[0] != '"':
                return self._release()
        end = json_end(body, 0)
        if end is None:
            if len(body) > MAX_CALL_CHARS or final:
                return self._release()
            return False
        obj, error = _loads(body[:end])
        calls = self._calls_in(obj, body[:end]) if error is None else None
        if not calls:
            return self._release()
        out.extend(calls)
        self._buf = body[end:]
        self._state = "after"
        self._at_start = False
        return True

    def _release(self) -> bool:
        self._state = "text"
        self._at_start = False
        return True

    def _calls_in(self, obj: Any, raw: str) -> list[ParsedCall] | None:
        """The calls in a JSON value written at the start of an answer (None: not calls)."""
        items = obj if isinstance(obj, list) else [obj]
        if not items or not all(isinstance(o, dict) and ("name" in o or "function" in o) for o in items):
            return None
        if self.family == "llama3" and not isinstance(obj, dict):
            return None
        if self.family == "llama3" and not ({"parameters", "arguments"} & set(obj)):
            return None
        self.calls += len(items)
        return [call_from(o, raw) for o in items]

    def _call(self, out: list[Piece], final: bool) -> bool:
        if self.family == "hermes":
            # The closing tag counts only outside the JSON's strings (a string may hold
            # "</tool_call>"); the scan goes on from where the last delta left it.
            scan = self._scan
            scan.run(self._buf)
            j = scan.closer
            if j < 0 and scan.end is not None and not final:
                tail = self._buf[scan.end:].lstrip()
                if tail and not "</tool_call>".startswith(tail[:len("</tool_call>")]):
                    # the JSON ended and other text follows: the call is complete without its tag
                    body, self._buf = self._buf[:scan.end], self._buf[scan.end:]
                    out.append(self._hermes_call(body, closed=True))
                    self._state = "after"
                    return True
            if j < 0:
                if final or len(self._buf) > MAX_CALL_CHARS:
                    body, self._buf = self._buf, ""
                    out.append(self._hermes_call(body, closed=False))
                    self._state = "done" if not final else "after"
                    self.done = not final
                return False
            body = self._buf[:j]
            self._buf = self._buf[j + len("</tool_call>"):]
            out.append(self._hermes_call(body, closed=True))
            self._state = "after"
            return True
        body = self._buf.lstrip()
        if not body:
            if final:
                out.append(self._error("the tool-call marker is not followed by a call", ""))
            return False
        if self.family == "mistral" and body[0] != "[":
            return self._mistral_named(out, body, final)
        if body[0] not in "{[":
            # llama3 built-in tools write python (`brave_search.call(query=…)`): not offered by Wren
            if final or len(body) > MAX_CALL_CHARS:
                out.append(self._error("the tool call is not JSON", body))
                self._buf = ""
                self._state = "after"
            return False
        end = json_end(body, 0)
        if end is None:
            if final or len(body) > MAX_CALL_CHARS:
                out.append(self._error("the tool call was cut off before its JSON ended", body))
                self._buf = ""
                self._state = "after"
            return False
        raw = body[:end]
        obj, error = _loads(raw)
        if error is not None:
            out.append(self._error(error, raw))
        else:
            for item in obj if isinstance(obj, list) else [obj]:
                self.calls += 1
                out.append(call_from(item, raw))
        self._buf = body[end:]
        self._state = "after"
        return True

    def _mistral_named(self, out: list[Piece], body: str, final: bool) -> bool:
        i = body.find("[ARGS]")
        if i < 0:
            if final or len(body) > MAX_CALL_CHARS:
                out.append(self._error("the tool call has no [ARGS]", body))
                self._buf, self._state = "", "after"
            return False
        name = body[:i].strip()
        rest = body[i + len("[ARGS]"):].lstrip()
        end = json_end(rest, 0) if rest[:1] == "{" else None
        if end is None:
            if final or (rest and rest[0] != "{") or len(rest) > MAX_CALL_CHARS:
                out.append(self._error("the tool call's arguments are not a JSON object", body))
                self._buf, self._state = "", "after"
            return False
        obj, error = _loads(rest[:end])
        self.calls += 1
        out.append(ParsedCall(name, {}, error, body) if error else call_from({"name": name, "arguments": obj}, body))
        self._buf = rest[end:]
        self._state = "after"
        return True

    def _hermes_call(self, body: str, closed: bool) -> ParsedCall:
        self.calls += 1
        text = body.strip()
        if not text:
            return self._error("the tool call is empty", body, count=False)
        start = text.find("{")
        end = json_end(text, start) if start >= 0 else None
        if end is None:
            if start < 0:
                return self._error("the tool call is not JSON", body, count=False)
            if closed:
                return self._error(_loads(text[start:])[1] or "the tool call is not valid JSON", body, count=False)
            return self._error("the tool call was cut off before its JSON ended", body, count=False)
        obj, error = _loads(text[start:end])
        if error is not None:
            return self._error(error, body, count=False)
        return call_from(obj, body)

    def _error(self, why: str, raw: str, count: bool = True) -> ParsedCall:
        if count:
            self.calls += 1
        # a call cut off or garbled after its name keeps the name (shown, stored), never runs
        written = _WRITTEN_NAME.match(raw)
        return ParsedCall(written.group(1) if written else "", {}, why, raw)

    def _after(self, out: list[Piece], final: bool) -> bool:
        """After a call: only another call may follow."""
        body = self._buf.lstrip()
        if self.family == "llama3" and body.startswith(";"):
            body = body[1:].lstrip()
        if self.closer and body.startswith(self.closer):
            body = body[len(self.closer):].lstrip()
        if not body:
            self._buf = ""
            return False
        if self.closer and self.closer.startswith(body) and not final:
            self._buf = body  # maybe the closing tag, cut by the delta
            return False
        if body.startswith(self.marker):
            self._buf = body[len(self.marker):]
            self._state = "call"
            self._scan = _Scan()
            return True
        if self.family != "hermes" and body[0] == ("{" if self.family == "llama3" else "["):
            self._buf = body
            self._state = "call"
            self._scan = _Scan()
            return True
        if self.marker.startswith(body) and not final:
            self._buf = body
            return False
        self._buf = ""
        self._state = "done"
        self.done = True
        return False

    def _done(self, out: list[Piece], final: bool) -> bool:
        self._buf = ""
        return False
