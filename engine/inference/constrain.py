"""Constrained decoding: sampling restricted to tokens that keep the answer valid.

A `Constraint` describes what the answer must be, independent of any model: JSON for a
schema (`response_format`), one forced tool call in the model family's own wrapper, or free
text in which any tool call the model starts must be a valid call of an allowed tool (the
"auto" tool choice: lazy, nothing is restricted until the call's opening marker). It is an
immutable value the engine puts on a `GenerationRequest`; it checks its schemas when it is
built, so bad input fails before anything runs.

On the inference thread `Constraint.start(tokenizer)` gives a `ConstraintState` for one
answer: before each token `allowed(n)` says which of the `n` logits may be sampled, and
`advance(token)` moves it past the sampled token. Once the constrained text is complete only
an end-of-turn token is allowed, so the answer stops there.

The grammar engine is llguidance (chosen by measurement, bench/constrained.py
--compare-libraries): it computes a token mask in about 35 us per token on the starter's
49k vocabulary, needs no per-schema compilation (a JSON schema is ready in ~2 ms where
xgrammar compiles for ~20 ms and outlines-core indexes for ~300 ms), supports lazy triggers,
and needs neither torch nor a GPU, so the MLX path on a Mac uses it as the torch path does.

Tool calls are written in the model family's wrapper, the text a model of that family writes
for one call (engine.inference.families.formats: "hermes", "llama3", "mistral").
A marker that is one special token of the model's vocabulary is matched as that token.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import InvalidRequest
from .families import TOOL_FORMATS

# Tool names a constraint accepts: those of OpenAI's and MCP's conventions, plus "." and ":"
# for tools namespaced by their server.
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
# JSON written the way models were trained to write it: ", " and ": ", no free whitespace,
# so a small model cannot wander into endless newlines between tokens.
_JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
_MAX_SCHEMA_CHARS = 1 << 20
_LANES = np.arange(32, dtype=np.int64)  # bit i of a mask word: token 32 * word + i


class ConstraintError(InvalidRequest):
    """A schema, tool or response_format that cannot be enforced; says which and why."""


class ConstraintViolation(RuntimeError):
    """The grammar engine refused a token it had allowed, or reached an error state."""


@dataclass(frozen=True)
class Constraint:
    """What an answer must be. Build one with `json_schema`, `json_object`, `tool_call`,
    `tool_calls` or `from_response_format`; hand it to GenerationRequest(constraint=...)."""

    kind: str  # "json" | "tool_call" | "tool_calls"
    schema: str | None = None  # canonical JSON text of the answer's schema ("json")
    tools: tuple[tuple[str, str], ...] = ()  # (name, canonical JSON of its parameters schema)
    family: str = "hermes"
    lazy: bool = False  # free text until a call starts ("tool_calls" only)
    opened: bool = False  # the prompt already holds the call's opening ("tool_call" only)
    _lark: str = field(default="", repr=False, compare=False)

    # -- building ----------------------------------------------------------------------

    @classmethod
    def json_schema(cls, schema: Mapping[str, Any], *, strict: bool = False) -> Constraint:
        """The whole answer is one JSON value valid for `schema`. `strict` closes objects
        that list their properties (no additional properties unless the schema allows them)."""
        text = _schema_text(schema, "the response_format schema", strict)
        return cls._checked("json", schema=text)

    @classmethod
    def json_object(cls) -> Constraint:
        """The whole answer is one JSON object (OpenAI's response_format json_object)."""
        return cls._checked("json", schema=json.dumps({"type": "object"}))

    @classmethod
    def tool_call(cls, name: str, parameters: Mapping[str, Any] | None, *, family: str = "hermes",
                  strict: bool = True, opened: bool = False) -> Constraint:
        """The answer is exactly one call of tool `name` (a forced tool_choice), written in
        `family`'s wrapper, with arguments valid for `parameters`; then the turn ends.
        `opened`: the prompt already ends with the call's opening up to its arguments
        (`<tool_call>\n{"name": "NAME", "arguments": ` for hermes; engine.tools' forced
        prefix), so the answer is the arguments and the call's close."""
        family = _family(family)
        tools = (_tool(name, parameters, strict),)
        return cls._checked("tool_call", tools=tools, family=family, opened=opened)

    @classmethod
    def tool_calls(cls, tools: Mapping[str, Mapping[str, Any] | None] | Iterable[tuple[str, Mapping[str, Any] | None]],
                   *, family: str = "hermes", lazy: bool = True, strict: bool = True) -> Constraint:
        """Free text in which every call the model starts (its family's opening marker)
        must be a valid call of one of `tools` ({name: parameters schema}); text and further
        calls may follow a call. With lazy=False the answer must open with a call."""
        family = _family(family)
        pairs = tools.items() if isinstance(tools, Mapping) else tools
        checked = tuple(_tool(name, params, strict) for name, params in pairs)
        if not checked:
            raise ConstraintError("a tool-call constraint needs at least one tool")
        names = [name for name, _ in checked]
        if len(set(names)) != len(names):
            raise ConstraintError(f"tool names repeat: {', '.join(sorted(n for n in set(names) if names.count(n) > 1))}")
        return cls._checked("tool_calls", tools=checked, family=family, lazy=lazy)

    @classmethod
    def from_response_format(cls, response_format: Mapping[str, Any] | None) -> Constraint | None:
        """OpenAI's `response_format`: {"type": "json_schema", "json_schema": {"schema": {...},
        "strict": bool}}, {"type": "json_object"} or {"type": "text"} (None: no constraint)."""
        if response_format is None:
            return None
        if not isinstance(response_format, Mapping):
            raise ConstraintError(f"response_format must be an object, got {type(response_format).__name__}")
        kind = response_format.get("type")
        if kind == "text":
            return None
        if kind == "json_object":
            return cls.json_object()
        if kind == "json_schema":
            spec = response_format.get("json_schema")
            if not isinstance(spec, Mapping):
                raise ConstraintError('response_format json_schema needs "json_schema": {"schema": {...}}')
            schema = spec.get("schema")
            if schema is None and "type" in spec:  # a bare schema where the wrapper belongs
                schema = spec
            if not isinstance(schema, Mapping):
                raise ConstraintError('response_format json_schema needs "json_schema": {"schema": {...}}, '
                                      f"got schema {schema!r}")
            return cls.json_schema(schema, strict=bool(spec.get("strict", False)))
        raise ConstraintError(f'response_format type must be "text", "json_object" or "json_schema", got {kind!r}')

    @classmethod
    def _checked(cls, kind: str, **fields_) -> Constraint:
        made = cls(kind, **fields_)
        lark = made._grammar(specials={})
        import llguidance

        grammar = llguidance.LLMatcher.grammar_from_lark(lark)
        error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar)
        if error:
            raise ConstraintError(f"{made.describe()} cannot be enforced: {'; '.join(messages)}")
        object.__setattr__(made, "_lark", lark)
        return made

    def describe(self) -> str:
        if self.kind == "json":
            return "the JSON schema"
        names = ", ".join(name for name, _ in self.tools)
        return f"the {self.family} tool call of {names}"

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.tools)

    # -- the grammar -------------------------------------------------------------------

    def _grammar(self, specials: Mapping[str, int]) -> str:
        """Lark text for llguidance; `specials` maps a marker's text to the id of the special
        token that spells it in this model's vocabulary."""
        if self.kind == "json":
            return f"%llguidance {{}}\nstart: json_body\njson_body: %json {_json_arg(self.schema)}\n"
        w = TOOL_FORMATS[self.family]
        rules = ["%llguidance {}"]
        names = [f"call_{i}" for i in range(len(self.tools))]
        for rule, (name, params) in zip(names, self.tools):
            head = json.dumps(f'{{"name": {json.dumps(name)}, "{w.args_key}": ', ensure_ascii=False)
            rules.append(f"{rule}: {head} {rule}_args \"}}\"")
            rules.append(f"{rule}_args: %json {_json_arg(params)}")
        rules.append(f"call: {' | '.join(names)}")
        body = '"[" call ("," " " call)* "]"' if w.array else "call"
        before, after = _marker(w.before, specials), _marker(w.after, specials)
        if self.kind == "tool_call" and self.opened:
            close = json.dumps("}]" if w.array else "}")
            rules.insert(1, f"start: call_0_args {close} {after}".strip())
            return "\n".join(rules) + "\n"
        if self.kind == "tool_call":
            one = '"[" call "]"' if w.array else "call"
            rules.insert(1, f"start: {before} {one} {after}".strip())
            return "\n".join(rules) + "\n"
        # tool_calls: the wrapper's text after its trigger, then the calls
        rest = w.before[len(w.trigger):]
        tail = f"{_marker(rest, specials) if rest else ''} {body} {after}".strip()
        if not self.lazy:
            rules.insert(1, f"start: {before} {body} {after} (TEXT_END)?".replace("  ", " "))
            rules.append(r"TEXT_END: /(.|\n)+/")
            return "\n".join(rules) + "\n"
        trigger_token = specials.get(w.trigger)
        if trigger_token is not None:
            # A special token cannot occur inside text, so it ends the free text by itself.
            rules.insert(1, "start: segment* TEXT")
            rules.append(f"segment: TEXT <[{trigger_token}]> {tail}")
        else:
            rules.insert(1, "start: segment* TEXT")
            rules.append(f"segment: opening {tail}")
            rules.append(f"opening[lazy]: TEXT {json.dumps(w.trigger, ensure_ascii=False)}")
        rules.append(r"TEXT: /(.|\n)*/")
        return "\n".join(rules) + "\n"

    # -- running -----------------------------------------------------------------------

    def start(self, tokenizer) -> ConstraintState:
        """A fresh state for one answer, for `tokenizer` (an engine.tokenize.Tokenizer). Cheap
        and never raises: the grammar is built on the first `mask`/`allowed` call, on the
        inference thread, so a failure there fails that answer like any generation error."""
        return ConstraintState(self, tokenizer)

    def matcher(self, tokenizer):
        """llguidance's matcher for this constraint and tokenizer."""
        import llguidance

        ll = _ll_tokenizer(tokenizer)
        specials = _special_markers(tokenizer, self)
        lark = self._grammar(specials) if specials else self._lark
        matcher = llguidance.LLMatcher(ll, llguidance.LLMatcher.grammar_from_lark(lark), log_level=0)
        if matcher.is_error():
            raise ConstraintError(f"{self.describe()} cannot be enforced: {matcher.get_error()}")
        return matcher


class ConstraintState:
    """One answer's position in its constraint; used on the inference thread only."""

    def __init__(self, constraint: Constraint, tokenizer) -> None:
        self.constraint = constraint
        self._tokenizer = tokenizer
        self._matcher = None
        self.vocab_size = tokenizer.vocab_size
        self.eos_ids = frozenset(tokenizer.eos_ids)
        self._words = np.zeros((self.vocab_size + 31) // 32, dtype=np.int32)
        self.tokens = 0  # tokens advanced past

    @property
    def _m(self):
        if self._matcher is None:
            self._matcher = self.constraint.matcher(self._tokenizer)
        return self._matcher

    def mask(self) -> np.ndarray:
        """The allowed-token bitmask (int32 words, bit i%32 of word i//32 set: token i allowed).
        The array is reused: copy it to keep it past the next call."""
        m = self._m
        m.unsafe_compute_mask_ptr(self._words.ctypes.data, self._words.nbytes)
        if m.is_error():
            raise ConstraintViolation(f"constrained decoding failed after {self.tokens} tokens: {m.get_error()}")
        return self._words

    def allowed(self, n: int) -> np.ndarray:
        """Indices (ascending) of the tokens among the first `n` logits that may come next."""
        return self._ids(self.mask(), np.flatnonzero(self._words), n)

    def restrict(self, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """The logits the sampler may choose from, and their token ids (None: the same
        positions as `logits`). Free text and most of a JSON string allow nearly every
        token: then the few forbidden ones become -inf in a copy, and only the 32-token
        words of the mask that are not all-allowed are looked at. Elsewhere (a key, a
        number, punctuation) few tokens remain and they are gathered."""
        words = self.mask()
        n = logits.size
        partial = np.flatnonzero(words != -1)
        if partial.size * 2 < words.size:  # dense: more than half the words allow all 32
            x = logits.copy()
            bits = np.unpackbits(words[partial].view(np.uint8), bitorder="little").reshape(-1, 32)
            banned = (partial[:, None] * 32 + _LANES)[bits == 0]
            x[banned[banned < n]] = -np.inf
            if n > words.size * 32:
                x[words.size * 32:] = -np.inf  # the model's padding rows past the vocabulary
            return x, None
        ids = self._ids(words, np.flatnonzero(words), n)
        return logits[ids], ids

    def _ids(self, words: np.ndarray, nonzero: np.ndarray, n: int) -> np.ndarray:
        bits = np.unpackbits(words[nonzero].view(np.uint8), bitorder="little").reshape(-1, 32)
        ids = (nonzero[:, None] * 32 + _LANES)[bits == 1]
        ids = ids[ids < n]
        if ids.size == 0:
            raise ConstraintViolation(
                f"constrained decoding allows no token after {self.tokens} tokens "
                f"(the model's {n} logits do not cover the tokenizer's {self.vocab_size} tokens?)")
        return ids

    def advance(self, token: int) -> None:
        """Move past the sampled `token` (an end-of-turn token ends the constraint)."""
        m = self._m
        self.tokens += 1
        if token in self.eos_ids and (m.is_stopped() or m.is_accepting()):
            return
        if not m.consume_token(int(token)):
            raise ConstraintViolation(
                f"constrained decoding refused token {token} after {self.tokens - 1} tokens: "
                f"{m.get_error() or 'not allowed here'}")

    @property
    def complete(self) -> bool:
        """The constrained text is whole: only an end-of-turn token may follow."""
        return self._m.is_stopped()

    @property
    def accepting(self) -> bool:
        """The text so far is a valid whole answer (more may still be allowed)."""
        return self._m.is_accepting()


# -- helpers -------------------------------------------------------------------------------

def _family(family: str) -> str:
    if family not in TOOL_FORMATS:
        raise ConstraintError(f"unknown tool-call family {family!r}; expected one of {', '.join(TOOL_FORMATS)}")
    return family


def _tool(name: Any, parameters: Mapping[str, Any] | None, strict: bool) -> tuple[str, str]:
    if not isinstance(name, str) or not _TOOL_NAME.match(name):
        raise ConstraintError(f"tool name {name!r} must be 1-128 letters, digits, '_', '-', '.' or ':'")
    if parameters is None:
        parameters = {"type": "object", "properties": {}}
    return name, _schema_text(parameters, f"tool {name}'s parameters", strict)


def _schema_text(schema: Any, what: str, strict: bool) -> str:
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as exc:
            raise ConstraintError(f"{what} is not valid JSON: {exc}") from None
    if isinstance(schema, bool):
        schema = {} if schema else {"not": {}}
    if not isinstance(schema, Mapping):
        raise ConstraintError(f"{what} must be a JSON schema object, got {type(schema).__name__}")
    if strict:
        schema = _closed(copy.deepcopy(dict(schema)))
    try:
        text = json.dumps(schema, ensure_ascii=False, sort_keys=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConstraintError(f"{what} is not plain JSON: {exc}") from None
    if len(text) > _MAX_SCHEMA_CHARS:
        raise ConstraintError(f"{what} is {len(text):,} characters; the limit is {_MAX_SCHEMA_CHARS:,}")
    return text


def _closed(schema: Any) -> Any:
    """Objects that list properties get additionalProperties false unless they say otherwise."""
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key in ("properties", "$defs", "definitions", "patternProperties") and isinstance(value, dict):
                for sub in value.values():
                    _closed(sub)
            elif isinstance(value, (dict, list)):
                _closed(value)
        if "properties" in schema and "additionalProperties" not in schema and "patternProperties" not in schema:
            schema["additionalProperties"] = False
    elif isinstance(schema, list):
        for item in schema:
            _closed(item)
    return schema


def _json_arg(schema_text: str | None) -> str:
    """A schema for `%json` with the JSON layout options folded in (x-guidance)."""
    schema = json.loads(schema_text or "{}")
    if isinstance(schema, dict):
        options = dict(_JSON_OPTIONS)
        options.update(schema.get("x-guidance") or {})
        schema = {**schema, "x-guidance": options}
    return json.dumps(schema, ensure_ascii=False)


def _marker(text: str, specials: Mapping[str, int]) -> str:
    """A lark item for a wrapper's literal text, matching a special token where the vocabulary
    spells the marker with one (e.g. "<tool_call>\\n": the token, then "\\n")."""
    if not text:
        return ""
    for marker, token in specials.items():
        at = text.find(marker)
        if at >= 0:
            parts = [_marker(text[:at], specials), f"<[{token}]>", _marker(text[at + len(marker):], specials)]
            return " ".join(p for p in parts if p)
    return json.dumps(text, ensure_ascii=False)


# Every format's tags (a vocabulary may spell any of them with one special token)
_MARKER_TEXTS = {text for w in TOOL_FORMATS.values() for text in (w.marker, w.trigger, w.after.strip()) if text}


def _special_markers(tokenizer, constraint: Constraint) -> dict[str, int]:
    """Markers of `constraint`'s family that this vocabulary holds as special tokens."""
    if constraint.kind == "json":
        return {}
    found = {}
    for marker in _MARKER_TEXTS:
        token = tokenizer._id(marker) if hasattr(tokenizer, "_id") else None
        if token is not None and token in tokenizer.special_ids:
            found[marker] = token
    return found


_TOKENIZERS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_TOKENIZERS_LOCK = threading.Lock()


def _ll_tokenizer(tokenizer):
    """llguidance's view of a Wren Tokenizer, built once per tokenizer (~0.5 s for 49k tokens)."""
    with _TOKENIZERS_LOCK:
        cached = _TOKENIZERS.get(tokenizer)
        if cached is not None:
            return cached
        import llguidance

        # The `tokenizers` JSON the Tokenizer was loaded from: vocabulary, merges, added tokens.
        text = tokenizer._prompt.to_str()
        eos = sorted(tokenizer.eos_ids) or None
        made = llguidance.LLTokenizer(text, n_vocab=tokenizer.vocab_size, eos_token=eos)
        _TOKENIZERS[tokenizer] = made
        return made


def prepare(tokenizer) -> None:
    """Build llguidance's tokenizer ahead of the first constrained answer (optional)."""
    _ll_tokenizer(tokenizer)


def start_for(request, tokenizer) -> ConstraintState | None:
    """The state for a GenerationRequest's `constraint`, or None if it has none."""
    constraint = getattr(request, "constraint", None)
    return None if constraint is None else constraint.start(tokenizer)


def response_format_argument(value: str | None) -> dict | None:
    """`wren ask --schema FILE|JSON`: the response_format for a schema given as a file's
    path or as the JSON text itself (checked, so a bad one fails before the model loads)."""
    if value is None:
        return None
    from pathlib import Path

    text = value
    if not value.lstrip().startswith(("{", "[")) or Path(value).is_file():
        path = Path(value).expanduser()
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConstraintError(f"--schema {value}: no such file (give a file, or the schema as JSON text)") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConstraintError(f"--schema {value}: cannot read the file: {exc}") from None
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConstraintError(f"--schema {value if text is value else path}: not valid JSON: {exc}") from None
    fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}
    Constraint.from_response_format(fmt)
    return fmt


__all__: Sequence[str] = (
    "Constraint",
    "ConstraintError",
    "ConstraintState",
    "ConstraintViolation",
    "prepare",
    "response_format_argument",
    "start_for",
)
