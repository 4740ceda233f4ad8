"""Continuous batching: a model worker's concurrent requests share decode steps.

It runs for a model whose `batched_decode` is set (more than one KV slot): `slots`,
`prefill`/`decode` with `slot=`, `decode_batch`, `export_kv`/`import_kv` (pausing), all
declared by engine.inference.backend.LoadedModel.

Each admitted request owns one KV-cache slot of the model (slot 0 holds the main
conversation, whose prefix the worker's KVSession and prefix cache reuse across turns).
Each pass of the loop admits waiting requests into free slots, by priority, then runs one
prefill chunk for every sequence still reading its prompt, then samples one token for
every sequence and decodes all of them in a single batched step. A sequence ends (stop,
length, cancel, error) on its own; the others never notice.

Priorities: when every slot is busy and a more urgent request waits (the visible answer
behind a title), the least urgent running sequence is paused: its KV-cache rows are copied
out, its slot goes to the urgent request, and it resumes from exactly where it was (rows
copied back, same sampler and output state) as soon as a slot frees, ahead of waiting
requests no more urgent than it. Its text is unchanged; it only arrives later.
"""

from __future__ import annotations

import logging
import queue
import time
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..events import Failed, FailureKind, Finished, FinishReason, PrefillProgress, Usage
from ..tokenize import Tokenizer
from .generate import KVSession, common_prefix
from .output import SequenceOutput
from .requests import STOP, GenerationRequest, WarmRequest
from .sampling import sampler_for

if TYPE_CHECKING:
    from .backend import LoadedModel
    from .speculative import Speculator

log = logging.getLogger(__name__)


class _Sequence:
    def __init__(self, request: GenerationRequest, session: KVSession, cached: int,
                 tokenizer: Tokenizer, announce: bool = False, model_dir=None) -> None:
        self.request = request
        self.session = session
        self.cached = cached  # prompt tokens reused from the cache, for Usage
        self.announce = announce  # a long prompt: PrefillProgress before each chunk
        self.output = SequenceOutput(tokenizer, request)
        # Its constraint (if any) and the weights file a damaged-logits error names.
        self.sampler = sampler_for(request, tokenizer, model_dir)
        self.logits: np.ndarray | None = None  # None while the prompt is being read
        self.token: int | None = None  # sampled, waiting for the next decode step
        self.history = np.empty(0, dtype=np.int64)
        self.n = 0
        self.saved: tuple | None = None  # (KV rows, cached ids) while paused
        # A speculative step's outcome (engine.inference.speculative): drafted ids kept
        # (cached already) and the id after them, fed out by the next sample step.
        self.chosen: tuple[list[int], int] | None = None
        self.speculating = False  # the speculator has begun this answer

    @property
    def slot(self) -> int:
        return self.session.slot

    @property
    def generating(self) -> bool:
        """Past its prompt, with the next token's logits or a speculative step's choice."""
        return self.logits is not None or self.chosen is not None


class SchedulerHost(Protocol):
    """What the batch scheduler uses of its `ModelWorker` (engine/inference/worker.py)."""

    @property
    def running_model(self) -> LoadedModel: ...
    @property
    def tokenizer(self) -> Tokenizer: ...
    @property
    def model_dir(self) -> Any: ...
    @property
    def prefill_chunk(self) -> int: ...

    def submit(self, request: Any) -> None: ...
    def next_request(self, block: bool = True) -> tuple: ...
    def more_urgent_waiting(self, priority: int, *, ignoring_stop: bool = False) -> bool: ...
    def save_live(self, session: KVSession) -> None: ...
    def announces_progress(self, prompt_tokens: int, cached: int) -> bool: ...
    def warm(self, session: KVSession, request: WarmRequest) -> None: ...
    def switch_prefix(self, session: KVSession, ids: list[int]) -> None: ...
    @property
    def speculator(self) -> Speculator | None: ...


class BatchScheduler:
    """Runs a ModelWorker's queue on its inference thread with shared decode steps."""

    def __init__(self, worker: SchedulerHost, main: KVSession) -> None:
        self.worker = worker
        self.model = worker.running_model
        self.tokenizer = worker.tokenizer
        self.sessions = [main] + [KVSession(self.model, slot) for slot in range(1, self.model.slots)]
        self.active: list[_Sequence] = []
        self.paused: list[_Sequence] = []  # pre-empted, most urgent first
        self.parked: list = []  # pre-warm requests waiting for the model to go idle
        self.stopping = False

    def run(self) -> None:
        self.model.serving(self._all_cancelled)
        while True:
            self._retire_cancelled()
            self._admit()
            if self.stopping and not self.active and not self.paused:
                for request in self.parked:  # nobody will run them; unblock their waiters
                    request.done.set()
                return
            self._prefill_step()
            self._sample_step()
            self._decode_step()
            if not self.active and self.parked:
                for request in self.parked:
                    self.worker.submit(request)
                self.parked = []

    def _all_cancelled(self) -> bool:
        """Every answer the next step serves was stopped (a pre-warm alone waits its turn)."""
        return bool(self.active) and all(s.request.cancel.is_set() for s in self.active)

    # -- admission ---------------------------------------------------------------------

    def _retire_cancelled(self) -> None:
        # Before admitting: a stopped answer must give its slot (and the conversation's
        # cached prefix in slot 0) to the request that follows it at once.
        for seq in [s for s in self.active if s.request.cancel.is_set()]:
            self.active.remove(seq)
            seq.output.finish(FinishReason.CANCELLED, seq.cached)
        for seq in [s for s in self.paused if s.request.cancel.is_set()]:
            self.paused.remove(seq)
            seq.output.finish(FinishReason.CANCELLED, seq.cached)

    def _free_slots(self) -> list[int]:
        used = {seq.slot for seq in self.active}
        return [slot for slot in range(len(self.sessions)) if slot not in used]

    def _admit(self) -> None:

        while True:
            if not self._free_slots():
                if self.stopping or not self._preempt_for_waiting():
                    return
            if self.paused and not self._waiting_more_urgent(self.paused[0].request.priority):
                self._resume(self.paused.pop(0))
                continue
            if self.stopping:
                return
            try:
                # Idle: sleep until work comes. Busy: only take what is already waiting.
                _, _, request = self.worker.next_request(block=not self.active and not self.paused)
            except queue.Empty:
                return
            if request is STOP:
                self.stopping = True  # finish what runs, admit nothing more
            elif isinstance(request, WarmRequest):
                self._warm(request)
            elif request.cancel.is_set():
                request.sink(Finished(FinishReason.CANCELLED))
            else:
                self._start(request)

    def _waiting_more_urgent(self, priority: int) -> bool:
        """A request more urgent than `priority` waits; the worker's stop does not count
        (it lets running sequences finish, so nothing is paused for it)."""

        return self.worker.more_urgent_waiting(priority, ignoring_stop=True)

    def _preempt_for_waiting(self) -> bool:
        """Pause the least urgent running sequence if a more urgent request waits; True if
        a slot was freed. Pausing copies the KV rows out: only where the model has kv_export."""
        if not self.active or not self.model.kv_export:
            return False
        # Least urgent first; among equals the latest started, which has done least.
        _, victim = max(enumerate(self.active), key=lambda pair: (pair[1].request.priority, pair[0]))
        if not self._waiting_more_urgent(victim.request.priority):
            return False
        self._pause(victim)
        return True

    def _pause(self, seq: _Sequence) -> None:
        self.active.remove(seq)
        session = seq.session
        if seq.generating:  # keep its cache rows to resume exactly
            state, _ = self.model.export_kv(len(session), session.slot)
            seq.saved = (state, session.cached_ids)
        # Else it was still reading its prompt: it starts that again wherever it resumes.
        session.reset()  # the slot is about to be overwritten
        self.paused.append(seq)
        self.paused.sort(key=lambda s: s.request.priority)  # stable: earlier pauses first
        log.debug("paused a priority-%d sequence for more urgent work", seq.request.priority)

    def _resume(self, seq: _Sequence) -> None:
        session = self.sessions[self._pick_slot(seq.request)]
        try:
            if seq.saved is not None:
                if session.slot == 0:
                    self.worker.save_live(session)  # the conversation's prefix, for later
                state, ids = seq.saved
                self.model.import_kv(state, len(ids), session.slot)
                session.adopt(ids)
                seq.saved = None
            else:
                seq.cached = min(common_prefix(session.cached_ids, seq.request.prompt_ids),
                                 len(seq.request.prompt_ids) - 1)
        except Exception as exc:
            session.reset()
            seq.session = session
            self._drop(seq, exc)
            return
        seq.session = session
        self.active.append(seq)

    def _warm(self, request) -> None:
        # A warm-up fills slot 0 ahead of the next turn; it must not overwrite a running
        # answer there, so it waits until nothing runs.
        if self.active:
            self.parked.append(request)
            return
        try:
            self.worker.warm(self.sessions[0], request)
        except Exception:
            log.exception("pre-warming failed")
            self.sessions[0].reset()
        finally:
            request.done.set()

    def _pick_slot(self, request: GenerationRequest) -> int:
        free = self._free_slots()
        # The visible answer (priority 0) continues the conversation held in slot 0; side
        # work (titles, summaries) goes elsewhere so it does not evict that prefix.
        if 0 in free and (request.priority <= 0 or free == [0]):
            return 0
        return next(slot for slot in free if slot != 0)

    def _start(self, request: GenerationRequest) -> None:
        session = self.sessions[self._pick_slot(request)]
        prompt = request.prompt_ids
        try:
            if session.slot == 0:
                self.worker.switch_prefix(session, prompt)
        except Exception as exc:
            self._fail(request, session, exc)
            return
        cached = min(common_prefix(session.cached_ids, prompt), len(prompt) - 1)
        announce = self.worker.announces_progress(len(prompt), cached)
        self.active.append(_Sequence(request, session, cached, self.tokenizer, announce,
                                     model_dir=self.worker.model_dir))

    # -- one pass ----------------------------------------------------------------------

    def _prefill_step(self) -> None:
        """One chunk of prompt for each sequence still reading it: a long prompt delays
        the others' next token by a chunk, not by the whole prompt."""
        chunk = self.worker.prefill_chunk
        for seq in [s for s in self.active if not s.generating]:
            request, session = seq.request, seq.session
            prompt = request.prompt_ids
            # All but the last token in chunks; the last runs alone and gives the logits,
            # exactly as a request running by itself does.
            target = prompt[:-1]
            done = min(common_prefix(session.cached_ids, target), len(target))
            try:
                if done < len(target):
                    if request.cancel.is_set():  # the slot is freed; its cache stays reusable
                        waited = time.perf_counter() - request.submitted_at
                        request.sink(Usage(len(prompt), 0, waited, 0.0, seq.cached))
                        request.sink(Finished(FinishReason.CANCELLED))
                        self.active.remove(seq)
                        continue
                    if seq.announce:
                        request.sink(PrefillProgress(done, len(prompt)))
                    # Only the chunk that ends the target holds the rows the first token
                    # attends to most closely; earlier chunks' last rows pick no token.
                    session.prefill(target[: done + chunk], final=done + chunk >= len(target))
                    continue
                seq.logits, _ = session.prefill(prompt)
                if seq.announce:
                    request.sink(PrefillProgress(len(prompt), len(prompt)))
            except Exception as exc:
                self._drop(seq, exc)
                continue
            seq.history = np.empty(session.context_length + 1, dtype=np.int64)
            seq.history[: len(prompt)] = prompt
            seq.n = len(prompt)

    def _sample_step(self) -> None:
        for seq in list(self.active):
            if not seq.generating:
                continue
            try:
                if seq.logits is not None:
                    tokens = [seq.sampler(seq.logits, seq.history[: seq.n])]
                else:  # a speculative step chose them
                    assert seq.chosen is not None
                    tokens = [*seq.chosen[0], seq.chosen[1]]
                seq.logits, seq.chosen = None, None
                reason = self._emit(seq, tokens)
                if reason is not None:
                    self.active.remove(seq)
                    seq.output.finish(reason, seq.cached)
                else:
                    seq.token = tokens[-1]
            except Exception as exc:
                self._drop(seq, exc)

    def _emit(self, seq: _Sequence, tokens: list[int]) -> FinishReason | None:
        """Feed chosen tokens to the answer; why it ends, if one of them ends it."""
        for token in tokens:
            seq.history[seq.n] = token
            seq.n += 1
            reason = seq.output.feed(token, seq.sampler.last)
            if reason is None and len(seq.session) >= seq.session.context_length:
                reason = FinishReason.LENGTH  # the context window filled up
            if reason is not None:
                return reason
        return None

    def _decode_step(self) -> None:
        pending = [(s, s.token) for s in self.active if s.token is not None]
        ready = [s for s, _ in pending]
        if not ready:
            return
        try:
            if len(pending) == 1:  # one sequence alone keeps the compiled step, in any slot
                self._decode_alone(*pending[0])
            else:
                logits = self.model.decode_batch(
                    [t for _, t in pending], [len(s.session) for s in ready], [s.slot for s in ready])
                for (seq, token), row in zip(pending, logits):
                    seq.session.appended(token)
                    seq.logits = row
        except Exception as exc:
            for seq in ready:
                self._drop(seq, exc)
            return
        for seq in ready:
            seq.token = None

    def _decode_alone(self, seq: _Sequence, token: int) -> None:
        """One sequence's step: speculative where its speculator drafts, else one token."""
        speculator = self.worker.speculator
        if speculator is not None and speculator.serves(self.model, seq.sampler):
            if not seq.speculating:
                seq.speculating = True
                speculator.begin(seq.request.prompt_ids)
            seq.chosen = speculator.step(seq.session, seq.sampler, seq.history, seq.n)
            if seq.chosen is not None:
                return
            started = time.perf_counter()
            seq.logits = seq.session.decode(token)
            speculator.decoded(time.perf_counter() - started)
            return
        seq.logits = seq.session.decode(token)

    # -- failures ----------------------------------------------------------------------

    def _drop(self, seq: _Sequence, exc: Exception) -> None:
        if seq in self.active:
            self.active.remove(seq)
        self._fail(seq.request, seq.session, exc)

    def _fail(self, request: GenerationRequest, session: KVSession, exc: Exception) -> None:
        log.error("generation failed", exc_info=exc)
        session.reset()  # the slot's cache may be half-written
        request.sink(Failed(f"generation failed: {exc}", FailureKind.MODEL))
        request.sink(Finished(FinishReason.ERROR))
