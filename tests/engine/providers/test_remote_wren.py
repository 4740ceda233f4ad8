"""Wren as another Wren's remote provider: a first engine serves (`wren serve`, on
127.0.0.1), a second engine with its own data folder adds it as a provider, finds its
models through GET /v1/models, and streams an answer from it over HTTP."""

from __future__ import annotations

import asyncio
from pathlib import Path

from wren.engine.events import Delta, Finished, FinishReason, Usage


def _second_engine(root: Path, tiny_model_dir: Path):
    """An engine over its own folder (database and models), whose only local model is the
    tiny one: its tokenizer budgets the remote model's context."""
    from wren.engine.api import Engine
    from wren.engine.inference.backends.scripted import ScriptedBackend
    from wren.engine.modelhub.registry import ModelRegistry
    from wren.engine.store import Store

    registry = ModelRegistry(root / "models")
    registry.register_folder(tiny_model_dir, name="tiny")
    store = Store(root / "wren.sqlite3")
    store.set_setting("model", "tiny")
    scripted = ScriptedBackend("never asked: the answer comes from the first engine")
    return Engine(store, registry, backend_factory=lambda name: scripted)


def test_a_second_engine_streams_from_the_first_over_http(make_engine, tiny_model_dir, tmp_path, monkeypatch):
    from wren.engine.server.app import WrenServer

    key = "wren-test-key-" + "q" * 24
    monkeypatch.setenv("WREN_KEY_FIRST", key)  # the second engine reads the key from here

    async def main():
        first = make_engine("Paris is the capital of France.")
        await first.models.load()
        server = WrenServer(first, key, port=0)
        port = await server.start()
        second = _second_engine(tmp_path / "second", tiny_model_dir)
        try:
            info = await second.providers.add("first", f"http://127.0.0.1:{port}/v1", key_store="env")
            status = await second.models.load(f"first/{info.models[0]}")
            conv = await second.conversations.create()
            events = [e async for e in second.chat.send(conv.id, "What is the capital of France?")]
            stored = await second.conversations.messages(conv.id)
            served = await first.conversations.list()
        finally:
            await second.close()
            await server.stop()
            await first.close()
        return info, status, events, stored, served

    info, status, events, stored, served = asyncio.run(asyncio.wait_for(main(), 60))
    assert info.models == ("tiny",) and info.key_store == "env"
    assert status.backend == "remote" and status.name == "first/tiny"
    text = "".join(e.text for e in events if isinstance(e, Delta))
    assert text == "Paris is the capital of France."
    assert len([e for e in events if isinstance(e, Delta)]) > 1  # streamed, not one block
    (usage,) = [e for e in events if isinstance(e, Usage)]
    assert usage.completion_tokens > 3 and usage.prompt_tokens > 5
    assert events[-1] == Finished(FinishReason.STOP, stored[-1].id)
    assert stored[-1].content == text and stored[-1].backend == "remote"
    assert served == []  # the serving side's OpenAI endpoint keeps nothing
