"""Run by test_replay_mlx.py in a child process (so a backend that hangs cannot hang the
suite): answer once with a drawn seed and logprobs on, replay it, print both as JSON.

    python replay_child.py BACKEND WREN_HOME
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


async def main(backend: str, home: Path) -> None:
    from tests.fixtures.tiny import make_tiny_model_dir
    from wren.engine.api import Engine
    from wren.engine.inference.sampling import SamplingParams
    from wren.engine.modelhub.registry import ModelRegistry
    from wren.engine.records import SendOptions
    from wren.engine.store import Store

    registry = ModelRegistry(home / "models")
    registry.register_folder(make_tiny_model_dir(home / "tiny-llama"), name="tiny")
    store = Store(home / "wren.sqlite3")
    store.set_setting("model", "tiny")
    engine = Engine(store, registry)
    try:
        await engine.models.load(backend=backend)
        conv = await engine.conversations.create("dice")
        params = SamplingParams(temperature=1.0, max_tokens=16, logprobs=5)  # no seed: one is drawn
        [_ async for _ in engine.chat.send(conv.id, "roll", SendOptions(sampling=params))]
        first = (await engine.conversations.messages(conv.id))[-1]
        [_ async for _ in engine.chat.replay(first.id)]
        again = (await engine.conversations.messages(conv.id))[-1]
    finally:
        await engine.close()
    print(json.dumps({"answers": [{"id": m.id, "backend": m.backend, "content": m.content, "sampling": m.sampling,
                                   "completion_tokens": m.completion_tokens, "logprobs": m.meta.get("logprobs")}
                                  for m in (first, again)]}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2])))
