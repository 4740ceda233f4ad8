"""A model load its waiter gave up on (Ctrl+C while `wren chat` loads, a window closed mid-load):
asyncio.wrap_future cancels the worker's `loaded` future with the waiting task, and the
worker's thread then set its result on a cancelled future: InvalidStateError on the thread,
a crash report. Now the worker marks the future running before it loads, so the model loads,
nobody is told, and close() lets it go."""

from __future__ import annotations

import asyncio
import threading
import time

from wren.engine.inference.backends.scripted import ScriptedBackend
from wren.engine.inference.worker import ModelWorker
from wren.engine.tokenize import Tokenizer


class SlowLoad(ScriptedBackend):
    def __init__(self, started: threading.Event, seconds: float) -> None:
        super().__init__("hi")
        self.started, self.seconds = started, seconds

    def load(self, model_dir, **kwargs):
        self.started.set()
        time.sleep(self.seconds)
        return super().load(model_dir, **kwargs)


def test_a_load_given_up_on_ends_quietly(tiny_model_dir, monkeypatch):
    errors: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: errors.append(args.exc_value))
    started = threading.Event()
    backend = SlowLoad(started, 0.5)

    async def give_up() -> ModelWorker:
        worker = ModelWorker("slow", backend, tiny_model_dir, Tokenizer.from_dir(tiny_model_dir))
        waiting = asyncio.ensure_future(asyncio.wrap_future(worker.loaded))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)
        waiting.cancel()  # what cancelling models.load's task does to its await
        try:
            await waiting
        except asyncio.CancelledError:
            pass
        return worker

    worker = asyncio.run(give_up())
    worker.close()
    assert not worker._thread.is_alive()
    assert errors == []
    assert backend.loaded, "the load ran to its end before the worker stopped"
    assert not worker.loaded.cancelled() and worker.loaded.result() is backend.loaded[0]
