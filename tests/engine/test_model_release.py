"""A model the engine switches away from is let go: nothing the engine keeps (the turn
planner's sampling defaults, the worker, its load future) holds the model object."""

from __future__ import annotations

import asyncio
import gc
import weakref

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
