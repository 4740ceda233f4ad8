"""The library over one database: its sources, indexing passes, status, search and removal.
Every database call goes through `run_db`; the CLI runs them on its own thread, the engine's
`Library` service on its database thread (engine/library/service.py)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import InvalidRequest, NotFound
from ..memory.embed import Embedder
from ..memory.vectors import VectorIndex
from ..store import library as sql
from ..store.privacy import compact
from .indexer import MAX_BYTES, Indexer, Progress, RunDb, State
from .purge import scrub_passages
from .retrieve import Passage, embed_queries, search

SKIPPED_SHOWN = 200  # skipped files listed by status(); the counts cover all


class LibraryIndex:
    def __init__(self, database: Any, run_db: RunDb, embedder: Callable[[], Embedder | None], *,
                 in_memory: bool = False, busy: Callable[[], bool] = lambda: False, max_bytes: int = MAX_BYTES):
        """`database`: the store's peewee database, which `run_db` passes to what it runs."""
        self.run_db = run_db
        self.embedder = embedder
        self.in_memory = in_memory
        self.generation = 0  # bumped on every write: the search's matrix reloads
        self._lock = threading.Lock()  # one indexing pass at a time
        self.vectors = VectorIndex(database, sql.DOC_VECTORS)
        self.indexer = Indexer(run_db, embedder, self.vectors, max_bytes=max_bytes, busy=busy,
                               on_change=self._changed)

    def _changed(self) -> None:
        self.generation += 1

    @property
    def progress(self) -> Progress:
        return self.indexer.progress

    # -- sources ---------------------------------------------------------------------------

    def add(self, paths: Sequence[str | Path], watch: bool = False) -> list[dict[str, Any]]:
        """Add files and folders (nothing is indexed yet: `sync`); each must exist."""
        resolved = []
        for raw in paths:
            path = Path(raw).expanduser()
            if not path.exists():
                raise NotFound(f"{raw}: no such file or folder; nothing was added")
            if not os.access(path, os.R_OK):
                raise InvalidRequest(f"{raw}: no permission to read it; nothing was added")
            resolved.append(path.resolve())
        added = []
        for path in resolved:
            kind = "folder" if path.is_dir() else "file"
            added.append(self._add_source(str(path), kind, watch))
        return added

    def _add_source(self, path: str, kind: str, watch: bool) -> dict[str, Any]:
        row = self.run_db(lambda db: sql.add_source(db, path, kind, watch))
        return {**row, "watch": bool(row["watch"])}

    def sources(self) -> list[dict[str, Any]]:
        def read(db) -> list[dict[str, Any]]:
            out = []
            for source in sql.sources(db):
                rows = sql.files(db, source["id"])
                source["files"] = {s: sum(1 for r in rows if r["state"] == s)
                                   for s in (State.INDEXED, State.SKIPPED, State.FAILED, State.PENDING)}
                source["chunks"] = sum(r["chunks"] for r in rows)
                source["watch"] = bool(source["watch"])
                out.append(source)
            return out

        return self.run_db(read)

    def find_sources(self, target: str) -> list[dict[str, Any]]:
        """The sources `target` names: an id, or a path (the source itself)."""
        sources = self.run_db(sql.sources)
        if target.isdigit():
            found = [s for s in sources if s["id"] == int(target)]
        else:
            path = str(Path(target).expanduser().resolve())
            found = [s for s in sources if s["path"] == path]
            if not found:
                inside = [s for s in sources if path.startswith(s["path"].rstrip(os.sep) + os.sep)]
                if inside:
                    raise InvalidRequest(f"{target} is part of the library folder {inside[0]['path']} "
                                         f"(id {inside[0]['id']}): remove that folder, or move the file out of it")
        if not found:
            raise NotFound(f"{target}: not in the library (see `wren docs list`); nothing was removed")
        return found

    def remove(self, target: str) -> dict[str, Any]:
        """Remove sources with their files' text, chunks, vectors and index entries, then
        compact the file as a deleted chat's purge does (no removed text stays on disk)."""
        found = self.find_sources(target)
        ids = [s["id"] for s in found]

        def delete(db) -> int:
            with db.atomic():
                texts = dict(sql.chunk_texts_of_sources(db, ids))
                files = sql.delete_sources(db, ids)
                scrub_passages(db, texts)  # and from the answers that read them
            return files

        files = self.run_db(delete)
        self._changed()
        self.vectors.forget()
        if not self.in_memory:
            self.run_db(compact)
        return {"removed": [s["path"] for s in found], "files": files}

    # -- indexing ---------------------------------------------------------------------------

    def sync(self, source_ids: list[int] | None = None) -> Progress:
        """One indexing pass (a second caller waits for the first's to end)."""
        with self._lock:
            self.indexer.stop.clear()
            return self.indexer.sync(source_ids)

    def stop(self) -> None:
        self.indexer.stop.set()

    def status(self) -> dict[str, Any]:
        def read(db) -> dict[str, Any]:
            rows = sql.files(db)
            troubled = [{"path": r["path"], "state": r["state"], "reason": r["reason"]}
                        for r in rows if r["state"] in (State.SKIPPED, State.FAILED)]
            return {"counts": sql.counts(db), "skipped": troubled[:SKIPPED_SHOWN], "skipped_total": len(troubled)}

        out = self.run_db(read)
        out["progress"] = self.progress.to_dict()
        return out

    # -- search -----------------------------------------------------------------------------

    def search(self, query: str, limit: int = 5, source_ids: Sequence[int] | None = None,
               also: Sequence[str] = ()) -> list[Passage]:
        """`also`: other phrasings of the query, searched too and fused (engine/library/expand.py)."""
        if not query.strip():
            raise InvalidRequest("the search is empty: give some words to look for")
        if limit < 1:
            raise InvalidRequest(f"--limit must be at least 1, not {limit}")
        phrasings = [text for text in also if text.strip()]
        vector, *vectors = embed_queries(self.embedder(), [query, *phrasings])
        more = list(zip(phrasings, vectors))
        return self.run_db(lambda db: search(db, self.vectors, query, vector, limit, source_ids, self.generation,
                                             more))
