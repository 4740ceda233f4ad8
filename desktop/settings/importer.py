"""Model import from disk, run off the GUI thread with progress reported back to it."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from wren.engine.api import Engine

from ..bridge import from_thread

PROGRESS_EVERY_S = 0.05  # the reader may report per tensor; the bar needs far fewer updates


async def import_model(engine: Engine, path: Path, progress: Callable[[int, int], None]):
    """Import a GGUF file or register an HF model folder; returns the registry's ModelInfo."""
    relay = from_thread(progress)
    last = [0.0]

    def throttled(done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_EVERY_S or done >= total:
            last[0] = now
            relay(done, total)

    return await engine.models.import_model(path, progress=throttled)
