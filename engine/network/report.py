"""The privacy report: the offline lock's state and the network ledger, as JSON or as text
a person reads (`wren privacy ledger`, `wren privacy report PATH`, Settings → Privacy)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .. import paths
from ..errors import WrenError
from . import ledger, lock, sandbox

WHAT_IS_COUNTED = ("bytes are TCP payload as the kernel counts it when the connection closes (TLS included, "
                   "IP and TCP headers not); '?' where the system does not say")


class ReportNotWritten(WrenError):
    """The report could not be written; nothing was left behind."""


def children_note() -> str:
    if sandbox.namespace_prefix() is not None:
        return "MCP servers Wren starts by command run without network while the lock is on"
    return ("the lock covers Wren's own process only: MCP servers Wren starts by command are not "
            "kept off the network on this system")


def build(home: Path | None = None) -> dict[str, Any]:
    entries = ledger.entries(home)
    state = lock.state(home)
    parts = Counter(e.part for e in entries)
    return {
        "generated": datetime.now(UTC).isoformat(timespec="seconds"),
        "offline_lock": {"on": state.on, "source": state.source, "child_processes": children_note()},
        "counted": WHAT_IS_COUNTED,
        "summary": {
            "entries": len(entries),
            "not_loopback": sum(1 for e in entries if not e.loopback and e.kind != "child process"),
            "refused": sum(1 for e in entries if e.outcome == "refused"),
            "by_part": dict(sorted(parts.items())),
            "bytes_sent": sum(e.sent or 0 for e in entries),
            "bytes_received": sum(e.received or 0 for e in entries),
        },
        "entries": [_plain(e) for e in entries],
    }


def _plain(entry: ledger.Entry) -> dict[str, Any]:
    return {key: getattr(entry, key) for key in ledger.Entry.__dataclass_fields__}


def _count(n: int | None) -> str:
    return "?" if n is None else f"{n:,}"


def line(entry: ledger.Entry) -> str:
    where = entry.host if entry.port is None else f"{entry.host}:{entry.port}"
    local = "loopback" if entry.loopback else "NOT loopback"
    text = (f"{entry.at}  {entry.outcome:<8} {entry.kind:<8} {where} ({local})  {entry.part}: {entry.action}  "
            f"[{entry.process or '?'} {entry.pid}]")
    if entry.kind == "connect" and entry.outcome == "allowed":
        text += f"  sent {_count(entry.sent)} B, received {_count(entry.received)} B"
    return text


def as_text(report: dict[str, Any]) -> str:
    lock_on = report["offline_lock"]
    summary = report["summary"]
    out = [
        f"Wren privacy report, {report['generated']}",
        f"Offline lock: {'on' if lock_on['on'] else 'off'}" + (f" ({lock_on['source']})" if lock_on["on"] else ""),
        f"Child processes: {lock_on['child_processes']}",
        f"Entries: {summary['entries']}, not loopback: {summary['not_loopback']}, refused: {summary['refused']}",
        "By part: " + (", ".join(f"{k} {v}" for k, v in summary["by_part"].items()) or "none"),
        f"Bytes: sent {summary['bytes_sent']:,}, received {summary['bytes_received']:,} ({report['counted']})",
        "",
    ]
    out += [line(ledger.Entry(**e)) for e in report["entries"]] or ["No connections recorded."]
    return "\n".join(out) + "\n"


def as_json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, ensure_ascii=False) + "\n"


def export(path: str | Path, home: Path | None = None) -> Path:
    """Write the report to `path`: JSON when it ends in .json, text otherwise. Written whole
    or not at all (a temporary file beside it, renamed); a full disk says so by name."""
    target = Path(path).expanduser()
    report = build(home)
    body = (as_json(report) if target.suffix.lower() == ".json" else as_text(report)).encode()
    try:
        _write_whole(target, body)
    except OSError as exc:
        raise ReportNotWritten(_why(exc, target, len(body))) from None
    return target


def _write_whole(target: Path, body: bytes) -> None:
    fd, temporary = tempfile.mkstemp(prefix=".wren-report-", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(body)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, paths.PRIVATE_FILE)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _why(exc: OSError, target: Path, size: int) -> str:
    if exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        return (f"the privacy report was not written: the disk holding {target.parent} is full "
                f"(the report needs {size:,} bytes); free some space or choose another place")
    reason = exc.strerror or str(exc)
    return f"the privacy report was not written to {target}: {reason}"


