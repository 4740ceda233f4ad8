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
