"""The MCP manager awaited from the desktop's loop (qasync on the Qt GUI thread): calls,
a timeout, a cancelled call and close work there, and the loop keeps running while a
10 MB result is decoded (that work happens on the manager's own thread)."""

from __future__ import annotations

import asyncio
import sys
import time

import pytest

from tests.engine.mcp.conftest import SERVER, server_pids, wait_gone
from wren.engine.tools.mcp import McpManager
from wren.engine.tools.mcp_config import server_from_entry

qasync = pytest.importorskip("qasync")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def test_the_manager_works_from_a_qasync_loop(tmp_path):
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([])
    manager = McpManager(tmp_path / "mcp.json", start_timeout=60)
    gaps: list[float] = []

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
        huge, huge_error = await manager.call("a__huge", {})
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
        # The loop's notifiers and timers are deleted later by Qt: let that happen now, while
        # everything they point to is alive, not inside a later test's event processing
        # (a later engine test once crashed there with a segmentation fault).
        from PySide6.QtCore import QCoreApplication, QEvent

        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
        app.processEvents()
    assert added == ("3.0", False)
    assert not huge_error and 200_000 < huge_chars < 200_200
    print(f"qasync loop: {len(gaps)} ticks, longest gap {max(gaps):.3f} s during the 10 MB call")
    assert len(gaps) >= 5  # the GUI loop kept turning while the 10 MB result was read
    assert cancelled and after == ("still", False)
    assert len(pids) == 1 and wait_gone(pids) == []
