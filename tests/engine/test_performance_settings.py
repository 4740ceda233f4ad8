"""Speed/memory settings: validated, stored, and used when a model loads."""

from __future__ import annotations

import asyncio

import pytest

from wren.engine.errors import InvalidRequest
from wren.engine.performance import PerformanceSettings


def test_bad_values_are_refused_with_what_was_wrong_and_nothing_changes(make_engine):
    async def main():
        engine = make_engine()
        saved = await engine.settings.set_performance(parallel_sequences=4, prefix_cache_mb=256)
        assert saved == PerformanceSettings(4, 256)
        for bad, message in [({"parallel_sequences": 0}, "parallel_sequences must be from 1 to 8, got 0"),
                             ({"parallel_sequences": 9}, "from 1 to 8, got 9"),
                             ({"parallel_sequences": "two"}, "must be a whole number"),
                             ({"prefix_cache_mb": -1}, "prefix_cache_mb must be from 0"),
                             ({"prefix_cache_mb": 1.5}, "must be a whole number")]:
            with pytest.raises(InvalidRequest, match=message):
                await engine.settings.set_performance(**bad)
        with pytest.raises(TypeError):
            await engine.settings.set_performance(threads=3)
        assert await engine.settings.performance() == PerformanceSettings(4, 256)
        # A value edited by hand into something invalid falls back to the default.
        await engine.settings.set("parallel_sequences", "lots")
        assert await engine.settings.performance() == PerformanceSettings()
        await engine.close()

    asyncio.run(main())


def test_parallel_sequences_sets_the_loaded_models_kv_slots(wren_home, tiny_model_dir):
    from wren.engine.api import Engine
    from wren.engine.inference.backends.torch import TorchBackend
    from wren.engine.modelhub.registry import ModelRegistry
    from wren.engine.store import Store

    async def main():
        registry = ModelRegistry(wren_home / "models")
        registry.register_folder(tiny_model_dir, name="tiny")
        store = Store(wren_home / "wren.sqlite3")
        store.set_setting("model", "tiny")
        engine = Engine(store, registry, backend_factory=lambda name: TorchBackend())
        await engine.settings.set_performance(parallel_sequences=3)
        await engine.models.load()
        slots = engine.loaded_worker.model.slots
        await engine.settings.set_performance(parallel_sequences=1)
        await engine.models.load()
        one = engine.loaded_worker.model.slots
        await engine.close()
        return slots, one

    assert asyncio.run(main()) == (3, 1)


def test_the_terminal_keep_alive_is_checked_stored_and_read_back(make_engine):
    async def main():
        engine = make_engine()
        assert await engine.settings.terminal_keep_alive() == 300  # the default
        await engine.settings.set_terminal_keep_alive(0)
        assert await engine.settings.terminal_keep_alive() == 0
        await engine.settings.set_terminal_keep_alive(1800)
        for bad in (-1, float("nan"), float("inf"), True, "ten"):
            with pytest.raises(InvalidRequest, match="keep-alive must be 0 or more seconds"):
                await engine.settings.set_terminal_keep_alive(bad)
        assert await engine.settings.terminal_keep_alive() == 1800  # a refusal changes nothing
        await engine.settings.set("cli.keep_alive", "lots")  # edited by hand: the default again
        assert await engine.settings.terminal_keep_alive() == 300
        await engine.close()

    asyncio.run(main())
