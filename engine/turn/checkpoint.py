"""Checkpoints of an answer being streamed: its text so far saved at most every
CHECKPOINT_SECONDS, so a crash loses at most that much of it."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

CHECKPOINT_SECONDS = 0.25  # at most this much streamed text is at risk in a crash


class Checkpoints:
    """`save(text)` is the write (on the database thread); `saved` the length already saved."""

    def __init__(self, save: Callable[[str], Awaitable[Any]], saved: int = 0, *,
                 every: float = CHECKPOINT_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self._save = save
        self.saved = saved
        self.every = every
        self._clock = clock
        self._last = clock()

    async def maybe(self, parts: list[str]) -> bool:
        """Save the text of `parts` if the last save is `every` seconds old and it grew
        since; whether it saved."""
        now = self._clock()
        if now - self._last < self.every:
            return False
        self._last = now
        text = "".join(parts)
        if len(text) == self.saved:
            return False
        await self._save(text)
        self.saved = len(text)
        return True
