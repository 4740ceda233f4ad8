"""loop_sink: events put from other threads reach their queues on the loop, each queue in
order, with one wake-up of the loop for a burst instead of one per event."""

from __future__ import annotations

import asyncio
import sys
import threading
import time

import pytest

from wren.engine.inference import handoff
from wren.engine.inference.handoff import loop_sink


def test_events_from_threads_arrive_in_order_per_queue():
    asyncio.run(_in_order())


async def _in_order():
    queues = [asyncio.Queue() for _ in range(4)]
    sinks = [loop_sink(q) for q in queues]
    per_thread = 2000

    def produce(k: int) -> None:  # thread k writes to queue k and, interleaved, to queue (k+1) % 4
        for i in range(per_thread):
            sinks[k](("own", k, i))
            sinks[(k + 1) % 4](("next", k, i))

    threads = [threading.Thread(target=produce, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    got: list[list] = [[] for _ in queues]
    for k, q in enumerate(queues):
        while len(got[k]) < 2 * per_thread:
            got[k].append(await asyncio.wait_for(q.get(), 10))
    for t in threads:
        t.join()
    for k, items in enumerate(got):
        own = [i for kind, src, i in items if kind == "own"]
        assert own == list(range(per_thread)) and all(src == k for kind, src, _ in items if kind == "own")
        prev = (k - 1) % 4
        nxt = [i for kind, src, i in items if kind == "next"]
        assert nxt == list(range(per_thread)) and all(src == prev for kind, src, _ in items if kind == "next")


def test_a_burst_wakes_the_loop_once(monkeypatch):
    asyncio.run(_one_wakeup(monkeypatch))


async def _one_wakeup(monkeypatch):
    loop = asyncio.get_running_loop()
    wakeups = []
    real = loop.call_soon_threadsafe
    monkeypatch.setattr(loop, "call_soon_threadsafe", lambda *a, **k: (wakeups.append(a[0]), real(*a, **k))[1])
    queues = [asyncio.Queue() for _ in range(16)]
    sinks = [loop_sink(q) for q in queues]

    def step(done: threading.Event) -> None:  # one batched decoding step: a token for each of 16 answers
        for n, sink in enumerate(sinks):
            sink(f"token {n}")
        done.set()

    def busy_loop() -> None:
        # runs on the loop's thread, so the loop is busy (as with another answer's work)
        # for the whole burst: the first event's wake-up must carry all 16
        done = threading.Event()
        threading.Thread(target=step, args=(done,)).start()
        assert done.wait(10)

    for rounds in (1, 2):  # each step wakes the loop once more
        loop.call_soon(busy_loop)
        assert [await q.get() for q in queues] == [f"token {n}" for n in range(16)]
        assert len([w for w in wakeups if getattr(w, "__name__", "") == "_deliver"]) == rounds


def test_a_closed_loop_raises_and_keeps_nothing():
    loop = asyncio.new_event_loop()
    queue: asyncio.Queue = asyncio.Queue()
    sink = loop_sink(queue, loop)
    loop.close()
    with pytest.raises(RuntimeError):
        sink("late")
    assert not handoff._inboxes[loop]._items and not handoff._inboxes[loop]._scheduled


def test_a_loop_closed_with_a_wake_up_pending_raises_and_keeps_nothing():
    loop = asyncio.new_event_loop()
    queue: asyncio.Queue = asyncio.Queue()
    sink = loop_sink(queue, loop)
    sink("scheduled, never delivered")  # the loop never runs again
    loop.close()
    with pytest.raises(RuntimeError):
        sink("late")
    inbox = handoff._inboxes[loop]
    assert not inbox._items and not inbox._scheduled


def _busy(seconds: float) -> None:
    """Pure Python work: holds the GIL, as a backend's sampler and detokenizer do."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_a_requests_first_event_reaches_the_loop_before_the_producer_goes_on(monkeypatch):
    """The first event is handed over: a producer that keeps the GIL after putting it must
    not keep the loop from taking it. With a 1 s switch interval a loop that was busy when
    the event came could otherwise run only once the producer's 0.3 s of Python is done."""
    monkeypatch.setattr(handoff, "HANDOVER_WAIT", 5.0)  # the wait ends on delivery, not on time
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1.0)
    try:
        asyncio.run(_handed_over())
    finally:
        sys.setswitchinterval(interval)


class _StampedQueue(asyncio.Queue):
    """Notes when each item is put into it on the loop: the moment the loop has taken the
    event (what the handover promises), not when the awaiting task is next scheduled, which
    on a loaded machine may come after the producer's next stretch of Python."""

    def __init__(self) -> None:
        super().__init__()
        self.put_at: list[float] = []

    def put_nowait(self, item) -> None:
        self.put_at.append(time.perf_counter())
        super().put_nowait(item)


async def _handed_over():
    queue = _StampedQueue()
    sink = loop_sink(queue)
    times: dict[str, float] = {}

    def produce() -> None:
        sink("first token")
        times["busy from"] = time.perf_counter()
        _busy(0.3)
        sink("second token")  # not waited on: the producer goes on at once

    thread = threading.Thread(target=produce)

    def busy_loop() -> None:  # the loop is busy (off the GIL) when the first token comes
        thread.start()
        time.sleep(0.05)

    asyncio.get_running_loop().call_soon(busy_loop)
    assert await asyncio.wait_for(queue.get(), 10) == "first token"
    assert await asyncio.wait_for(queue.get(), 10) == "second token"
    thread.join()
    # the first was in the queue before the producer went on to its 0.3 s of Python
    assert queue.put_at[0] <= times["busy from"]


def test_a_sink_called_on_its_own_loop_does_not_wait(monkeypatch):
    """From the loop's own thread there is nobody to hand over to: no wait."""
    monkeypatch.setattr(handoff, "HANDOVER_WAIT", 5.0)
    asyncio.run(_on_the_loop())


async def _on_the_loop():
    queue: asyncio.Queue = asyncio.Queue()
    sink = loop_sink(queue)
    started = time.perf_counter()
    sink("first")
    assert time.perf_counter() - started < 1.0
    assert await asyncio.wait_for(queue.get(), 10) == "first"
