"""The CPU turns between Wren's models (engine/inference/cpu_share.py), across real
processes: one computes at a time, a waiting one gets the turn within a slice, a dead
holder's turn is free at once, and nothing shares where the folder is not private.
(Speed is measured by bench/two_engines.py, not here.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from wren.engine.inference.cpu_share import CpuShare, runtime_folder

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="flock turns are POSIX only")

ROOT = Path(__file__).resolve().parents[3]

# A model's stand-in: steps of busy work on the turn, each step's start and end written down.
WORKER = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from wren.engine.inference.cpu_share import CpuShare

    folder, seconds, step_s, out = Path(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    share = CpuShare(folder, slice_seconds=0.05)
    print("ready", flush=True)
    sys.stdin.readline()
    steps = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with share.step():
            a = time.monotonic()
            while time.monotonic() - a < step_s:
                pass
            steps.append((a, time.monotonic()))
    share.rest()
    Path(out).write_text(json.dumps(steps))
""")


def _workers(tmp_path: Path, n: int, seconds: float = 1.5, step_s: float = 0.005) -> list[list[tuple[float, float]]]:
    procs = []
    for i in range(n):
        proc = subprocess.Popen([sys.executable, "-c", WORKER, str(tmp_path), str(seconds), str(step_s),
                                 str(tmp_path / f"steps{i}.json")],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
        assert proc.stdout.readline().strip() == "ready"
        procs.append(proc)
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    for proc in procs:
        assert proc.wait(60) == 0
    return [json.loads((tmp_path / f"steps{i}.json").read_text()) for i in range(n)]


@pytest.mark.serial  # a wall-clock bound: runs with the machine to itself (make test)
def test_two_processes_never_compute_at_once_and_both_get_turns(tmp_path):
    first, second = _workers(tmp_path, 2)
    # No step of one overlaps a step of the other (monotonic clocks are system-wide).
    merged = sorted([(a, b, 0) for a, b in first] + [(a, b, 1) for a, b in second])
    for (a1, b1, w1), (a2, b2, w2) in zip(merged, merged[1:]):
        if w1 != w2:
            assert a2 >= b1, f"steps overlap: {(a1, b1)} and {(a2, b2)}"
    # Both computed, each for a fair part of the time (slices of 50 ms alternate).
    total = len(first) + len(second)
    assert min(len(first), len(second)) >= 0.3 * total, (len(first), len(second))
    # And in alternating slices, not one after the other.
    switches = sum(1 for x, y in zip(merged, merged[1:]) if x[2] != y[2])
    assert switches >= 10, switches


@pytest.mark.serial  # a wall-clock bound: runs with the machine to itself (make test)
def test_an_idle_holder_gives_the_turn_back_by_itself(tmp_path):
    one, other = CpuShare(tmp_path), CpuShare(tmp_path, wait_limit=5)
    try:
        with one.step():
            pass
        assert one.holding  # nobody waited: it keeps the turn between its steps
        started = time.monotonic()
        with other.step():  # `one` never rests: its idle timer gives the turn back
            pass
        assert time.monotonic() - started < 1.0
        assert not one.holding and other.holding
        other.rest()
        assert not other.holding
    finally:
        one.close()
        other.close()


def _holder(tmp_path: Path) -> subprocess.Popen:
    """A process that takes the turn and stays inside its step."""
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent("""
            import sys, time
            from pathlib import Path
            from wren.engine.inference.cpu_share import CpuShare
            share = CpuShare(Path(sys.argv[1]))
            with share.step():
                print("holding", flush=True)
                time.sleep(60)
        """), str(tmp_path)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert holder.stdout.readline().strip() == "holding"
    return holder


@pytest.mark.serial  # a wall-clock bound: runs with the machine to itself (make test)
def test_a_stuck_holder_slows_a_waiter_once_never_stops_it(tmp_path):
    holder = _holder(tmp_path)
    try:
        share = CpuShare(tmp_path, wait_limit=0.5)
        started = time.monotonic()
        with share.step():
            pass
        assert 0.5 <= time.monotonic() - started < 3.0  # waited out the limit, then computed
        share.rest()
        started = time.monotonic()
        for _ in range(5):  # and does not wait the limit out again at every step
            with share.step():
                pass
            share.rest()
        assert time.monotonic() - started < 0.5
        share.close()
    finally:
        holder.kill()
        holder.wait(10)


@pytest.mark.serial  # a wall-clock bound: runs with the machine to itself (make test)
def test_a_holder_that_dies_frees_the_turn(tmp_path):
    holder = _holder(tmp_path)
    try:
        share = CpuShare(tmp_path, wait_limit=30)
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(10)
        started = time.monotonic()
        with share.step():
            pass
        assert time.monotonic() - started < 1.0
        share.close()
    finally:
        if holder.poll() is None:
            holder.kill()


def test_turned_off_by_the_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv("WREN_CPU_SHARE", "0")
    assert CpuShare.for_this_user() is None
    monkeypatch.setenv("WREN_CPU_SHARE", "1")
    share = CpuShare.for_this_user()
    assert share is not None
    share.close()
    assert (tmp_path / "wren").stat().st_mode & 0o777 == 0o700


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to make another user's folder")
def test_no_turns_in_a_folder_another_user_owns(monkeypatch, tmp_path):
    import pwd

    nobody = pwd.getpwnam("nobody")
    (tmp_path / "wren").mkdir(mode=0o777)
    os.chmod(tmp_path / "wren", 0o777)
    os.chown(tmp_path / "wren", nobody.pw_uid, nobody.pw_gid)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert runtime_folder() is None
    assert CpuShare.for_this_user() is None
    assert (tmp_path / "wren").stat().st_mode & 0o777 == 0o777  # not Wren's to change


@pytest.mark.serial  # a wall-clock bound: runs with the machine to itself (make test)
def test_a_cpu_model_takes_turns_and_rests_when_its_worker_is_idle(tmp_path, monkeypatch, tiny_model_dir):
    """The torch CPU backend's model computes on the turn; its worker gives it back when
    its queue is empty, so another engine is never kept waiting by an idle one."""
    import queue

    from wren.engine.events import Finished
    from wren.engine.inference.backends.torch import TorchBackend
    from wren.engine.inference.sampling import SamplingParams
    from wren.engine.inference.worker import GenerationRequest, ModelWorker
    from wren.engine.tokenize import Tokenizer

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv("WREN_TORCH_COMPILE", "off")
    monkeypatch.delenv("WREN_CPU_SHARE", raising=False)
    worker = ModelWorker("tiny", TorchBackend("cpu"), tiny_model_dir, Tokenizer.from_dir(tiny_model_dir))
    try:
        model = worker.loaded.result(120)
        assert model.share is not None
        events: queue.Queue = queue.Queue()
        worker.submit(GenerationRequest([1, 2, 3], SamplingParams(temperature=0.0, max_tokens=5), events.put))
        while not isinstance(events.get(timeout=60), Finished):
            pass
        deadline = time.monotonic() + 10
        while model.share.holding and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not model.share.holding  # idle: the turn is back
        assert model.share.turns_taken >= 1
        other = CpuShare(tmp_path / "wren", wait_limit=5)
        started = time.monotonic()
        with other.step():
            pass
        assert time.monotonic() - started < 1.0
        other.close()
    finally:
        worker.close()


@pytest.mark.serial  # a wall-clock bound: runs with the machine to itself (make test)
def test_a_stopped_answer_does_not_wait_for_another_models_turn(tmp_path, monkeypatch, tiny_model_dir):
    """Stop (or Ctrl+C) while the model waits for the cores: the wait ends at once, the
    answer finishes as cancelled, instead of after the holder's step or the wait limit."""
    import queue

    from wren.engine.events import Finished, FinishReason
    from wren.engine.inference.backends.torch import TorchBackend
    from wren.engine.inference.sampling import SamplingParams
    from wren.engine.inference.worker import GenerationRequest, ModelWorker
    from wren.engine.tokenize import Tokenizer

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv("WREN_TORCH_COMPILE", "off")
    monkeypatch.delenv("WREN_CPU_SHARE", raising=False)
    worker = ModelWorker("tiny", TorchBackend("cpu"), tiny_model_dir, Tokenizer.from_dir(tiny_model_dir))
    holder = None
    try:
        worker.loaded.result(120)
        holder = _holder(tmp_path / "wren")  # another model, inside a long step
        events: queue.Queue = queue.Queue()
        request = GenerationRequest([1, 2, 3], SamplingParams(temperature=0.0, max_tokens=50), events.put)
        worker.submit(request)
        time.sleep(0.5)
        stopped = time.monotonic()
        request.cancel.set()
        while not isinstance(event := events.get(timeout=30), Finished):
            pass
        assert event.reason is FinishReason.CANCELLED
        assert time.monotonic() - stopped < 2.0  # the wait limit is 10 s
    finally:
        if holder is not None:
            holder.kill()
            holder.wait(10)
        worker.close()
