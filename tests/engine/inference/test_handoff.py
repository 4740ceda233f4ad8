"""loop_sink: events put from other threads reach their queues on the loop, each queue in
order, with one wake-up of the loop for a burst instead of one per event."""

from __future__ import annotations

import asyncio
import threading

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
