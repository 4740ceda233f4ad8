"""`wren serve` over a scripted backend, on 127.0.0.1 at a free port, on the test's loop.

The server's key lives in a real keyring backend: keyrings.alt's encrypted file, in a
folder outside the data folder (WREN_HOME), unlocked with a passphrase."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest


@pytest.fixture
def server_keys(tmp_path: Path):
    from wren.engine.server.keys import open_keys

    return open_keys(key_file=tmp_path / "keyring" / "wren-server-key.cfg", use_key_file=True,
                     environ={"WREN_KEYRING_PASSPHRASE": "a passphrase for tests"})


@pytest.fixture
def serving(make_engine: Callable, server_keys) -> Callable:
    """`async with serving(reply, **engine_kwargs, options=...) as s:` gives s.engine,
    s.url ("http://127.0.0.1:PORT"), s.key, s.server, s.headers."""
    from wren.engine.server.app import ServerOptions, WrenServer

    @contextlib.asynccontextmanager
    async def start(reply="Hello from Wren.", *, options: ServerOptions | None = None,
                    **engine_kwargs) -> AsyncIterator:
        engine = make_engine(reply, **engine_kwargs)
        key, _ = server_keys.create()
        await engine.models.load()
        server = WrenServer(engine, key, port=0, options=options)
        port = await server.start()
        s = type("Served", (), {})()
        s.engine, s.server, s.key, s.url = engine, server, key, f"http://127.0.0.1:{port}"
        s.headers = {"Authorization": f"Bearer {key}"}
        try:
            yield s
        finally:
            await server.stop()
            await engine.close()

    return start
