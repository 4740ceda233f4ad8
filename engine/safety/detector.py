"""What a detector is, and how far any of its matches can reach (for streaming hold-back)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

# The parse tree is the only way to bound a regex's reach; it has been stable since 3.5
# under either name, and a failure here falls back to a fixed cap rather than crashing.
try:
    # typeshed types the public re module only: these private ones are not in its stubs
    from re import _constants as _c  # type: ignore[attr-defined]
    from re import _parser as _p  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python < 3.11
    import sre_constants as _c  # type: ignore[no-redef]
    import sre_parse as _p  # type: ignore[no-redef]

# A match is final once this many characters past its reach are known: `\b` and `$`
# look one character beyond what they consume.
MARGIN = 2
# Reach assumed for a user pattern whose repetition is unbounded (e.g. `\d+`).
UNBOUNDED_CAP = 256

_ONE_CHAR = {_c.LITERAL, _c.NOT_LITERAL, _c.ANY, _c.IN, _c.CATEGORY}
_REPEATS = {_c.MAX_REPEAT, _c.MIN_REPEAT, getattr(_c, "POSSESSIVE_REPEAT", _c.MAX_REPEAT)}
_ANCHORS = {_c.AT_BEGINNING, _c.AT_BEGINNING_STRING, _c.AT_END, _c.AT_END_STRING}


@dataclass(frozen=True)
class RegexShape:
    reach: float  # characters a match attempt may inspect from its start (inf: unbounded)
    behind: int  # characters a lookbehind may inspect before the start
    min_width: int
    nested_unbounded: bool  # an unbounded repeat inside another: backtracking risk
    anchored: bool  # uses ^ or $, which mean nothing in a text scanned piece by piece


def regex_shape(pattern: str, flags: int = 0) -> RegexShape:
    tree = _p.parse(pattern, flags)
    state = {"behind": 0, "nested": False, "anchored": False}
    reach = _reach(list(tree), state, inside_unbounded=False)
    return RegexShape(
        reach=reach,
        behind=state["behind"],
        min_width=tree.getwidth()[0],
        nested_unbounded=bool(state["nested"]),
        anchored=bool(state["anchored"]),
    )


def _reach(items, state: dict, inside_unbounded: bool) -> float:
    total: float = 0
    for op, av in items:
        if op in _ONE_CHAR:
            total += 1
        elif op is _c.SUBPATTERN:
            total += _reach(av[3], state, inside_unbounded)
        elif op is _c.BRANCH:
            total += max(_reach(b, state, inside_unbounded) for b in av[1])
        elif op in _REPEATS:
            _lo, hi, sub = av
            unbounded = hi == _c.MAXREPEAT
            if unbounded and inside_unbounded:
                state["nested"] = True
            width = _reach(sub, state, inside_unbounded or unbounded)
            total += math.inf if unbounded and width else hi * width
        elif op in (_c.ASSERT, _c.ASSERT_NOT):
            direction, sub = av
            width = _reach(sub, state, inside_unbounded)
            if direction == 1:
                total += width  # a lookahead inspects text it does not consume
            else:
                state["behind"] = max(state["behind"], int(min(width, 10_000)))
        elif op is _c.AT:
            if av in _ANCHORS:
                state["anchored"] = True
            state["behind"] = max(state["behind"], 1)  # \b looks one character back
        elif op is getattr(_c, "ATOMIC_GROUP", None):
            total += _reach(av, state, inside_unbounded)
        elif op is _c.GROUPREF_EXISTS:
            _, yes, no = av
            total += max(_reach(yes, state, inside_unbounded), _reach(no or [], state, False))
        else:  # back-references and anything new: no bound can be proven
            total += math.inf
    return total


@dataclass(frozen=True, eq=False)
class Detector:
    """One rule: a regex, an optional check on the match, and how to show it masked.

    `groups`: named groups whose first participant is the finding's span (a password
    assignment reports only the value). `region_end`: for findings that run on past a short,
    recognisable head (a PEM block, a JWT), the span extends to the end of the first match
    of `region_end` within `region_cap` characters after the head, so a stream only holds
    back the head's length until a head actually appears. `finish_region` gets the
    region's text and returns the finding's final length, or None to drop it.
    """

    category: str
    rule: str
    pattern: re.Pattern[str]
    check: Callable[[re.Match[str]], bool] | None = None
    groups: tuple[str, ...] = ()
    reveal: int | None = 0  # leading characters a preview may show; None: all (word lists)
    reveal_tail: int = 0
    region_end: re.Pattern[str] | None = None
    region_cap: int = 0
    finish_region: Callable[[str], int | None] | None = None
    reach_cap: int = UNBOUNDED_CAP  # the reach assumed when the pattern has no bound
    context: int = 0  # characters before the match that `check` may read (m.string)
    # Strings of which every match holds at least one: a search can skip to the first.
    needles: tuple[str, ...] = ()
    reach: int = field(init=False)
    behind: int = field(init=False)
    end_reach: int = field(init=False)

    def __post_init__(self) -> None:
        try:
            shape = regex_shape(self.pattern.pattern, self.pattern.flags)
            reach, behind = shape.reach, shape.behind
        except Exception:
            reach, behind = math.inf, 64
        bounded = reach if math.isfinite(reach) else self.reach_cap
        object.__setattr__(self, "reach", int(bounded) + MARGIN)
        object.__setattr__(self, "behind", max(behind, self.context) + 1)
        end_reach = 0
        if self.region_end is not None:
            end_reach = int(min(regex_shape(self.region_end.pattern).reach, UNBOUNDED_CAP))
        object.__setattr__(self, "end_reach", end_reach + MARGIN)

    def __repr__(self) -> str:
        return f"Detector({self.category}, {self.rule}, reach={self.reach})"

    def span_of(self, m: re.Match[str]) -> tuple[int, int]:
        for name in self.groups:
            if m.group(name) is not None:
                return m.span(name)
        return m.span()


def bounded_after(head: str, rest: str, bound: str = "A-Za-z0-9_-", tail: bool = True) -> str:
    """`head` then `rest`, not glued to a `bound` character on the left (or the right).

    The left check is a lookbehind placed after the fixed-width `head` rather than before
    it: a pattern that starts with a literal or a character class lets the regex engine
    skip ahead to candidates, which makes a scan 5-50 times faster than one that must
    test a lookbehind at every position.
    """
    lo, hi = _p.parse(head).getwidth()
    if lo != hi:
        raise ValueError(f"head {head!r} must have a fixed width")
    right = f"(?![{bound}])" if tail else ""
    return rf"(?:{head})(?<![{bound}][\s\S]{{{lo}}})(?:{rest}){right}"


def token_pattern(head: str, rest: str) -> re.Pattern[str]:
    """A token that must not be glued to other token characters on either side."""
    return re.compile(bounded_after(head, rest))


def has_letter_and_digit(s: str) -> bool:
    """Real keys are random; a run of only letters is a word or a placeholder."""
    return any(ch.isdigit() for ch in s) and any(ch.isalpha() for ch in s)
