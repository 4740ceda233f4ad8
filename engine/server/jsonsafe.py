"""JSON that Wren can hold: valid Unicode, bounded nesting, numbers that fit 64 bits.
`loads` raises UnsafeJson naming the first field that is wrong (no web framework here:
the engine's stateless serving uses it too)."""

from __future__ import annotations

import json
import math
from typing import Any

MAX_DEPTH = 64  # nesting of objects and arrays; no field of the API needs more than a handful
MAX_ID = 2**63 - 1  # SQLite's INTEGER: every stored id fits
MIN_INT = -(2**63)


class UnsafeJson(ValueError):
    """JSON Wren refuses; `param` names the field (None: the whole text)."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


class _Bad:
    """A parsed value Wren refuses, kept in place so the walk can name its field."""

    def __init__(self, reason: str):
        self.reason = reason


def _parse_int(text: str) -> int | _Bad:
    digits = len(text) - text.startswith("-")
    if digits > 19:  # before int(): Python refuses over 4,300 digits with a ValueError
        return _Bad(f"is an integer of {digits:,} digits; numbers must fit in 64 bits")
    value = int(text)
    if not MIN_INT <= value <= MAX_ID:
        return _Bad(f"is {value}; integers must fit in 64 bits")
    return value


def _parse_float(text: str) -> float | _Bad:
    value = float(text)
    return value if math.isfinite(value) else _Bad(f"is {text[:40]}, beyond what a number can hold")


def _parse_constant(name: str) -> _Bad:
    return _Bad(f"is {name}; JSON numbers must be finite")


def _shown(path: str) -> str:
    """A field path safe to put in a JSON answer (a lone surrogate as its escape)."""
    return path.encode("utf-8", "backslashreplace").decode("utf-8")


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def check_value(value: Any) -> None:
    """Every string (keys too) valid Unicode, every number one Wren can hold, nesting at
    most MAX_DEPTH: else UnsafeJson naming a field that is wrong (the walk is depth-first)."""
    stack: list[tuple[str, Any, int]] = [("", value, 0)]
    while stack:
        path, item, depth = stack.pop()
        if isinstance(item, _Bad):
            raise UnsafeJson(f"{_shown(path) or 'the body'} {item.reason}", param=_shown(path) or None)
        if isinstance(item, str):
            if _has_surrogate(item):
                raise UnsafeJson(f"{_shown(path) or 'the body'} holds a lone surrogate (such as \\ud800): text "
                                    "must be valid Unicode", param=_shown(path) or None)
            continue
        if not isinstance(item, (dict, list)):
            continue
        if depth >= MAX_DEPTH:
            raise UnsafeJson(f"{_shown(path)} is nested more than {MAX_DEPTH} levels deep",
                             param=_shown(path) or None)
        if isinstance(item, dict):
            for key, child in item.items():
                where = _join(path, key)
                if _has_surrogate(key):
                    raise UnsafeJson(f"the field name {_shown(where)} holds a lone surrogate: text must be "
                                     "valid Unicode", param=_shown(where))
                stack.append((where, child, depth + 1))
        else:
            stack.extend((_join(path, i), child, depth + 1) for i, child in enumerate(item))


def loads(raw: bytes | str, what: str = "the request body") -> Any:
    """`raw` parsed and checked (check_value); UnsafeJson saying what is wrong otherwise."""
    try:
        value = json.loads(raw, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant)
    except RecursionError:
        raise UnsafeJson(f"{what} is nested too deeply (at most {MAX_DEPTH} levels)") from None
    except UnsafeJson:
        raise
    except ValueError as exc:  # JSONDecodeError, and bytes that are not UTF-8/16/32
        raise UnsafeJson(f"{what} is not valid JSON: {exc}") from None
    check_value(value)
    return value
