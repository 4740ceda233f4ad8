"""The "export everything" zip: each conversation (whole tree) as JSON and Markdown,
memories, settings and a manifest, in one file only its owner can read.

The zip is written beside its target under a hidden `.partial` name, synced, then renamed
into place, so a failure (a folder that takes no files, a full disk) leaves neither a
half-written zip nor the folders made for it, and says plainly what went wrong.
"""

from __future__ import annotations

import errno
import json
import os
import re
import time
import zipfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .errors import InvalidRequest
from .export import render
from .records import ConversationInfo

VERSION = 2  # 2: conversations keep every branch (`mapping`, `current_node`)


@dataclass(frozen=True)
class ConversationFiles:
    info: ConversationInfo
    as_json: str
    as_markdown: str
    messages: int  # in the whole tree


def conversation_files(store) -> list[ConversationFiles]:
    """Every conversation of `store`, rendered (on the database thread)."""
    out = []
    for info in store.list_conversations(limit=1_000_000):
        as_json = render(store, info.id, "json")
        out.append(ConversationFiles(info, as_json, render(store, info.id, "markdown"),
                                     len(json.loads(as_json)["mapping"])))
    return out


def _slug(title: str) -> str:
    slug = re.sub(r"[^\w-]+", "-", title.lower(), flags=re.UNICODE).strip("-")[:40]
    return slug or "chat"


def _target(path: Path) -> Path:
    path = Path(path).expanduser()
    if path.is_dir():
        path = path / f"wren-export-{time.strftime('%Y%m%d-%H%M%S')}.zip"
    if path.suffix.lower() != ".zip":
        raise InvalidRequest(f"the export must be a .zip file, not {path.name!r}")
    return path


def _make_parents(folder: Path) -> list[Path]:
    """Create `folder` and missing parents; the ones made, deepest first."""
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    made = []
    try:
        for d in reversed(missing):
            d.mkdir()
            made.append(d)
    except OSError:
        _remove_folders(made[::-1])
        raise
    return made[::-1]


def _remove_folders(folders: list[Path]) -> None:
    for d in folders:
        try:
            d.rmdir()
        except OSError:
            pass


def _reason(exc: OSError) -> str:
    if exc.errno in (errno.ENOENT, errno.EACCES, errno.EPERM, errno.EROFS):
        return f"{exc.strerror or exc} (that place does not take new files)"
    return exc.strerror or str(exc)


def _write_zip(raw, rows: dict[str, Any]) -> None:
    with zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as zf:
        index = []
        for conv in rows["conversations"]:
            stem = f"conversations/{conv.info.id:06d}-{_slug(conv.info.title)}"
            zf.writestr(f"{stem}.json", conv.as_json)
            zf.writestr(f"{stem}.md", conv.as_markdown)
            index.append({"id": conv.info.id, "title": conv.info.title, "messages": conv.messages, "file": stem})
        zf.writestr("memories.json", json.dumps(rows["memories"], ensure_ascii=False, indent=2, default=str) + "\n")
        zf.writestr("settings.json", json.dumps(rows["settings"], ensure_ascii=False, indent=2, default=str) + "\n")
        zf.writestr("manifest.json", json.dumps({
            "format": "wren-export", "version": VERSION,
            "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "conversations": index, "memories": len(rows["memories"]),
            "not_included": ["models", "provider keys"],
        }, ensure_ascii=False, indent=2) + "\n")


def write_export(path: Path, rows: dict[str, Any]) -> Path:
    """One zip, created readable by the user alone (0600), written atomically; an OSError
    becomes InvalidRequest naming the place and the reason, with nothing left behind."""
    path = _target(path)
    made: list[Path] = []
    tmp = path.with_name(f".{path.name}.partial")
    created = False
    try:
        made = _make_parents(path.parent)
        fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
        created = True
        os.chmod(tmp, 0o600)
        with os.fdopen(fd, "wb") as raw:
            _write_zip(raw, rows)
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        if created:
            tmp.unlink(missing_ok=True)
        _remove_folders(made)
        if isinstance(exc, OSError):
            raise InvalidRequest(f"cannot write the export to {path}: {_reason(exc)}; nothing was written") from None
        raise
    return path
