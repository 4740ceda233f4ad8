"""Run many detectors over text that arrives in pieces, reporting each match exactly once.

The same loop serves a whole message (one final feed) and a streamed answer (many small
feeds), so both see identical matches. Per detector it remembers where the next search
starts; a match is reported only once enough text follows it that no later text could
change it (its start plus the detector's reach). Each feed therefore costs the new text
plus one reach per detector, never the whole answer again.
"""

from __future__ import annotations

import bisect
import math
import re
from dataclasses import dataclass

from .detector import Detector

# Trimming copies the kept tail, so only trim once the dead prefix is worth it.
_TRIM_AT = 4096


@dataclass(slots=True)
class Candidate:
    detector: Detector
    index: int  # the detector's position: ties between equal spans resolve by it
    start: int  # absolute offsets in the whole text
    end: int
    value: str  # the matched text: for allow-lists and masked previews; never kept
    in_code: bool


# A line that may open or close a fenced code block starts like this.
_FENCE_CANDIDATE = re.compile(r"\n {0,3}[`~]")
_MAX_RUN = 16


class FenceTracker:
    """Which offsets lie inside fenced code blocks (``` or ~~~), learned as text arrives.

    A block runs from its opening fence line through its closing fence line (same
    character, at least as long a run); an unclosed block runs to the end. Only lines
    that start like a fence are looked at, found by one regex search, and a line is
    classified from its first few characters, so a long line is never held back waiting
    for its newline. Info strings after a closing fence are not checked.
    """

    def __init__(self) -> None:
        self._line_start = 0  # the line being classified, or the last one classified
        self._classified = False
        self._from = 0  # the next search for a candidate line starts here
        self._pending: float = math.inf  # a last line that may still become a fence
        self._open: tuple[str, int] | None = None
        self._closing = False
        self._starts: list[int] = []
        self._ends: list[float] = []  # math.inf while the block or its closing line is open

    @property
    def safe_upto(self) -> float:
        """Offsets below this have a known answer to `in_code`."""
        return self._pending if self._classified else self._line_start

    @property
    def keep_from(self) -> int:
        return self._from if self._classified else self._line_start

    def in_code(self, pos: int) -> bool:
        i = bisect.bisect_right(self._starts, pos) - 1
        return i >= 0 and pos < self._ends[i]

    def advance(self, buf: str, base: int, final: bool) -> None:
        length = base + len(buf)
        self._pending = math.inf
        while True:
            if not self._classified:
                fence = self._classify(buf, base, length, final)
                if fence is None:
                    return
                self._apply(fence)
                self._classified = True
                self._from = self._line_start
            if self._closing:  # the block ends with its closing line's newline
                nl = buf.find("\n", self._from - base)
                if nl < 0:
                    self._from = length
                    return
                self._ends[-1] = base + nl + 1
                self._closing = False
                self._from = base + nl
            m = _FENCE_CANDIDATE.search(buf, self._from - base)
            if m is None:
                tail = max(self._from, length - 4)
                nl = buf.rfind("\n", tail - base)
                if nl >= 0 and not final and not buf[nl + 1 :].strip(" "):
                    self._pending = base + nl + 1  # "\n  " could still become "\n  ```"
                self._from = tail
                return
            self._line_start = base + m.start() + 1
            self._classified = False

    def _classify(self, buf: str, base: int, length: int, final: bool):
        """(char, run) for a fence line, False for any other line, None if not yet known."""
        i = self._line_start
        spaces = 0
        while i < length and buf[i - base] == " " and spaces < 3:
            i += 1
            spaces += 1
        if i >= length:
            return False if final else None
        ch = buf[i - base]
        if ch not in "`~":
            return False
        # An opening run's full length (up to a cap) matters: only as long a run closes it.
        opened = self._open
        enough = opened[1] if opened is not None and opened[0] == ch else _MAX_RUN
        run = 0
        while i < length and buf[i - base] == ch and run < enough:
            i += 1
            run += 1
        if i >= length and run < enough and not final:
            return None
        return (ch, run) if run >= 3 else False

    def _apply(self, fence) -> None:
        if not fence:
            return
        ch, run = fence
        if self._open is None:
            self._open = fence
            self._starts.append(self._line_start)
            self._ends.append(math.inf)
        elif ch == self._open[0] and run >= self._open[1]:
            self._open = None
            self._closing = True


class _Track:
    __slots__ = ("head_end", "head_start", "pos", "region_pos")

    def __init__(self) -> None:
        self.pos = 0  # the next search starts here; no unreported match starts before it
        self.head_start: int | None = None  # a region detector's head awaiting its end
        self.head_end = 0
        self.region_pos = 0


class Matcher:
    def __init__(self, detectors: list[Detector] | tuple[Detector, ...]) -> None:
        self.detectors = tuple(detectors)
        self._tracks = [_Track() for _ in self.detectors]
        self._fences = FenceTracker()
        self._buf = ""
        self._base = 0
        self._final = False

    @property
    def length(self) -> int:
        return self._base + len(self._buf)

    def text(self, start: int, end: int) -> str:
        return self._buf[start - self._base : end - self._base]

    def feed(self, text: str, *, final: bool = False) -> list[Candidate]:
        if self._final:
            raise RuntimeError("the matcher has already seen the end of its text")
        self._buf += text
        self._final = final
        self._fences.advance(self._buf, self._base, final)
        out: list[Candidate] = []
        limit = self._fences.safe_upto - 1
        length = self.length
        for index, detector in enumerate(self.detectors):
            settled = math.inf if final else min(length - detector.reach, limit)
            self._advance(index, detector, self._tracks[index], out, settled)
        return out

    def frontier(self, indices) -> float:
        """Every candidate of these detectors that starts before this has been reported."""
        if self._final:
            return math.inf
        f: float = self.length
        for i in indices:
            t = self._tracks[i]
            f = min(f, t.pos if t.head_start is None else t.head_start)
        return f

    def release(self, upto: int) -> None:
        """The caller needs no text before `upto` any more."""
        if len(self._buf) < 2 * _TRIM_AT:
            return
        keep = min(upto, self._fences.keep_from)
        for detector, t in zip(self.detectors, self._tracks):
            start = t.pos if t.head_start is None else t.head_start
            keep = min(keep, start - detector.behind)
        cut = keep - self._base
        if cut >= _TRIM_AT:
            self._buf = self._buf[cut:]
            self._base = keep

    def _advance(
        self, index: int, d: Detector, t: _Track, out: list[Candidate], settled: float
    ) -> None:
        """Report this detector's matches that start at or before `settled`, the last
        offset whose match (or lack of one) no later text can change."""
        buf, base = self._buf, self._base
        while True:
            if t.head_start is not None:
                if not self._close_region(index, d, t, out):
                    return
                continue
            m = self._search(d, t.pos - base if t.pos > base else 0)
            if m is None or m.start() + base > settled:
                if settled != math.inf and settled >= t.pos:
                    t.pos = int(settled) + 1
                return
            t.pos = m.end() + base
            if d.check is not None and not d.check(m):
                continue
            if d.region_end is not None:
                t.head_start, t.head_end = m.start() + base, t.pos
                t.region_pos = t.pos
                continue
            a, b = d.span_of(m)
            out.append(
                Candidate(d, index, a + base, b + base, buf[a:b], self._fences.in_code(a + base))
            )

    def _search(self, d: Detector, start: int) -> re.Match[str] | None:
        buf = self._buf
        if d.needles:
            # Every match holds a needle, so none starts more than a reach before the first.
            first = -1
            for needle in d.needles:
                i = buf.find(needle, start)
                if i >= 0 and (first < 0 or i < first):
                    first = i
            if first < 0:
                return None
            if first - d.reach > start:
                start = first - d.reach
        return d.pattern.search(buf, start)

    def _close_region(self, index: int, d: Detector, t: _Track, out: list[Candidate]) -> bool:
        """Find where a started region ends; False while that depends on text not yet here."""
        base, length = self._base, self.length
        region_end = d.region_end
        assert region_end is not None, "only a detector with a region has one to close"
        limit = t.head_end + d.region_cap
        stop = min(length, limit)
        m = region_end.search(self._buf, t.region_pos - base, stop - base)
        decided = self._final or length >= limit
        if m is not None and (decided or m.start() + base + d.end_reach <= length):
            end = m.end() + base
        elif decided:
            end = stop
        else:
            t.region_pos = max(t.region_pos, length - d.end_reach + 1)
            if m is not None:
                t.region_pos = min(t.region_pos, m.start() + base)
            return False
        start, head_end = t.head_start, t.head_end
        assert start is not None, "a region closes only after its head started"
        t.head_start = None
        text = self.text(start, end)
        n = d.finish_region(text) if d.finish_region is not None else len(text)
        if not n:
            t.pos = head_end
            return True
        t.pos = max(start + n, head_end)
        out.append(Candidate(d, index, start, start + n, text[:n], self._fences.in_code(start)))
        return True
