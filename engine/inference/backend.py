"""The contract every inference backend implements.

A backend turns a model folder (HF layout: config.json, *.safetensors, tokenizer.json)
into a `LoadedModel`: a stateful object that owns its KV cache and knows only token ids.
All calls on a `LoadedModel` happen on its one inference thread.

Every method the worker (engine.inference.worker), the batch scheduler
(engine.inference.batch) and the engine call is declared here. Capabilities a backend may
lack are explicit attributes with documented defaults (`ModelBase` supplies them), never
probed with hasattr or signatures:

- `slots` (default 1): KV-cache slots, i.e. sequences the model holds at once. With more
  than one, `prefill`/`decode` take `slot=` and `batched_decode` says whether
  `decode_batch` steps several slots in one pass (the worker then runs the batch
  scheduler).
- `kv_export` (default False): `export_kv`/`import_kv` copy a slot's cached positions out
  and back (the prefix cache, pausing a sequence for more urgent work).
- `decode_mode` (default None: the backend does not say) and `wait_compiled`: how a
  decoded token runs now ("eager", "compiling", "compiled", "cuda-graph").
- `verifies` (default False): `verify` returns the logits after each of several tokens
  in one pass (speculative decoding's check of drafted tokens, engine.inference.speculative);
  `verifies_exactly` (default False): with the bits `decode` gives them, at present.
- `takes_messages` (default False): a model that answers chat messages rather than token
  ids (a remote server). Its `prefill`/`decode` raise; `chat_stream` runs a whole answer.
  Such a model runs in a `RemoteWorker` (engine.inference.backends.remote), never in the
  token-level ModelWorker.
- `partial_prefill` (default False): `prefill` takes `final=False` for a long prompt's
  earlier chunk, whose logits pick no token, so the model may compute its last rows as
  it does the rest (the torch backend's exact tail, engine.inference.quant.modules).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np


class Unsupported(NotImplementedError):
    """A capability this model does not have was called (its flag says so)."""


def check_slot(slot: int, slots: int) -> None:
    """For models with KV slots: refuse a slot the model does not have."""
    if not 0 <= slot < slots:
        raise ValueError(f"slot {slot} is outside 0..{slots - 1}")


def check_batch(tokens: Sequence[int], positions: Sequence[int], slots: Sequence[int],
                slot_count: int, context_length: int) -> None:
    """Refuse a batched step (`decode_batch`) whose rows do not fit the model."""
    if not (len(tokens) == len(positions) == len(slots) >= 1):
        raise ValueError("tokens, positions and slots must be equally long and not empty")
    if len(set(slots)) != len(slots) or not all(0 <= s < slot_count for s in slots):
        raise ValueError(f"slots {list(slots)} must be distinct and within 0..{slot_count - 1}")
    if not all(0 <= p < context_length for p in positions):
        raise ValueError(f"positions {list(positions)} are outside the {context_length}-token context")


@dataclass(frozen=True)
class ChatChunk:
    """One piece of a chat model's streamed answer (`LoadedModel.chat_stream`): text, and
    on the last chunk the server's finish reason and token counts when it sent them."""

    text: str = ""
    finish_reason: str | None = None  # "stop", "length", ... as the server said
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    reasoning: str = ""  # the model's thinking, where the server sends it apart (reasoning_content)


@runtime_checkable
class LoadedModel(Protocol):
    backend: str  # "torch-cpu", "torch-cuda", "mlx", "scripted", "remote"
    context_length: int  # positions the KV cache holds (a remote model: its context window)
    vocab_size: int  # 0 for a model that takes messages
    slots: int  # KV-cache slots; 1: one sequence at a time
    batched_decode: bool  # decode_batch steps several slots together (needs slots > 1)
    kv_export: bool  # export_kv / import_kv work
    verifies: bool  # verify gives the logits after each of several tokens
    takes_messages: bool  # answers chat messages (chat_stream), not token ids
    partial_prefill: bool  # prefill takes final=False (a long prompt's earlier chunk)

    @property
    def decode_mode(self) -> str | None:
        """How a decoded token runs now; None: not said (read-only: a backend may compute it)."""

    @property
    def verifies_exactly(self) -> bool:
        """Whether verify gives each row the bits decode would, now (a model that compiles
        its decode step may stop)."""

    def prefill(self, ids: Sequence[int], start: int, slot: int = 0) -> np.ndarray:
        """Run `ids` at positions start..start+len-1 in `slot` and return float32 logits
        [vocab] of the last one. Cache entries at positions >= start are overwritten, so a
        caller reuses a cached prefix by passing start = length of the shared prefix."""

    def decode(self, token: int, pos: int, slot: int = 0) -> np.ndarray:
        """Run one token at position `pos` in `slot`; float32 logits [vocab]."""

    def verify(self, ids: Sequence[int], start: int, slot: int = 0) -> np.ndarray:
        """As `prefill`, but float32 logits [len(ids), vocab] after each id, computed as a
        one-token `decode` computes them (its activation rounding, not the prompt path's).
        Only where `verifies`; else raises Unsupported."""

    def decode_batch(self, tokens: Sequence[int], positions: Sequence[int],
                     slots: Sequence[int]) -> np.ndarray:
        """Logits [B, vocab]: row b appends tokens[b] at positions[b] to slot slots[b].
        Only where `batched_decode`; else raises Unsupported."""

    def export_kv(self, n: int, slot: int = 0) -> tuple[Any, int]:
        """A copy of the first `n` cached positions of `slot`, and its size in bytes.
        Only where `kv_export`; else raises Unsupported."""

    def import_kv(self, state: Any, n: int, slot: int = 0) -> None:
        """Put a state from `export_kv` back as the first `n` positions of `slot`."""

    def kv_resumable(self, start: int, slot: int = 0) -> bool:
        """Whether `slot`'s sequence may go on from `start` (its cache holding positions
        0..start-1), rather than from 0: a sliding-window layer's cache keeps only its last
        positions. True for every cache that keeps them all."""

    def wait_compiled(self, timeout: float | None = None) -> str | None:
        """Block until a background compile of the decode step has finished (at most
        `timeout` seconds); returns `decode_mode`."""

    def chat_stream(self, messages: list[dict], params: Any, *,
                    request_id: str | None = None) -> AsyncIterator[ChatChunk]:
        """Only where `takes_messages`: stream an answer to chat `messages` with sampling
        `params` (engine.inference.sampling.SamplingParams)."""

    def rest(self) -> None:
        """The worker has nothing more to run for now: give back what computing holds (a
        CPU model's turn on the cores, engine.inference.cpu_share)."""

    def serving(self, cancelled: Callable[[], bool] | None) -> None:
        """What the next steps are for: `cancelled()` says when that work was stopped, so a
        step waiting for the cores (engine.inference.cpu_share) stops waiting."""

    def close(self) -> None:
        """Free weights and cache."""


class ModelBase:
    """The documented defaults of a LoadedModel's optional capabilities: one slot, no
    batched decode, no KV export, token ids in, no word on the decode mode. Backends
    inherit it and override what they have."""

    slots: int = 1
    batched_decode: bool = False
    kv_export: bool = False
    verifies: bool = False
    takes_messages: bool = False
    # prefill takes final=False: a long prompt's earlier chunk, whose logits nobody reads,
    # so the model may compute its last rows as it does the rest (KVSession.prefill)
    partial_prefill: bool = False

    @property
    def decode_mode(self) -> str | None:
        return None

    @property
    def verifies_exactly(self) -> bool:
        return False

    def rest(self) -> None:
        return None

    def serving(self, cancelled: Callable[[], bool] | None) -> None:
        return None

    def decode_batch(self, tokens: Sequence[int], positions: Sequence[int],
                     slots: Sequence[int]) -> np.ndarray:
        raise Unsupported(f"the {self.backend} backend has no batched decoding")  # type: ignore[attr-defined]

    def verify(self, ids: Sequence[int], start: int, slot: int = 0) -> np.ndarray:
        raise Unsupported(f"the {self.backend} backend cannot verify drafted tokens")  # type: ignore[attr-defined]

    def export_kv(self, n: int, slot: int = 0) -> tuple[Any, int]:
        raise Unsupported(f"the {self.backend} backend cannot export its KV cache")  # type: ignore[attr-defined]

    def import_kv(self, state: Any, n: int, slot: int = 0) -> None:
        raise Unsupported(f"the {self.backend} backend cannot import a KV cache")  # type: ignore[attr-defined]

    def kv_resumable(self, start: int, slot: int = 0) -> bool:
        return True

    def wait_compiled(self, timeout: float | None = None) -> str | None:
        return self.decode_mode

    def chat_stream(self, messages: list[dict], params: Any, *,
                    request_id: str | None = None) -> AsyncIterator[ChatChunk]:
        raise Unsupported(f"the {self.backend} backend takes token ids, not chat messages")  # type: ignore[attr-defined]


@runtime_checkable
class Backend(Protocol):
    name: str

    def available(self) -> bool: ...

    def unavailable_reason(self) -> str | None:
        """Why this backend cannot run here; None when it can."""

    def load(self, model_dir: Path, *, dtype: str = "auto", slots: int | None = None) -> LoadedModel:
        """Load a model folder. `slots`: KV slots for batching (None: the backend's
        default; backends without slots load one and ignore it). A backend for a remote
        server is built for one model and ignores `model_dir`."""
