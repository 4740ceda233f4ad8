"""The id-level generation loop, shared by every backend: prefix reuse, then decode."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np

from ..errors import InvalidRequest
from .backend import LoadedModel


class KVSession:
    """Tracks which token ids sit in a model's KV cache so a new prompt that shares a
    prefix with the last one (the next chat turn, a pre-warmed draft) only runs the rest.

    `slot` picks one of a batching model's KV-cache slots; 0 (the default) is the only one
    a model without slots has, and the one its prefix export and fast decode use."""

    def __init__(self, model: LoadedModel, slot: int = 0) -> None:
        self.model = model
        self.slot = slot
        self._ids: list[int] = []
        self._logits: np.ndarray | None = None  # the logits after the last cached id
        self.last_reused = 0  # prompt tokens the last prefill took from the cache

    @property
    def context_length(self) -> int:
        return self.model.context_length

    @property
    def cached_ids(self) -> tuple[int, ...]:
        return tuple(self._ids)

    def __len__(self) -> int:
        return len(self._ids)

    def reset(self) -> None:
        self._ids = []
        self._logits = None

    def adopt(self, ids) -> None:
        """The model's cache now holds `ids` (a saved state was restored into it)."""
        self._ids = [int(i) for i in ids]
        self._logits = None

    def prefill(self, ids: Sequence[int], final: bool = True) -> tuple[np.ndarray, int]:
        """Logits after `ids` and how many leading ids were reused from the cache. `final`
        False: `ids` is a long prompt read in pieces and not its last one, so these logits
        pick no token; a model that can (`partial_prefill`) then keeps no row of it exact
        (engine.inference.quant.modules.prompt_activations), and they are not kept for a
        later prefill of the same ids."""
        ids = [int(i) for i in ids]
        if not ids:
            raise InvalidRequest("the prompt has no tokens")
        if len(ids) > self.context_length:
            raise InvalidRequest(
                f"the prompt has {len(ids)} tokens but the context holds {self.context_length}"
            )
        if self._logits is not None and ids == self._ids:
            # Exactly the prompt already prefilled (a pre-warmed draft that was sent as is):
            # its logits are kept, so the first token needs no forward pass at all.
            self.last_reused = len(ids)
            return self._logits.copy(), len(ids)
        # The last id runs again: its logits are the answer.
        reused = min(common_prefix(self._ids, ids), len(ids) - 1)
        # A sliding-window layer's ring holds only its last positions: going back further
        # than it keeps means starting over (engine.inference.models.ring).
        if reused and not self.model.kv_resumable(reused, self.slot):
            reused = 0
        # Forget the tail first: if the backend fails midway, the cache past `reused`
        # is in an unknown state.
        del self._ids[reused:]
        self._logits = None
        partial = {"final": False} if not final and self.model.partial_prefill else {}
        if self.slot:
            logits = self.model.prefill(ids[reused:], reused, slot=self.slot, **partial)
        else:
            logits = self.model.prefill(ids[reused:], reused, **partial)
        self._ids = ids
        self._logits = logits if final else None
        self.last_reused = reused
        return logits, reused

    def decode(self, token: int) -> np.ndarray:
        """Logits after appending one token to the cached sequence."""
        pos = len(self._ids)
        if pos >= self.context_length:
            raise InvalidRequest(f"the {self.context_length}-token context is full")
        self._logits = None
        if self.slot:
            logits = self.model.decode(int(token), pos, slot=self.slot)
        else:
            logits = self.model.decode(int(token), pos)
        self._ids.append(int(token))
        self._logits = logits
        return logits

    def verify(self, tokens: Sequence[int]) -> np.ndarray:
        """Logits [len(tokens), vocab] after each of `tokens` appended to the cached
        sequence, in one pass (engine.inference.speculative); all of them are then cached
        until `truncate` takes back the ones not kept."""
        tokens = [int(t) for t in tokens]
        pos = len(self._ids)
        if pos + len(tokens) > self.context_length:
            raise InvalidRequest(f"the {self.context_length}-token context is full")
        self._logits = None
        rows = self.model.verify(tokens, pos, slot=self.slot) if self.slot else self.model.verify(tokens, pos)
        self._ids.extend(tokens)
        return rows

    def truncate(self, n: int) -> None:
        """Keep the first `n` cached ids. The cache entries after them stay until
        overwritten: every query sees only positions up to its own, and a sliding-window
        ring keeps RING_SLACK positions past its window, more than a draft's length."""
        if n < len(self._ids):
            del self._ids[n:]
            self._logits = None

    def appended(self, token: int) -> None:
        """A batched decode step wrote `token` into this session's slot."""
        self._ids.append(int(token))
        self._logits = None


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if diff.size else n


def generate_tokens(
    session: KVSession,
    prompt_ids: Sequence[int],
    sampler: Callable[[np.ndarray, np.ndarray], int],
) -> Iterator[int]:
    """Yield sampled ids one by one, end-of-sequence included; the caller stops by not
    asking for more. Ends by itself once the context is full. The sampler sees the
    prompt plus everything generated so far (for the repetition penalty)."""
    logits, _ = session.prefill(prompt_ids)
    history = np.empty(session.context_length + 1, dtype=np.int64)
    n = len(prompt_ids)
    history[:n] = prompt_ids
    while True:
        token = sampler(logits, history[:n])
        yield token
        history[n] = token
        n += 1
        if len(session) >= session.context_length:
            return
        logits = session.decode(token)
