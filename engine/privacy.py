"""Privacy you can verify: deleted text leaves the disk, everything can be exported or erased.

- A deleted chat is hidden at once and restorable for `Privacy.undo_seconds`; then (or at
  once with `delete_conversation(id, permanently=True)`, or when the engine closes) its
  rows are purged: messages, their vectors and summaries go with it (foreign keys), the
  full-text indexes are merged so no segment still holds its words, and the WAL is
  checkpointed and truncated. `secure_delete` (set on every connection by the store)
  zeroes the freed bytes, so the raw database files no longer show the text.
- Copies are removed too: an answer's provenance (`meta["context"]`: its parts and the
  rendered prompt) keeps the ids of the memories and past messages it used, and their text
  is scrubbed when the memory is forgotten or the chat purged (`scrub_copies`).
- `erase_all` deletes conversations, memories, settings, logs and caches (models only when
  asked); `export_all` writes one zip of conversations (JSON and Markdown), memories and
  settings, readable by the user alone.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import paths
from .store import privacy as rows
from .store.privacy import compact
from .voice import recordings as voice_recordings

if TYPE_CHECKING:
    from .core import Core

log = logging.getLogger(__name__)

UNDO_SECONDS = 30.0  # a deleted chat can be restored this long (the sidebar's undo bar is shorter)
FORGOTTEN = "[forgotten]"  # what a scrubbed copy reads
CACHE_DIRS = ("cache",)  # under the data folder: compiled graphs, prefix caches
CHAT_HISTORY_FILES = ("chat_history",)  # the terminal chat's input history (engine/terminal/chat.py)
# Settings never exported: anything that looks like a secret (provider keys live in the keyring).
_SECRET = re.compile(r"key|token|secret|password|passphrase", re.IGNORECASE)


# -- on the database thread ------------------------------------------------------------

def _utc(seconds_ago: float) -> str:
    when = datetime.now(UTC).replace(tzinfo=None) - timedelta(seconds=seconds_ago)
    return str(when)  # peewee's DateTimeField stores this text form, so it compares in order


def purge_conversations(store, *, older_than: float | None = None, ids: Iterable[int] | None = None) -> int:
    """Delete for good the soft-deleted chats (those deleted `older_than` seconds ago or
    more, or those in `ids`), scrub their text from other answers' provenance and compact.
    Returns how many chats were purged."""
    store.bind()
    db = store.db
    picked = None if ids is None else [int(i) for i in ids]
    conv_ids = rows.delete_deleted_conversations(
        db, deleted_before=None if older_than is None else _utc(older_than), ids=picked,
        then=lambda message_ids: scrub_copies(db, messages=message_ids),
    )
    if not conv_ids:
        return 0
    voice_recordings.forget(conv_ids)  # kept dictation audio ("keep audio" setting) goes with its chat
    if store.path != ":memory:":
        compact(db)
        _forget_typed_lines(store, conv_ids)
    return len(conv_ids)


def _forget_typed_lines(store, conv_ids: list[int]) -> None:
    """What was typed into the purged chats in `wren chat` leaves its history file too."""
    from .chat_history import forget

    try:
        forget(store.folder, conv_ids)
    except OSError as exc:  # the rows are gone; `wren data erase` still removes the file
        log.warning("could not remove purged chats' lines from the chat history: %s", exc)


def scrub_copies(db, *, memories: dict[int, str] | None = None, messages: set[int] | None = None) -> int:
    """Remove the text of forgotten `memories` (id → text) and purged `messages` (ids) from
    every answer's provenance; the ids stay. Returns how many messages were rewritten."""
    memories = {int(k): v for k, v in (memories or {}).items()}
    messages = set(messages or ())
    if not memories and not messages:
        return 0
    # Copies live in provenance: `meta["context"]` parts of kind "memory"/"past_chat" and
    # the rendered prompt beside them.
    needles = ['"past_chat"'] if messages else []
    needles += ['"memory"'] if memories else []
    found: dict[int, str] = {}
    for needle in needles:
        for mid, meta in rows.metas_containing(db, needle):
            found[mid] = meta
    changed = 0
    for mid, raw in found.items():
        try:
            meta = json.loads(raw)
        except (TypeError, ValueError):
            continue
        scrubbed = _scrub_meta(meta, memories, messages)
        if scrubbed != meta:
            rows.set_meta_text(db, mid, json.dumps(scrubbed, ensure_ascii=False))
            changed += 1
    return changed


def _scrub_meta(meta: Any, memories: dict[int, str], messages: set[int]) -> Any:
    meta = json.loads(json.dumps(meta))  # a deep copy
    texts: set[str] = set()
    report = meta.get("context") if isinstance(meta, dict) else None
    if isinstance(report, dict):
        for part in report.get("parts") or ():
            ids = set(part.get("source_ids") or ())
            used = ids & set(memories) if part.get("kind") == "memory" else set()
            if used or (part.get("kind") == "past_chat" and ids & messages):
                texts.update(memories[i] for i in used if memories[i])  # as it reads now
                if part.get("text"):
                    texts.add(part["text"])  # as the answer saw it
                part.pop("text", None)  # the ids stay; readers show "forgotten"
    # `meta["memory"]` (what this turn saved or forgot) is left alone: its text is the
    # question's own, in the same chat, and goes when that chat is deleted.
    ordered = sorted((t for t in texts if t.strip()), key=len, reverse=True)
    if isinstance(report, dict) and ordered:
        meta["context"] = _replace_all(report, ordered)
    return meta


def _replace_all(value: Any, texts: list[str]) -> Any:
    if isinstance(value, str):
        for text in texts:
            if text in value:
                value = value.replace(text, FORGOTTEN)
        return value
    if isinstance(value, list):
        return [_replace_all(v, texts) for v in value]
    if isinstance(value, dict):
        return {k: _replace_all(v, texts) for k, v in value.items()}
    return value


def forget_memories(db, memories: dict[int, str], *, in_memory: bool = False) -> None:
    """After memories were deleted: scrub their copies and compact (memory store's hook)."""
    if not memories:
        return
    scrub_copies(db, memories=memories)
    if not in_memory and not rows.in_transaction(db):
        compact(db)


def erase_database(store) -> dict[str, int]:
    """Every user row: conversations, messages, memories, summaries, vectors, settings."""
    store.bind()
    db = store.db
    counts = rows.delete_user_rows(db)
    if store.path != ":memory:":
        compact(db)
    return counts


def _export_rows(store) -> dict[str, Any]:
    from .export_archive import conversation_files

    convs = conversation_files(store)  # every branch of every chat
    memories = rows.memories_for_export(store.db)
    settings = {}
    for key, value in rows.settings_text(store.db):
        if not _SECRET.search(key):
            try:
                settings[key] = json.loads(value)
            except (TypeError, ValueError):
                settings[key] = value
    return {"conversations": convs, "memories": memories, "settings": settings}


# -- files -------------------------------------------------------------------------------

def _remove(path: Path) -> int:
    """Delete a file or folder; returns the bytes freed."""
    if not path.exists() and not path.is_symlink():
        return 0
    if path.is_dir() and not path.is_symlink():
        size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
        shutil.rmtree(path, ignore_errors=True)
        return size
    size = path.stat().st_size
    path.unlink(missing_ok=True)
    return size


def erase_files(*, models: bool) -> list[str]:
    """Logs, caches and the terminal chat's history (and models when asked)."""
    from .logs import LOGGER_NAMES, close_logging, setup_logging

    data = paths.data_dir()
    removed = []
    logging_on = any(h.get_name() == "wren-json" for n in LOGGER_NAMES for h in logging.getLogger(n).handlers)
    close_logging()
    try:
        logs = data / "logs"
        if logs.is_dir():
            for child in logs.iterdir():
                _remove(child)
            removed.append(str(logs))
    finally:
        if logging_on:
            setup_logging()
    for name in CACHE_DIRS + CHAT_HISTORY_FILES + (voice_recordings.FOLDER,):
        if (data / name).exists():
            _remove(data / name)
            removed.append(str(data / name))
    crashes = data / "crashes"  # engine/crashreport.py: reports hold no prompts, but they are the user's
    if crashes.is_dir():
        live = f"fault-{os.getpid()}.log"  # this process's own fault log stays open for a crash
        for child in crashes.iterdir():
            if child.name != live:
                _remove(child)
        removed.append(str(crashes))
    for history in data.glob("*history*"):  # whatever the terminal chat calls its history
        if history.is_file():
            _remove(history)
            removed.append(str(history))
    from .network import ledger

    if any(ledger.folder().glob("ledger*.jsonl")):  # what Wren connected to; the offline lock stays as it is
        ledger.clear()
        removed.append(str(ledger.folder()))
    if models and (data / "models").is_dir():
        for child in (data / "models").iterdir():
            _remove(child)
        removed.append(str(data / "models"))
    return removed


@dataclass
class EraseReport:
    rows: dict[str, int] = field(default_factory=dict)  # table → rows deleted
    removed: list[str] = field(default_factory=list)  # files and folders emptied
    models_kept: bool = True


# -- the service ----------------------------------------------------------------------

class Privacy:
    """`engine.privacy`: deleted chats purged after their undo window, erasing everything,
    exporting everything."""

    def __init__(self, core: Core):
        self.e = core
        self.undo_seconds: float = UNDO_SECONDS
        self._timers: set = set()

    def schedule_purge(self) -> None:
        """Purge the chats whose undo window has closed, once it has."""
        loop = asyncio.get_running_loop()
        timers = self._timers

        def fire() -> None:
            timers.discard(handle)
            if not self.e.closed:
                task = loop.create_task(self.purge_deleted(expired_only=True))
                timers.add(task)
                task.add_done_callback(timers.discard)

        handle = loop.call_later(max(0.0, float(self.undo_seconds)) + 0.01, fire)
        timers.add(handle)

    async def purge_deleted(self, *, expired_only: bool = False,
                                          ids: Iterable[int] | None = None) -> int:
        """Delete for good the chats deleted before (all, those past the undo window, or `ids`)."""
        older = float(self.undo_seconds) if expired_only else None
        count = await self.e.db(purge_conversations, self.e.store, older_than=older,
                               ids=None if ids is None else list(ids))
        if count:
            from .logs import log_event

            log_event("privacy.purged", conversations=count)
        return count

    async def close(self) -> None:
        """At close: the chats past their undo window are purged (the rest at the next start;
        another Wren process may still be showing their undo bar)."""
        for timer in list(self._timers):
            timer.cancel()
        try:
            await self.e.db(purge_conversations, self.e.store, older_than=float(self.undo_seconds))
        except Exception as exc:  # the next start purges them
            log.warning("could not purge deleted chats at close: %s", exc)

    async def erase_all(self, *, keep_models: bool = True) -> EraseReport:
        """Delete all the user's data: conversations, memories, settings, logs, caches (and
        the installed models when `keep_models` is False). Answers in progress stop first."""
        self.e.stop_answers()
        report = EraseReport(models_kept=keep_models)
        report.rows = await self.e.db(erase_database, self.e.store)
        if self.e.temporary is not None:
            await self.e.db(erase_database, self.e.temporary)
        self.e.memory.memories.generation += 1  # cached vectors describe rows that are gone
        loop = asyncio.get_running_loop()
        if not keep_models:
            await self.e.unload()
        report.removed = await loop.run_in_executor(None, lambda: erase_files(models=not keep_models))
        from .logs import log_event

        log_event("privacy.erased", models=not keep_models, conversations=report.rows.get("conversation", 0))
        return report

    async def export_all(self, path: Path | str) -> Path:
        """Everything in one zip (0600): conversations as JSON and Markdown, memories,
        settings; no models, no keys. `path` is a .zip file or a folder to put one in."""
        rows = await self.e.db(_export_rows, self.e.store)
        from .export_archive import write_export

        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, write_export, Path(path), rows)
