"""A model the engine switches away from is let go: nothing the engine keeps (the turn
planner's sampling defaults, the worker, its load future) holds the model object, and the
process's memory comes back after a switch to a ~290 MB model and back (bench/switch_memory.py)."""

from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import sys
import threading
import weakref
from pathlib import Path

import pytest

from wren.engine.events import Finished


def test_the_previous_model_is_collected_after_a_switch(make_engine):
    async def main():
        engine = make_engine("Hello from Wren.")
        try:
            conv = await engine.conversations.create()
            await engine.models.load()
            first = engine.loaded_worker
            events = [e async for e in engine.chat.send(conv.id, "hi")]  # the planner reads its defaults
            assert isinstance(events[-1], Finished)
            model_ref, worker_ref = weakref.ref(first.model), weakref.ref(first)
            del first
            engine.scripted.loaded.clear()  # the test backend's own record of what it loaded
            await engine.models.load()  # another load: the first model goes
            assert engine.loaded_worker is not None and engine.loaded_worker.model is not model_ref()
            gc.collect()
            return model_ref() is None, worker_ref() is None
        finally:
            await engine.close()

    model_gone, worker_gone = asyncio.run(main())
    assert model_gone, "the unloaded model object is still referenced"
    assert worker_gone, "the unloaded worker is still referenced"


def test_a_model_in_a_reference_cycle_is_not_pinned_by_the_next_loads_freeze(make_engine):
    """A torch model is full of cycles (modules point at their parents). The next worker
    freezes what exists once its model has loaded (gc.freeze): a cycle still uncollected
    then would outlive the switch for as long as the new model stays loaded."""
    async def main():
        engine = make_engine("Hello from Wren.")
        try:
            await engine.models.load()
            model = engine.loaded_worker.model
            model.itself = model  # a cycle, as a torch module tree has
            model_ref = weakref.ref(model)
            del model
            engine.scripted.loaded.clear()
            await engine.models.load()
            gc.collect()  # what the test can do: frozen objects are out of its reach
            return model_ref() is None
        finally:
            await engine.close()

    assert asyncio.run(main()), "the unloaded model's cycle was frozen with the next model"


GROWTH_BOUND_MIB = 64  # measured +10 to +21 MiB after switching back and deleting (2-core EPYC, torch-cpu)


@pytest.mark.slow  # a fresh process loads a ~290 MB model (~8 s)
def test_memory_comes_back_after_switching_to_a_big_model_and_back():
    bench = Path(__file__).resolve().parents[2] / "bench" / "switch_memory.py"
    out = subprocess.run([sys.executable, str(bench), "--layers", "5"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    rss = result["rss_mib"]
    assert rss["big_loaded"] - rss["small_loaded"] >= 200, rss  # the big model really was in memory
    assert result["growth_after_switching_back_mib"] <= GROWTH_BOUND_MIB, rss


def test_the_unloaded_models_cycles_are_collected_on_the_event_loops_thread(make_engine):
    """A cycle can hold objects that must die in the thread that owns them (a window's Qt
    objects): collected in an executor thread, their destructors deadlocked against the
    window's thread (the clean-clone run froze in a model switch)."""
    died_in: list[str] = []

    class OwnedByTheLoop:
        def __del__(self) -> None:
            died_in.append(threading.current_thread().name)

    async def main():
        engine = make_engine("Hello from Wren.")
        try:
            await engine.models.load()
            loop_thread = threading.current_thread().name
            garbage = OwnedByTheLoop()
            garbage.itself = garbage  # only a collection frees it
            del garbage
            engine.scripted.loaded.clear()
            await engine.models.load()  # the switch collects
            return loop_thread
        finally:
            await engine.close()

    gc.collect()
    gc.disable()  # no automatic collection may happen to free it first, in whichever thread
    try:
        loop_thread = asyncio.run(main())
    finally:
        gc.enable()
    assert died_in == [loop_thread]
