"""`engine.network`: the ledger, the offline lock and the privacy report for the window
(every call runs off the caller's loop: they read and write small files)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from . import ledger, lock, report

T = TypeVar("T")


async def _off_loop(call: Callable[..., T], *args: Any) -> T:
    return await asyncio.get_running_loop().run_in_executor(None, call, *args)


class NetworkPrivacy:
    async def entries(self) -> list[ledger.Entry]:
        return await _off_loop(ledger.entries)

    async def lock_state(self) -> lock.LockState:
        return await _off_loop(lock.state)

    async def set_offline(self, on: bool) -> lock.LockState:
        return await _off_loop(lock.set_offline, on)

    async def report_text(self) -> str:
        return report.as_text(await _off_loop(report.build))

    async def export_report(self, path: str | Path) -> Path:
        return await _off_loop(report.export, path)

    @staticmethod
    def entry_line(entry: ledger.Entry) -> str:
        return report.line(entry)

    @staticmethod
    def children_note() -> str:
        """Whether the lock keeps MCP servers started by command off the network here."""
        return report.children_note()
