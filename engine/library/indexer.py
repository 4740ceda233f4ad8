"""Keeping the library's index in step with its files, incrementally.

One pass (`Indexer.sync`) walks every source, compares each file's size and modification
time with what was indexed, hashes the files that differ (same content: only the time is
updated; the content of a file that vanished elsewhere: a move, its chunks kept), reads and
chunks the changed ones, deletes the rows of files that are gone, then embeds the chunks
without a vector. Every database call goes through `run_db` (the engine's database thread,
or the caller's own for the CLI); the reading, hashing and embedding run on the calling
thread, which lowers its own priority, and `busy()` (an answer streaming) pauses it between
files and batches, so indexing never competes with a Send.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..inference.priority import set_this_thread_nice
from ..memory.embed import Embedder
from ..memory.vectors import VectorIndex
from ..store import library as sql
from .chunking import chunks_of
from .formats import Skipped, extract
from .scan import Scan, scan

log = logging.getLogger(__name__)

MAX_BYTES = 64 * 2**20  # a larger file is skipped, with its size and this limit in the reason
EMBED_BATCH = 32
BUSY_PAUSE = 0.2  # seconds between looks while an answer streams
INDEX_NICE = 19

RunDb = Callable[[Callable[[Any], Any]], Any]  # run fn(peewee database) on the database thread


class State:
    PENDING, INDEXED, SKIPPED, FAILED = "pending", "indexed", "skipped", "failed"


@dataclass
class Progress:
    """Where indexing stands (`wren docs status`, the window's library page)."""

    phase: str = "idle"  # idle | scanning | indexing | embedding
    done: int = 0
    total: int = 0
    current: str = ""
    changed: int = 0  # files (re)indexed this pass
    unchanged: int = 0
    removed: int = 0
    moved: int = 0
    embedded: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Indexer:
    run_db: RunDb
    embedder: Callable[[], Embedder | None]
    vectors: VectorIndex
    max_bytes: int = MAX_BYTES
    busy: Callable[[], bool] = lambda: False
    on_change: Callable[[], None] = lambda: None  # rows written (a search's cache is stale)
    progress: Progress = field(default_factory=Progress)
    stop: threading.Event = field(default_factory=threading.Event)
    _moved: set[int] = field(default_factory=set)  # rows of gone files found again elsewhere

    def lower_priority(self) -> None:
        set_this_thread_nice(INDEX_NICE)

    def sync(self, source_ids: list[int] | None = None) -> Progress:
        """One pass over the sources (all, or `source_ids`); returns its progress."""
        self.progress = Progress(phase="scanning")
        sources = [s for s in self.run_db(sql.sources) if source_ids is None or s["id"] in source_ids]
        scans = {s["id"]: scan(s["path"]) for s in sources}
        plans = [self._plan(s["id"], scans[s["id"]]) for s in sources]
        gone = {row["hash"]: row for plan in plans for row in plan[1] if row["hash"]}
        work = [(sid, path, stat) for sid, (todo, _) in zip(scans, plans) for path, stat in todo]
        self.progress.phase, self.progress.total = "indexing", len(work)
        for source_id, path, stat in work:
            if self.stop.is_set():
                return self.progress
            self._wait_while_busy()
            self.progress.current = path
            self._index_one(source_id, path, stat, gone)
            self.progress.done += 1
        removed = [row["id"] for plan in plans for row in plan[1] if row["id"] not in self._moved]
        if removed:
            self.run_db(lambda db: sql.delete_files(db, removed))
            self.progress.removed = len(removed)
            self.on_change()
        self._moved.clear()
        self.embed_missing()
        self.progress.phase, self.progress.current = "idle", ""
        return self.progress

    def _plan(self, source_id: int, found: Scan) -> tuple[list[tuple[str, tuple[int, float]]], list[dict]]:
        """(files to look at, rows of files no longer there) for one source; problems of the
        walk are recorded as skipped entries."""
        known = {row["path"]: row for row in self.run_db(lambda db: sql.files(db, source_id))}
        todo = []
        for path, (size, mtime) in found.files.items():
            row = known.get(path)
            if row is None or row["size"] != size or row["mtime"] != mtime or row["state"] == State.PENDING:
                todo.append((path, (size, mtime)))
            else:
                self.progress.unchanged += 1

        def record(db) -> None:
            for path, reason in found.problems.items():
                sql.save_file(db, source_id, path, state=State.SKIPPED, reason=reason)

        if found.problems:
            self.run_db(record)
        gone = [] if not found.complete else [
            row for path, row in known.items() if path not in found.files and path not in found.problems]
        return todo, gone

    def _index_one(self, source_id: int, path: str, stat: tuple[int, float], gone: dict[str, dict]) -> None:
        size, mtime = stat
        try:
            self._index(source_id, path, size, mtime, gone)
        except Skipped as exc:
            self._mark(source_id, path, size, mtime, State.SKIPPED, str(exc))
        except FileNotFoundError:
            # Vanished while being read: whatever was indexed of it goes with it.
            self.run_db(lambda db: sql.delete_files(db, [r["id"] for r in [sql.file_at(db, path)] if r]))
        except PermissionError:
            self._mark(source_id, path, size, mtime, State.SKIPPED, "no permission to read it")
        except (MemoryError, RecursionError) as exc:
            self._mark(source_id, path, size, mtime, State.FAILED, f"too complex to read ({type(exc).__name__})")
        except Exception as exc:  # one bad file must not stop the library
            log.info("could not index %s", path, exc_info=True)
            self._mark(source_id, path, size, mtime, State.FAILED, f"could not be read: {exc}"[:300])
        self.on_change()

    def _mark(self, source_id: int, path: str, size: int, mtime: float, state: str, reason: str) -> None:
        def write(db) -> None:
            row = sql.file_at(db, path)
            if row is not None and row["chunks"]:
                sql.replace_chunks(db, row["id"], [])
            sql.save_file(db, source_id, path, size=size, mtime=mtime, hash="", state=state, reason=reason)

        self.run_db(write)

    def _index(self, source_id: int, path: str, size: int, mtime: float, gone: dict[str, dict]) -> None:
        if size > self.max_bytes:
            raise Skipped(f"too large ({size / 2**20:,.0f} MB; the limit is {self.max_bytes / 2**20:,.0f} MB)")
        digest = self._hash(path)
        row = self.run_db(lambda db: sql.file_at(db, path))
        if row is not None and row["hash"] == digest and row["state"] == State.INDEXED:
            self.run_db(lambda db: sql.save_file(db, source_id, path, size=size, mtime=mtime, state=State.INDEXED))
            self.progress.unchanged += 1
            return
        moved = gone.pop(digest, None)
        if row is None and moved is not None and moved["state"] == State.INDEXED:
            self.run_db(lambda db: sql.move_file(db, moved["id"], source_id, path, mtime))
            self._moved.add(moved["id"])
            self.progress.moved += 1
            return
        kind, blocks = extract(Path(path))
        chunks = [(c.text, c.location, c.tokens) for c in chunks_of(blocks)]
        if not chunks:
            raise Skipped("no text in it")
        values = dict(size=size, mtime=mtime, hash=digest, format=kind, state=State.INDEXED, reason="",
                      indexed_at=time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()))

        def write(db) -> None:
            file_id = sql.save_file(db, source_id, path, state=State.PENDING)
            sql.replace_chunks(db, file_id, chunks, **values)

        self.run_db(write)
        self.progress.changed += 1

    def _hash(self, path: str) -> str:
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
                if self.stop.is_set():
                    break
        os.stat(path)  # FileNotFoundError if it went while read
        return digest.hexdigest()

    def _wait_while_busy(self) -> None:
        while self.busy() and not self.stop.is_set():
            time.sleep(BUSY_PAUSE)

    def _save_vectors(self, model: str, ids: list[int], vectors: Any) -> None:
        self.run_db(lambda db: self.vectors.save(model, ids, vectors))

    def embed_missing(self) -> int:
        """Embed every chunk without a vector of the embedder in use; how many were."""
        embedder = self.embedder()
        if embedder is None:
            return 0
        self.progress.phase = "embedding"
        done = 0
        while not self.stop.is_set():
            self._wait_while_busy()
            batch = self.run_db(lambda db: self.vectors.missing(embedder.name, EMBED_BATCH))
            if not batch:
                break
            self._save_vectors(embedder.name, [i for i, _ in batch], embedder.embed([t for _, t in batch]))
            done += len(batch)
            self.progress.embedded = done
        if done:
            self.on_change()
        return done
