"""Asking for a model that is not installed names every model Wren could load instead: the
installed ones, the starter (imported on first use, so not yet in the registry) and the
configured providers' remote models; not "installed: none"."""

from __future__ import annotations

import asyncio

import pytest

from wren.engine.errors import ModelNotFound
from wren.engine.modelhub.registry import STARTER_NAME


def test_unknown_model_lists_the_starter_and_remote_models(make_engine):
    async def main() -> str:
        engine = make_engine()
        try:
            await engine.providers.add("lab", "http://127.0.0.1:9/v1", models=("qwen3-32b", "llama-70b"))
            with pytest.raises(ModelNotFound) as caught:
                await engine.models.load("qwen3-8b")
            return str(caught.value)
        finally:
            await engine.close()

    message = asyncio.run(main())
    assert message.startswith("no model named 'qwen3-8b' is installed; you can use ")
    assert "tiny" in message  # the installed one
    assert f"{STARTER_NAME} (the starter)" in message
    assert "remote: lab/qwen3-32b, lab/llama-70b" in message
    assert "installed: none" not in message
