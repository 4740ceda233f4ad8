"""What a model worker is asked to do: an answer (`GenerationRequest`), a prompt prefilled
ahead of time (`WarmRequest`), and what it reports back (`WorkerEvent`). Plain records the
worker, its batch scheduler and the output stage share."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..events import Delta, Failed, Finished, PrefillProgress, Usage
from .constrain import Constraint
from .sampling import SamplingParams

STOP = object()  # queued last by close(): the worker's thread ends there

WorkerEvent = PrefillProgress | Delta | Usage | Finished | Failed


@dataclass
class GenerationRequest:
    prompt_ids: list[int]
    params: SamplingParams
    sink: Callable[[WorkerEvent], object]  # called on the inference thread; what it returns is ignored
    priority: int = 0  # lower runs first: the visible answer before a title
    submitted_at: float = field(default_factory=time.perf_counter)
    cancel: threading.Event = field(default_factory=threading.Event)
    # The assembled chat the ids were encoded from: what a model that takes messages
    # (a remote server, LoadedModel.takes_messages) is sent instead of the ids.
    messages: list[dict] | None = None
    # Constrained decoding (engine.inference.constrain): only tokens that keep the answer
    # valid for a JSON schema or a tool call are sampled. None: free text.
    constraint: Constraint | None = None


@dataclass
class WarmRequest:
    """Prefill a prompt into the KV cache ahead of time (a draft being typed); any real
    request runs first, and a newer draft cancels this one."""

    prompt_ids: list[int]
    priority: int = 10
    cancel: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)  # set when it ends, either way
    prefilled: int = 0  # prompt tokens in the cache when it ended
