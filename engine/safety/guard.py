"""Guard a streamed answer: release text as soon as no rule could still claim it.

Only detectors whose action here is redact or block hold text back, each by its reach
(the longest text a match can span plus the character after it), so with the shipped
policy on a local model only block-listed words delay anything. Warnings never delay
text; their notices follow once every warning rule has had its say about that place.
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass

from ..events import SafetyAction, SafetyNotice
from .matcher import Matcher
from .policy import Policy, check_destination
from .scanner import Dedup, Finding, make_finding, order_key, placeholder

_HIDES = (SafetyAction.REDACT, SafetyAction.BLOCK)


@dataclass(frozen=True, slots=True)
class GuardStep:
    text: str  # what may be shown now, placeholders in place of redacted spans
    notices: tuple[SafetyNotice, ...] = ()
    blocked: bool = False  # once true, nothing more is ever released


class OutputGuard:
    """Feed it each delta; show what it returns. Spans in notices are offsets in the
    model's raw answer (before any placeholder replaced text)."""

    def __init__(self, policy: Policy, destination: str = "local") -> None:
        self._destination = check_destination(destination)
        self._policy = policy
        active = [
            d for d in policy.detectors
            if policy.action_for(d.category, destination) is not SafetyAction.ALLOW
        ]
        self._gating = {
            i for i, d in enumerate(active) if policy.action_for(d.category, destination) in _HIDES
        }
        self._warning = [i for i in range(len(active)) if i not in self._gating]
        self._matcher = Matcher(active)
        self.hold_back = max((active[i].reach for i in self._gating), default=0)
        self._hiding: list = []  # heaps of (order key, tiebreak, finding)
        self._telling: list = []
        self._hide_dedup = Dedup()
        self._tell_dedup = Dedup()
        self._tiebreak = itertools.count()
        self._emitted = 0  # raw offset up to which text is shown or replaced
        self._blocked = False
        self._finished = False

    @property
    def blocked(self) -> bool:
        return self._blocked

    def feed(self, delta: str) -> GuardStep:
        if self._finished:
            raise RuntimeError("OutputGuard.feed after finish()")
        return self._step(delta, final=False)

    def finish(self) -> GuardStep:
        """Release everything still held back; call once when the answer ends."""
        if self._finished:
            return GuardStep("", (), self._blocked)
        step = self._step("", final=True)
        self._finished = True
        return step

    def _step(self, delta: str, final: bool) -> GuardStep:
        if self._blocked:
            return GuardStep("", (), True)
        self._take(delta, final)
        told: list[Finding] = []
        out: list[str] = []
        frontier = self._matcher.frontier(self._gating)
        stop = self._release_hidden(frontier, told, out)
        if not self._blocked:
            self._release_text(frontier, out)
        self._tell(stop, told)
        told.sort(key=lambda f: f.span)
        return GuardStep("".join(out), tuple(f.notice("output") for f in told), self._blocked)

    def _take(self, delta: str, final: bool) -> None:
        """The matcher's new candidates, decided and queued: gating ones to hide, the rest to tell."""
        for c in self._matcher.feed(delta, final=final):
            action, allowed_by = self._policy.decide(
                c.detector, c.value, c.in_code, self._destination
            )
            heap = self._hiding if c.index in self._gating else self._telling
            item = (order_key(c, action), next(self._tiebreak), make_finding(c, action, allowed_by))
            heapq.heappush(heap, item)

    def _release_hidden(self, frontier: float, told: list[Finding], out: list[str]) -> float:
        """The gating findings before `frontier`, in order: text up to each, a placeholder for a
        redaction, and a block ends it all. Returns where a block stopped the text (inf: none)."""
        m = self._matcher
        while self._hiding and self._hiding[0][2].span[0] < frontier:
            f = heapq.heappop(self._hiding)[2]
            start, end = f.span
            if self._hide_dedup.seen(f.category, start, end):
                continue
            if f.action is not SafetyAction.ALLOW:
                told.append(f)
            if f.action is SafetyAction.BLOCK:
                if start > self._emitted:
                    out.append(m.text(self._emitted, start))
                self._blocked = True
                return start
            if f.action is SafetyAction.REDACT:
                if start >= self._emitted:
                    out.append(m.text(self._emitted, start))
                    out.append(placeholder(f.category))
                    self._emitted = end
                elif end > self._emitted:
                    self._emitted = end  # overlaps the placeholder already shown
        return math.inf

    def _release_text(self, frontier: float, out: list[str]) -> None:
        """The text no gating detector can still claim goes out."""
        m = self._matcher
        upto = min(frontier, m.length)
        if upto > self._emitted:
            out.append(m.text(self._emitted, int(upto)))
            self._emitted = int(upto)
        m.release(self._emitted)

    def _tell(self, stop: float, told: list[Finding]) -> None:
        """The warning-only findings the matcher is done with, those before a block's stop."""
        told_frontier = self._matcher.frontier(self._warning)
        while self._telling and self._telling[0][2].span[0] < told_frontier:
            f = heapq.heappop(self._telling)[2]
            if not self._tell_dedup.seen(f.category, *f.span) and f.span[0] < stop:
                if f.action is not SafetyAction.ALLOW:
                    told.append(f)
