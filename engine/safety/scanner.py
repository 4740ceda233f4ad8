"""Scan a whole text against a policy; redact text for logs."""

from __future__ import annotations

import bisect
import functools
from dataclasses import dataclass

from ..events import SafetyAction, SafetyNotice
from .detector import Detector
from .matcher import Candidate, Matcher
from .normalize import views
from .policy import BUILTIN_DETECTORS, Policy, check_destination, strongest

# Categories `redact()` always masks, whatever the policy says about them.
PRIVATE_PREFIXES = ("secret.", "pii.", "user.")


@dataclass(frozen=True, slots=True)
class Finding:
    category: str
    action: SafetyAction
    span: tuple[int, int]
    rule: str
    preview: str  # masked: never more than a fixed prefix or the last digits
    allowed_by: str | None = None  # the allow rule that lowered the action

    def notice(self, stage: str = "input") -> SafetyNotice:
        rule = self.rule if self.allowed_by is None else f"{self.rule} (allow: {self.allowed_by})"
        return SafetyNotice(self.category, self.action, self.span, rule, stage)


@dataclass(frozen=True, slots=True)
class ScanResult:
    findings: tuple[Finding, ...]
    action: SafetyAction  # the strongest: block > redact > warn > allow
    redacted_text: str  # spans whose action is redact or block replaced by placeholders

    @property
    def blocked(self) -> bool:
        return self.action is SafetyAction.BLOCK

    def notices(self, stage: str = "input") -> list[SafetyNotice]:
        """One notice per finding the user should hear about (everything but allow)."""
        return [f.notice(stage) for f in self.findings if f.action is not SafetyAction.ALLOW]


def placeholder(category: str) -> str:
    return f"[REDACTED:{category}]"


def preview(value: str, detector: Detector) -> str:
    """What a finding may show of its text: a fixed prefix (`sk-proj-`), a card's last
    digits, or for public word lists the phrase itself; never more than half."""
    if detector.reveal is None:
        return value
    n = len(value)
    head = min(detector.reveal, n // 2)
    tail = min(detector.reveal_tail, n // 2 - head)
    return f"{value[:head]}…{value[n - tail:] if tail > 0 else ''} ({n} chars)"


def order_key(c: Candidate, action: SafetyAction) -> tuple:
    """The order findings are resolved in: by start; at one start a block first (so it
    stops the text before any placeholder there), then the longest, then detector order."""
    return (c.start, action is not SafetyAction.BLOCK, -c.end, c.index)


class Dedup:
    """Drops a match inside an earlier match of the same category (a phone number read by
    two phone rules, an address inside another), fed in `order_key` order."""

    def __init__(self) -> None:
        self._ends: dict[str, int] = {}

    def seen(self, category: str, start: int, end: int) -> bool:
        if end <= self._ends.get(category, -1):
            return True
        self._ends[category] = max(end, self._ends.get(category, -1))
        return False


def make_finding(c: Candidate, action: SafetyAction, allowed_by: str | None) -> Finding:
    d = c.detector
    return Finding(d.category, action, (c.start, c.end), d.rule, preview(c.value, d), allowed_by)


def resolve(policy: Policy, candidates: list[Candidate], destination: str) -> list[Finding]:
    decided = []
    for c in candidates:
        action, allowed_by = policy.decide(c.detector, c.value, c.in_code, destination)
        decided.append((order_key(c, action), c, action, allowed_by))
    decided.sort(key=lambda item: item[0])
    dedup = Dedup()
    return [
        make_finding(c, action, allowed_by)
        for _, c, action, allowed_by in decided
        if not dedup.seen(c.detector.category, c.start, c.end)
    ]


def masked(text: str, spans: list[tuple[int, int, str]], upto: int | None = None) -> str:
    """`text` with each (start, end, category) span replaced by its placeholder, in order.

    Overlapping spans merge into one placeholder named after the first. With `upto`, text
    from there on is cut, but a placeholder that starts before it is kept whole: this is
    exactly what a streamed answer shows when it is blocked at `upto`.
    """
    out = []
    pos = 0
    stop = len(text) if upto is None else upto
    for start, end, category in sorted(spans, key=lambda s: (s[0], -s[1])):
        if start >= stop:
            break
        if start >= pos:
            out.append(text[pos:start])
            out.append(placeholder(category))
            pos = end
        elif end > pos:
            pos = end
    if pos < stop:
        out.append(text[pos:stop])
    return "".join(out)


def candidates(text: str, detectors: tuple[Detector, ...]) -> list[Candidate]:
    """The detectors' matches in `text` as written and in its other readings (normalized,
    folded, decoded: engine/safety/normalize.py), each at its span in `text`. A reading's
    match that overlaps one of the same category already found adds nothing."""
    found = Matcher(detectors).feed(text, final=True)
    readings = views(text)
    if not readings:
        return found
    taken = Taken(found)
    for view in readings:
        new = []
        for a, b in view.windows if view.windows is not None else ((0, len(view.text)),):
            for c in Matcher(detectors).feed(view.text[a:b], final=True):
                c.start, c.end = view.span(c.start + a, c.end + a)
                if not taken.overlaps(c):
                    new.append(c)
        taken.add(new)
        found.extend(new)
    return found


class Taken:
    """The spans already found, per category, merged and sorted for a quick overlap test."""

    def __init__(self, found: list[Candidate]) -> None:
        self._spans: dict[str, tuple[list[int], list[int]]] = {}
        self.add(found)

    def add(self, found: list[Candidate]) -> None:
        by_category: dict[str, list[tuple[int, int]]] = {}
        for c in found:
            by_category.setdefault(c.detector.category, []).append((c.start, c.end))
        for category, spans in by_category.items():
            starts, ends = self._spans.get(category, ([], []))
            spans.extend(zip(starts, ends))
            spans.sort()
            merged_starts: list[int] = []
            merged_ends: list[int] = []
            for a, b in spans:
                if merged_ends and a < merged_ends[-1]:
                    merged_ends[-1] = max(merged_ends[-1], b)
                else:
                    merged_starts.append(a)
                    merged_ends.append(b)
            self._spans[category] = (merged_starts, merged_ends)

    def overlaps(self, c: Candidate) -> bool:
        starts, ends = self._spans.get(c.detector.category, ([], []))
        i = bisect.bisect_left(starts, c.end) - 1  # the last span that starts before c ends
        return i >= 0 and ends[i] > c.start


def scan(text: str, policy: Policy | None = None, destination: str = "local") -> ScanResult:
    """Every finding in `text` with the action `policy` gives it for `destination`."""
    check_destination(destination)
    policy = policy or Policy.shipped()
    findings = resolve(policy, candidates(text, policy.detectors), destination)
    hidden = (SafetyAction.REDACT, SafetyAction.BLOCK)
    spans = [(f.span[0], f.span[1], f.category) for f in findings if f.action in hidden]
    return ScanResult(
        findings=tuple(findings),
        action=strongest(f.action for f in findings),
        redacted_text=masked(text, spans) if spans else text,
    )


@functools.cache
def _private_builtins() -> tuple[Detector, ...]:
    return tuple(d for d in BUILTIN_DETECTORS if d.category.startswith(PRIVATE_PREFIXES))


def redact(text: str, policy: Policy | None = None) -> str:
    """`text` with every secret, personal datum and block-listed word masked, whatever the
    policy's actions and allow rules say: for logs and diagnostics, not for the model."""
    if not text:
        return text
    if policy is None:
        detectors = _private_builtins()
    else:
        detectors = tuple(d for d in policy.detectors if d.category.startswith(PRIVATE_PREFIXES))
    found = candidates(text, detectors)
    if not found:
        return text
    return masked(text, [(c.start, c.end, c.detector.category) for c in found])
