"""bench/decode.py's per-run decode strain: CPU per token and involuntary switches are this
process's own, measured from getrusage (real work, no mocks)."""

from __future__ import annotations

import importlib.util
import resource
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_decode_script", REPO / "bench" / "decode.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_strain_counts_the_cpu_spent_since_the_snapshot_per_token():
    bench = _bench()
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.process_time()
    total = 0
    while time.process_time() - started < 0.2:  # 0.2 s of this process's CPU
        total += sum(range(1000))
    spent_ms = (time.process_time() - started) * 1e3
    strain = bench._decode_strain(before, tokens=10)
    # 10 "tokens" over >= 200 ms of CPU: >= 20 ms each (getrusage ticks are coarser than
    # process_time, so allow one 10 ms tick either way).
    assert spent_ms / 10 - 1 <= strain["cpu_ms_per_token"] <= spent_ms / 10 + 50
    assert isinstance(strain["involuntary_switches"], int) and strain["involuntary_switches"] >= 0
    assert strain["load_1min"] is None or strain["load_1min"] >= 0
    idle = bench._decode_strain(resource.getrusage(resource.RUSAGE_SELF), tokens=10)
    assert idle["cpu_ms_per_token"] < strain["cpu_ms_per_token"]


class _Recorder:
    """A KVSession stand-in that records what each prefill call was asked to read."""

    cached_ids: tuple[int, ...] = ()

    def __init__(self) -> None:
        self.calls: list[tuple[int, bool]] = []

    def prefill(self, ids, final: bool = True):
        self.calls.append((len(ids), final))


def test_the_long_prompt_is_read_as_the_worker_reads_it():
    """The long prompt and the history are timed the way the app reads them: the worker's
    chunks, and only the last chunk's tail exact (final). Timing every chunk as a final
    one made the 4,096-token figure pay for float32 tails the app never computes."""
    import threading
    from types import SimpleNamespace

    from wren.engine.inference.worker import PREFILL_CHUNK, ModelWorker

    bench = _bench()
    for n in (1, PREFILL_CHUNK, PREFILL_CHUNK + 1, 4096, 2055):
        ids = list(range(n))
        mine = _Recorder()
        bench.read_as_the_worker_does(mine, ids, PREFILL_CHUNK)
        worker = SimpleNamespace(prefill_chunk=PREFILL_CHUNK, switch_prefix=lambda session, ids: None,
                                 more_urgent_waiting=lambda priority: False)
        theirs = _Recorder()
        assert ModelWorker._prefill_chunks(worker, theirs, ids, threading.Event())
        assert mine.calls == theirs.calls
        assert mine.calls[-1] == (n, True) and all(not final for _, final in mine.calls[:-1])
        assert len(mine.calls) == -(-n // PREFILL_CHUNK)
