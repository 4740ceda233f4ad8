"""The MCP manager awaited from the desktop's loop (qasync on the Qt GUI thread): calls,
a timeout, a cancelled call and close work there, and the loop keeps running while a
10 MB result is decoded (that work happens on the manager's own thread).

The loop runs in a child process (this file run as a module): a QApplication and a closed
qasync loop left in the test process crashed a later test's Qt event processing (a
segmentation fault in pytest-qt's _process_events, twice, about 300 tests later), and no
other engine test needs Qt."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.engine.mcp.conftest import SERVER, server_pids, wait_gone
from wren.engine.tools.mcp import McpManager
from wren.engine.tools.mcp_config import server_from_entry

qasync = pytest.importorskip("qasync")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


ROOT = Path(__file__).resolve().parents[3]


def run_in_this_process(tmp_path: Path) -> dict:
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([])
    manager = McpManager(tmp_path / "mcp.json", start_timeout=60)
    gaps: list[float] = []
    took: list[float] = []

    async def ticker(stop: asyncio.Event) -> None:
        last = time.monotonic()
        while not stop.is_set():
            await asyncio.sleep(0.02)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    async def main():
        await manager.add(server_from_entry("a", {"command": sys.executable, "args": [str(SERVER)], "timeout": 30}))
        added = await manager.call("a__add", {"a": 1, "b": 2})
        stop = asyncio.Event()
        ticks = asyncio.ensure_future(ticker(stop))
        started = time.monotonic()
        huge, huge_error = await manager.call("a__huge", {})
        took.append(time.monotonic() - started)
        stop.set()
        await ticks
        task = asyncio.ensure_future(manager.call("a__sleep_forever", {}))
        await asyncio.sleep(0.3)
        task.cancel()
        cancelled = False
        try:
            await task
        except asyncio.CancelledError:
            cancelled = True
        after = await manager.call("a__echo", {"text": "still"})
        pids = server_pids(manager.log("a"))
        await manager.aclose()
        return added, len(huge), huge_error, cancelled, after, pids

    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    try:
        added, huge_chars, huge_error, cancelled, after, pids = loop.run_until_complete(main())
    finally:
        asyncio.set_event_loop(None)
        loop.close()
    return {"added": list(added), "huge_chars": huge_chars, "huge_error": huge_error, "cancelled": cancelled,
            "after": list(after), "pids": pids, "gaps": gaps, "call_seconds": took[0]}


def test_the_manager_works_from_a_qasync_loop(tmp_path):
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    proc = subprocess.run([sys.executable, "-m", "tests.engine.mcp.test_mcp_qasync", str(tmp_path)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=170)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["added"] == ["3.0", False]
    assert not got["huge_error"] and 200_000 < got["huge_chars"] < 200_200
    gaps = got["gaps"]
    print(f"qasync loop: {len(gaps)} ticks, longest gap {max(gaps):.3f} s during the "
          f"{got['call_seconds']:.2f} s 10 MB call")
    # the GUI loop kept turning while the 10 MB result was read: a tick per 0.1 s of the call
    # at least (the call itself takes 0.1-0.3 s since the reader is linear)
    assert len(gaps) >= max(2, int(got["call_seconds"] / 0.1))
    assert got["cancelled"] and got["after"] == ["still", False]
    assert len(got["pids"]) == 1 and wait_gone(got["pids"]) == []


if __name__ == "__main__":
    print(json.dumps(run_in_this_process(Path(sys.argv[1]))))
