"""Saved KV states of recent prompts, so returning to a conversation reuses its prefix.

The model holds one live KV cache. When a request shares more with a saved prompt than
with the live one, the live state is saved (it is some other conversation's) and the
saved one restored. Entries are evicted least recently used first, within a byte budget;
a state bigger than the whole budget is simply not kept.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

MIN_GAIN = 16  # restoring costs a copy; below this many extra tokens, recompute instead


@dataclass
class SavedPrefix:
    ids: tuple[int, ...]
    state: Any  # whatever the backend's export_kv returned
    nbytes: int
    array: np.ndarray | None = None  # `ids` as an array, made once: `best` compares every entry


def _shared(a: np.ndarray, b: np.ndarray) -> int:
    """How many leading ids two arrays share."""
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if diff.size else n


class PrefixCache:
    def __init__(self, budget_bytes: int):
        self.budget = max(0, int(budget_bytes))
        self._entries: OrderedDict[tuple[int, ...], SavedPrefix] = OrderedDict()
        self.used = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, ids: Sequence[int], state: Any, nbytes: int) -> bool:
        key = tuple(ids)
        if not key or nbytes > self.budget:
            return False
        self.discard(key)
        while self._entries and self.used + nbytes > self.budget:
            _, old = self._entries.popitem(last=False)
            self.used -= old.nbytes
            self.evictions += 1
        self._entries[key] = SavedPrefix(key, state, nbytes, np.asarray(key, dtype=np.int64))
        self.used += nbytes
        return True

    def discard(self, ids: Sequence[int]) -> None:
        old = self._entries.pop(tuple(ids), None)
        if old is not None:
            self.used -= old.nbytes

    def best(self, ids: Sequence[int]) -> tuple[SavedPrefix | None, int]:
        """The saved prompt sharing the longest prefix with `ids`, and that length."""
        found, length = None, 0
        if not self._entries or not len(ids):
            return None, 0
        target = np.asarray(ids, dtype=np.int64)  # once, not once per entry
        for entry in self._entries.values():
            if entry.array is None:
                entry.array = np.asarray(entry.ids, dtype=np.int64)
            n = _shared(entry.array, target)
            if n > length:
                found, length = entry, n
        if found is not None:
            self._entries.move_to_end(found.ids)
        return found, length

