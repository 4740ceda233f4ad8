"""Cycles are collected on the window's thread only: a cycle holding Qt objects collected
in an engine worker thread destroyed them there and froze the window (collector.py)."""

from __future__ import annotations

import gc
import threading


def _garbage_and_a_busy_thread(died_in: list[str]) -> str:
    class Cyclic:
        def __del__(self) -> None:
            died_in.append(threading.current_thread().name)

    garbage = Cyclic()
    garbage.itself = garbage
    del garbage

    def allocate() -> None:  # what a worker loading a model does: enough to start a collection
        kept = []
        for _ in range(20_000):
            pair: list = []
            pair.append(pair)
            kept.append(pair)

    worker = threading.Thread(target=allocate, name="engine-worker")
    worker.start()
    worker.join()
    return threading.current_thread().name


def test_the_window_thread_collects_and_worker_threads_do_not(qtbot):
    from wren.desktop.collector import WindowThreadCollector

    gc.collect()
    gc.enable()  # as a process starts (the suite's own collector has turned it off)
    collector = WindowThreadCollector(interval_ms=20)
    collector.start()
    died_in: list[str] = []
    try:
        assert not gc.isenabled()
        window_thread = _garbage_and_a_busy_thread(died_in)
        assert died_in == []  # the worker's allocations collected nothing
        qtbot.waitUntil(lambda: died_in != [], timeout=5000)
        assert died_in == [window_thread]
    finally:
        collector.stop()
    assert gc.isenabled()  # given back as it was
    gc.disable()


def test_without_it_a_worker_thread_collects_what_the_window_left():
    """The hazard the collector removes, shown with Python's own collector."""
    gc.collect()
    gc.enable()
    try:
        died_in: list[str] = []
        _garbage_and_a_busy_thread(died_in)
    finally:
        gc.disable()  # as the suite's own collector keeps it
    # Collected in whichever thread allocated past the threshold: the worker here (another of
    # the test process's threads could be the one), never this one, which allocated little.
    assert len(died_in) == 1 and died_in != [threading.current_thread().name], died_in


def test_the_generation_collected_follows_pythons_thresholds(monkeypatch):
    """The oldest generation past its threshold is collected; counts are faked, since other
    threads of the test process allocate at any time."""
    from wren.desktop import collector as module

    collected: list[int] = []
    monkeypatch.setattr(module.gc, "get_threshold", lambda: (700, 10, 10))
    monkeypatch.setattr(module.gc, "collect", lambda generation=2: collected.append(generation) or 0)
    due = module.WindowThreadCollector(interval_ms=1000)
    for counts, expected in [((5, 9, 9), None), ((700, 3, 0), 0), ((700, 10, 2), 1), ((900, 10, 10), 2),
                             ((0, 0, 10), 2)]:
        monkeypatch.setattr(module.gc, "get_count", lambda counts=counts: counts)
        collected.clear()
        assert due.collect_due() == expected, counts
        assert collected == ([] if expected is None else [expected]), counts
    monkeypatch.setattr(module.gc, "get_threshold", lambda: (0, 10, 10))  # Python's way of saying "never"
    monkeypatch.setattr(module.gc, "get_count", lambda: (10_000, 0, 0))
    assert due.collect_due() is None
