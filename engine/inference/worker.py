"""One inference thread per loaded model.

The thread owns the model and its KV cache; nothing else touches them. Requests arrive on
a priority queue; events go back through a sink the caller supplies (the engine wraps
`loop.call_soon_threadsafe`), so the asyncio side — and the Qt loop above it — never waits
on the model.
"""

from __future__ import annotations

import gc
import itertools
import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

from ..events import Failed, FailureKind, Finished, FinishReason, PrefillProgress
from ..tokenize import Tokenizer
from .backend import Backend, LoadedModel
from .batch import BatchScheduler
from .generate import KVSession, common_prefix
from .output import SequenceOutput
from .prefix_cache import MIN_GAIN, PrefixCache
from .priority import lower_this_thread
from .requests import STOP, GenerationRequest, WarmRequest
from .sampling import sampler_for
from .speculative import DEFAULT_DRAFTER, Speculator, speculative_tokens, speculator_for

log = logging.getLogger(__name__)

_STOP = STOP
# Prompt tokens run in one forward pass between checks for cancellation, for more urgent
# work and (batched) the other sequences' next tokens; each chunk also reports progress.
# Quantized weights are read (and dequantized into GEMM tiles) once per chunk, so small
# chunks are slow: on the starter model (Xeon @2.5GHz, one thread, CPU time) a 2,048-token
# prompt reads at 56 tokens/s in 32-token chunks, 97 in 64, 134 in 128, 156 in 256 and 182
# in 512; 512 would gain a sixth and double the wait for a stop (bench/prefill.py --sweep).
PREFILL_CHUNK = 256


class ModelWorker:
    """Loads a model on its own thread and runs requests on it: batched when the model
    has KV slots for several sequences (engine.inference.batch), else one at a time."""

    def __init__(self, name: str, backend: Backend, model_dir: Path, tokenizer: Tokenizer, *,
                 dtype: str = "auto", cache_budget_bytes: int = 512 * 2**20, slots: int | None = None,
                 prefill_chunk: int = PREFILL_CHUNK, drafter: str = DEFAULT_DRAFTER, draft_dir: Path | None = None):
        if prefill_chunk < 1:
            raise ValueError(f"prefill_chunk must be at least 1 token, got {prefill_chunk}")
        self.name = name
        self.prefill_chunk = prefill_chunk
        self.backend = backend
        self.model_dir = Path(model_dir)
        self.tokenizer = tokenizer
        self.dtype = dtype
        self.slots = slots  # KV slots for batching, where the backend has them; None: its default
        # speculative decoding (engine.inference.speculative): the drafter setting, the draft
        # model's folder where one is set, and what they gave once the model loaded
        self.drafter, self.draft_dir = drafter, draft_dir
        self.speculator: Speculator | None = None
        self.model: LoadedModel | None = None
        self.prefixes = PrefixCache(cache_budget_bytes)  # other conversations' KV states
        self._queue: queue.PriorityQueue = queue.PriorityQueue()
        self._order = itertools.count()
        self._loaded: Future = Future()
        self._thread = threading.Thread(target=self._run, name=f"wren-infer-{name}", daemon=True)
        self._thread.start()

    @property
    def loaded(self) -> Future:
        """Resolves to the LoadedModel, or to the loading error."""
        return self._loaded

    @property
    def running_model(self) -> LoadedModel:
        """The loaded model, for code on the inference thread after loading succeeded."""
        if self.model is None:
            raise RuntimeError(f"no model is loaded from {self.model_dir}")
        return self.model

    def submit(self, request: GenerationRequest | WarmRequest) -> None:
        self._queue.put((request.priority, next(self._order), request))

    def close(self, timeout: float = 10.0) -> None:
        self._queue.put((-1, next(self._order), _STOP))
        self._thread.join(timeout)

    def _run(self) -> None:
        # Running from here on: a waiter that gives up (a cancelled load awaits this future
        # through asyncio.wrap_future, which cancels it too) no longer cancels it, so the
        # result below always has a future to go to (set on a cancelled one, it raised here)
        if not self._loaded.set_running_or_notify_cancel():
            return
        # below the window's and the event loop's threads (priority.py says why), before
        # the model's first parallel op creates this thread's pool of torch threads
        lower_this_thread()
        try:
            # `slots` is part of Backend.load; left out when not asked for (None), which
            # loads the backend's default.
            options: dict = {"dtype": self.dtype}
            if self.slots is not None:
                options["slots"] = self.slots
            self.model = self.backend.load(self.model_dir, **options)
            if self.model.takes_messages:
                raise TypeError(f"the {self.model.backend} model takes chat messages; it runs in a RemoteWorker")
            session = KVSession(self.model)
            self.speculator = self._speculator()
        except BaseException as exc:  # reported through the future, never lost
            self._loaded.set_exception(exc)
            return
        # With torch loaded a full garbage collection scans about a million objects and
        # holds the GIL for ~0.3 s, a visible freeze of the window mid-answer. Whatever
        # exists once the model is loaded lives as long as it does: keep it out of
        # collections until the model goes.
        gc.freeze()
        self._loaded.set_result(self.model)
        try:
            if self.model.batched_decode and self.model.slots > 1:
                BatchScheduler(self, session).run()
            else:
                self._run_serial(session)
        finally:
            if self.speculator is not None:
                self.speculator.close()
            self.model.close()
            gc.unfreeze()  # the model's objects are collectable again, cycles included

    def _speculator(self) -> Speculator | None:
        """The drafter the settings ask for; prompt lookup if the draft model fails to load."""
        model = self.running_model
        if not model.verifies:
            return None
        draft_dir = self.draft_dir

        def load_draft() -> LoadedModel:
            assert draft_dir is not None
            return self.backend.load(draft_dir, dtype=self.dtype, slots=1)

        try:
            return speculator_for(self.drafter, load_draft if draft_dir is not None else None, model)
        except Exception:
            log.exception("the draft model did not load: drafting by prompt lookup")
            return speculator_for("auto" if self.drafter == "auto" else "prompt-lookup", None, model)

    def _run_serial(self, session: KVSession) -> None:
        """One request at a time, for backends without batched decoding."""
        while True:
            _, _, request = self.next_request()
            if request is _STOP:
                break
            if isinstance(request, WarmRequest):
                try:
                    self.warm(session, request)
                except Exception:
                    log.exception("pre-warming failed")
                    session = KVSession(self.running_model)
                finally:
                    request.done.set()
                continue
            if request.cancel.is_set():
                request.sink(Finished(FinishReason.CANCELLED))
                continue
            try:
                self._generate(session, request)
            except Exception as exc:
                log.exception("generation failed")
                session = KVSession(self.running_model)  # the cache may be half-written
                request.sink(Failed(f"generation failed: {exc}", FailureKind.MODEL))
                request.sink(Finished(FinishReason.ERROR))

    def next_request(self, block: bool = True) -> tuple:
        """The queue's most urgent item; before sleeping on an empty queue the model rests
        (a CPU model gives its turn on the cores to the user's other models)."""
        if block and self._queue.empty():
            self.running_model.rest()
        return self._queue.get(block=block)

    def more_urgent_waiting(self, priority: int, *, ignoring_stop: bool = False) -> bool:
        """Whether a request more urgent than `priority` waits (`ignoring_stop`: not the
        close() marker, which the batch scheduler handles at its own pace)."""
        waiting = self._queue.queue  # a heap: its first item is the most urgent
        if not waiting or waiting[0][0] >= priority:
            return False
        return not (ignoring_stop and waiting[0][2] is STOP)

    def switch_prefix(self, session: KVSession, ids: list[int]) -> None:
        """Before `ids` overwrite much of the live cache, save it (another conversation's
        prompt, likely asked again); if a saved state shares clearly more with `ids`,
        restore it instead of recomputing."""
        model = self.running_model
        if not model.kv_export or not ids:
            return
        live = common_prefix(session.cached_ids, ids)
        saved, shared = self.prefixes.best(ids)
        restore = saved is not None and shared >= live + MIN_GAIN
        if len(session) - live >= MIN_GAIN:
            self.save_live(session)
        if saved is not None and restore:
            model.import_kv(saved.state, len(saved.ids))
            session.adopt(saved.ids)
            self.prefixes.discard(saved.ids)  # live now; saved again when it is left

    def save_live(self, session: KVSession) -> None:
        """Keep slot 0's cached prompt in the prefix cache before something overwrites it."""
        model = self.running_model
        if model.kv_export and len(session) >= MIN_GAIN:
            state, nbytes = model.export_kv(len(session))
            self.prefixes.put(session.cached_ids, state, nbytes)

    def _prefill_chunks(self, session: KVSession, ids: list[int], cancel: threading.Event,
                        priority: int | None = None,
                        progress: Callable[[int], object] | None = None) -> bool:
        """Bring `ids` into the cache a chunk at a time; False if cancelled or pre-empted
        (what was prefilled so far stays cached and is reused). `progress(done)` is called
        before each chunk with the ids already cached."""
        self.switch_prefix(session, ids)
        done = min(common_prefix(session.cached_ids, ids), len(ids))
        while done < len(ids):
            if cancel.is_set() or (priority is not None and self.more_urgent_waiting(priority)):
                return False
            if progress is not None:
                progress(done)
            done = min(done + self.prefill_chunk, len(ids))
            session.prefill(ids[:done], final=done >= len(ids))  # only the last chunk's tail stays exact
        return True

    def announces_progress(self, prompt_tokens: int, cached: int) -> bool:
        """Whether reading this prompt reports PrefillProgress: more than one chunk to run."""
        return prompt_tokens - cached > self.prefill_chunk

    def warm(self, session: KVSession, request: WarmRequest) -> None:
        self.running_model.serving(request.cancel.is_set)
        finished = self._prefill_chunks(session, request.prompt_ids, request.cancel, request.priority)
        request.prefilled = common_prefix(session.cached_ids, request.prompt_ids)
        if not finished and not request.cancel.is_set():
            request.done.clear()
            self.submit(request)  # pre-empted: carry on after the urgent work

    def _generate(self, session: KVSession, request: GenerationRequest) -> None:
        self.running_model.serving(request.cancel.is_set)
        output = SequenceOutput(self.tokenizer, request)
        self.switch_prefix(session, request.prompt_ids)
        cached_before = min(common_prefix(session.cached_ids, request.prompt_ids), len(request.prompt_ids) - 1)
        total = len(request.prompt_ids)
        announce = self.announces_progress(total, cached_before)
        # Prefill all but the last prompt token in chunks, so a stop during a long prefill
        # lands within a chunk; generate_tokens then reuses it and runs the last one.
        progress = (lambda done: request.sink(PrefillProgress(done, total))) if announce else None
        if not self._prefill_chunks(session, request.prompt_ids[:-1], request.cancel, progress=progress):
            output.finish(FinishReason.CANCELLED, cached_before)
            return
        if announce:  # only the last token is left: it runs with the first sampled one
            request.sink(PrefillProgress(total, total))
        reason = FinishReason.LENGTH  # unless a stop comes first: the context window filled up
        sampler = sampler_for(request, self.tokenizer, self.model_dir)
        for token in speculative_tokens(session, request.prompt_ids, sampler, self.speculator):
            stop = output.feed(token, sampler.last)
            if stop is not None:
                reason = stop
                break
        output.finish(reason, cached_before)

