"""Stop strings over streamed text: show everything that cannot become a stop string."""

from __future__ import annotations

from collections.abc import Iterable


class StopStringMatcher:
    """Feed decoded text piece by piece; `feed` returns what is safe to show now.

    Only the longest tail that is still the start of some stop string is held back, so a
    stop string split across tokens is caught and no part of it is ever shown.
    """

    def __init__(self, stop_strings: Iterable[str]) -> None:
        self.stops = tuple(dict.fromkeys(s for s in stop_strings if s))
        self._held = ""
        self.hit = False

    def feed(self, text: str) -> tuple[str, bool]:
        """(text safe to show, whether a stop string was reached). After a hit, further
        text is ignored."""
        if self.hit:
            return "", True
        if not self.stops:
            return text, False
        buf = self._held + text
        # The stop string that completes first wins, as if text arrived one character at
        # a time, so the result does not depend on how the text was chunked; among those
        # ending at the same place, the longest (earliest start) is cut.
        best: tuple[int, int] | None = None
        for stop in self.stops:
            i = buf.find(stop)
            if i >= 0 and (best is None or (i + len(stop), i) < best):
                best = (i + len(stop), i)
        if best is not None:
            self.hit = True
            self._held = ""
            return buf[: best[1]], True
        keep = self._partial_tail(buf)
        self._held = buf[len(buf) - keep :]
        return buf[: len(buf) - keep], False

    def flush(self) -> str:
        """Release the held tail at the end of the stream (it never became a stop string)."""
        out, self._held = ("" if self.hit else self._held), ""
        return out

    def _partial_tail(self, buf: str) -> int:
        best = 0
        for stop in self.stops:
            for k in range(min(len(stop) - 1, len(buf)), best, -1):
                if buf.endswith(stop[:k]):
                    best = k
                    break
        return best
