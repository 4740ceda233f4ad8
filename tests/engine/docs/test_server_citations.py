"""`wren serve`'s conversation stream carries the answer's citations: one typed `citation`
event per library passage the answer cites, before the stream ends."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx


def test_the_conversation_stream_carries_citations(make_engine, tmp_path: Path):
    from wren.engine.server.app import WrenServer
    from wren.engine.server.keys import open_keys

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "tides.md").write_text("# Tides\n\nSpring tides come twice a month, at new and full moon.\n")
    keys = open_keys(key_file=tmp_path / "keyring" / "key.cfg", use_key_file=True,
                     environ={"WREN_KEYRING_PASSPHRASE": "a passphrase for tests"})

    async def main():
        engine = make_engine("Twice a month [1], not [4].")
        engine.library.index.embedder = lambda: None
        await engine.library.add([str(folder)])
        await engine.library.sync()
        key, _ = keys.create()
        await engine.models.load()
        server = WrenServer(engine, key, port=0)
        port = await server.start()
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30,
                                         headers={"Authorization": f"Bearer {key}"}) as http, \
                    http.stream("POST", "/api/conversation", json={"content": "How often are spring tides?"}) as r:
                return b"".join([chunk async for chunk in r.aiter_raw()]).decode()
        finally:
            await server.stop()
            await engine.close()

    raw = asyncio.run(main())
    data = [json.loads(line[6:]) for line in raw.split("\n") if line.startswith("data: {")]
    cited = [d for d in data if d.get("type") == "citation"]
    assert len(cited) == 1 and cited[0]["number"] == 1 and cited[0]["path"].endswith("tides.md")
    assert cited[0]["where"] == "Tides, line 3" and "twice a month" in cited[0]["passage"]
