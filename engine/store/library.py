"""The SQL of the document library and projects: sources (files and folders the user added),
their files (hash, state, why skipped), chunks (text, location, token count) with their
full-text index and sentence vectors, and projects (instructions, sources, chats).
What the rows mean and how they are made is `engine.library`; this only reads and writes."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import peewee as pw

from .vectors import VectorTable

DOC_VECTORS = VectorTable("doc_vector", "chunk_id", "doc_chunk", "SELECT id, text FROM doc_chunk")
FTS_TABLE = "doc_chunk_fts"
# Children before parents: erasing every user row deletes in this order.
TABLES = ("project_chat", "project_doc", "project", "doc_vector", "doc_chunk", "doc_file", "doc_source")

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS doc_source (id INTEGER PRIMARY KEY AUTOINCREMENT, path TEXT NOT NULL UNIQUE, "
    "kind TEXT NOT NULL, watch INTEGER NOT NULL DEFAULT 0, added_at TEXT NOT NULL DEFAULT (datetime('now')))",
    "CREATE TABLE IF NOT EXISTS doc_file (id INTEGER PRIMARY KEY AUTOINCREMENT, "
    "source_id INTEGER NOT NULL REFERENCES doc_source(id) ON DELETE CASCADE, path TEXT NOT NULL UNIQUE, "
    "size INTEGER NOT NULL DEFAULT 0, mtime REAL NOT NULL DEFAULT 0, hash TEXT NOT NULL DEFAULT '', "
    "format TEXT NOT NULL DEFAULT '', state TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '', "
    "chunks INTEGER NOT NULL DEFAULT 0, indexed_at TEXT)",
    "CREATE INDEX IF NOT EXISTS doc_file_source ON doc_file(source_id)",
    "CREATE INDEX IF NOT EXISTS doc_file_hash ON doc_file(hash)",
    "CREATE TABLE IF NOT EXISTS doc_chunk (id INTEGER PRIMARY KEY AUTOINCREMENT, "
    "file_id INTEGER NOT NULL REFERENCES doc_file(id) ON DELETE CASCADE, ord INTEGER NOT NULL, "
    "text TEXT NOT NULL, location TEXT NOT NULL, tokens INTEGER NOT NULL)",
    "CREATE INDEX IF NOT EXISTS doc_chunk_file ON doc_chunk(file_id)",
    "CREATE TABLE IF NOT EXISTS doc_vector (chunk_id INTEGER PRIMARY KEY REFERENCES doc_chunk(id) "
    "ON DELETE CASCADE, model TEXT NOT NULL, vector BLOB NOT NULL)",
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {FTS_TABLE} USING fts5("
    "text, content='doc_chunk', content_rowid='id', tokenize='porter unicode61')",
    f"CREATE TRIGGER IF NOT EXISTS doc_chunk_fts_ai AFTER INSERT ON doc_chunk BEGIN "
    f"INSERT INTO {FTS_TABLE}(rowid, text) VALUES (new.id, new.text); END",
    f"CREATE TRIGGER IF NOT EXISTS doc_chunk_fts_ad AFTER DELETE ON doc_chunk BEGIN "
    f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, text) VALUES ('delete', old.id, old.text); END",
    "CREATE TABLE IF NOT EXISTS project (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL UNIQUE, "
    "instructions TEXT NOT NULL DEFAULT '', created_at TEXT NOT NULL DEFAULT (datetime('now')))",
    "CREATE TABLE IF NOT EXISTS project_doc (project_id INTEGER NOT NULL REFERENCES project(id) ON DELETE CASCADE, "
    "source_id INTEGER NOT NULL REFERENCES doc_source(id) ON DELETE CASCADE, PRIMARY KEY (project_id, source_id))",
    "CREATE TABLE IF NOT EXISTS project_chat (conversation_id INTEGER PRIMARY KEY REFERENCES conversation(id) "
    "ON DELETE CASCADE, project_id INTEGER NOT NULL REFERENCES project(id) ON DELETE CASCADE)",
)

SOURCE_COLUMNS = ("id", "path", "kind", "watch", "added_at")
FILE_COLUMNS = ("id", "source_id", "path", "size", "mtime", "hash", "format", "state", "reason", "chunks",
                "indexed_at")
PROJECT_COLUMNS = ("id", "name", "instructions", "created_at")


def create_schema(db: pw.Database) -> None:
    for sql in SCHEMA:
        db.execute_sql(sql)


def has_schema(db: pw.Database) -> bool:
    return bool(db.execute_sql("SELECT 1 FROM sqlite_master WHERE name = 'doc_chunk'").fetchone())


def _rows(db: pw.Database, columns: Sequence[str], sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]:
    return [dict(zip(columns, r)) for r in db.execute_sql(sql, tuple(args)).fetchall()]


# -- sources -------------------------------------------------------------------------------

def add_source(db: pw.Database, path: str, kind: str, watch: bool) -> dict[str, Any]:
    """The source at `path`, added now or already there (its watch flag updated if asked)."""
    with db.atomic():
        db.execute_sql("INSERT INTO doc_source (path, kind, watch) VALUES (?, ?, ?) ON CONFLICT(path) DO UPDATE "
                       "SET watch = max(watch, excluded.watch)", (path, kind, int(watch)))
        return source_at(db, path) or {}


def source_at(db: pw.Database, path: str) -> dict[str, Any] | None:
    found = _rows(db, SOURCE_COLUMNS, f"SELECT {', '.join(SOURCE_COLUMNS)} FROM doc_source WHERE path = ?", (path,))
    return found[0] if found else None


def sources(db: pw.Database) -> list[dict[str, Any]]:
    return _rows(db, SOURCE_COLUMNS, f"SELECT {', '.join(SOURCE_COLUMNS)} FROM doc_source ORDER BY id")


def delete_sources(db: pw.Database, ids: Iterable[int]) -> int:
    """Delete sources with their files, chunks, vectors and index entries (the keys cascade,
    the triggers empty the full-text index); how many files went with them."""
    ids = list(ids)
    if not ids:
        return 0
    marks = ",".join("?" * len(ids))
    with db.atomic():
        files = db.execute_sql(f"SELECT count(*) FROM doc_file WHERE source_id IN ({marks})", ids).fetchone()[0]
        db.execute_sql(f"DELETE FROM doc_source WHERE id IN ({marks})", ids)
    return files


# -- files ---------------------------------------------------------------------------------

def files(db: pw.Database, source_id: int | None = None) -> list[dict[str, Any]]:
    where, args = ("WHERE source_id = ?", (source_id,)) if source_id is not None else ("", ())
    return _rows(db, FILE_COLUMNS, f"SELECT {', '.join(FILE_COLUMNS)} FROM doc_file {where} ORDER BY path", args)


def file_at(db: pw.Database, path: str) -> dict[str, Any] | None:
    found = _rows(db, FILE_COLUMNS, f"SELECT {', '.join(FILE_COLUMNS)} FROM doc_file WHERE path = ?", (path,))
    return found[0] if found else None


def file_by_id(db: pw.Database, file_id: int) -> dict[str, Any] | None:
    found = _rows(db, FILE_COLUMNS, f"SELECT {', '.join(FILE_COLUMNS)} FROM doc_file WHERE id = ?", (file_id,))
    return found[0] if found else None


def save_file(db: pw.Database, source_id: int, path: str, **values: Any) -> int:
    """Insert or update the file at `path` with `values` (columns of FILE_COLUMNS); its id."""
    columns = ["source_id", "path", *values]
    updates = ", ".join(f"{c} = excluded.{c}" for c in columns[2:]) or "source_id = excluded.source_id"
    db.execute_sql(f"INSERT INTO doc_file ({', '.join(columns)}) VALUES ({','.join('?' * len(columns))}) "
                   f"ON CONFLICT(path) DO UPDATE SET {updates}", (source_id, path, *values.values()))
    return db.execute_sql("SELECT id FROM doc_file WHERE path = ?", (path,)).fetchone()[0]


def move_file(db: pw.Database, file_id: int, source_id: int, path: str, mtime: float) -> None:
    """A file renamed or moved with the same content keeps its chunks and vectors."""
    db.execute_sql("UPDATE doc_file SET path = ?, source_id = ?, mtime = ? WHERE id = ?",
                   (path, source_id, mtime, file_id))


def delete_files(db: pw.Database, ids: Iterable[int]) -> None:
    ids = list(ids)
    for start in range(0, len(ids), 500):
        part = ids[start:start + 500]
        db.execute_sql(f"DELETE FROM doc_file WHERE id IN ({','.join('?' * len(part))})", part)


def replace_chunks(db: pw.Database, file_id: int, chunks: Sequence[tuple[str, dict, int]], **values: Any) -> None:
    """In one transaction: the file's old chunks go, `chunks` (text, location, tokens) come,
    and the file's row takes `values` and its chunk count."""
    with db.atomic():
        db.execute_sql("DELETE FROM doc_chunk WHERE file_id = ?", (file_id,))
        cursor = db.cursor()
        cursor.executemany(
            "INSERT INTO doc_chunk (file_id, ord, text, location, tokens) VALUES (?, ?, ?, ?, ?)",
            [(file_id, n, text, json.dumps(loc, ensure_ascii=False), tokens)
             for n, (text, loc, tokens) in enumerate(chunks)],
        )
        sets = ", ".join(f"{c} = ?" for c in values)
        db.execute_sql(f"UPDATE doc_file SET {sets}{', ' if sets else ''}chunks = ? WHERE id = ?",
                       (*values.values(), len(chunks), file_id))


def has_chunks(db: pw.Database) -> bool:
    return db.execute_sql("SELECT 1 FROM doc_chunk LIMIT 1").fetchone() is not None


def counts(db: pw.Database) -> dict[str, int]:
    """Files by state, and the chunks and vectors stored."""
    out = {r[0]: r[1] for r in db.execute_sql("SELECT state, count(*) FROM doc_file GROUP BY state").fetchall()}
    out["chunks"] = db.execute_sql("SELECT count(*) FROM doc_chunk").fetchone()[0]
    out["vectors"] = db.execute_sql("SELECT count(*) FROM doc_vector").fetchone()[0]
    return out


# -- chunks and search ---------------------------------------------------------------------

CHUNK_SQL = ("SELECT c.id, c.file_id, f.path, c.ord, c.text, c.location, c.tokens FROM doc_chunk c "
             "JOIN doc_file f ON f.id = c.file_id")
CHUNK_COLUMNS = ("id", "file_id", "path", "ord", "text", "location", "tokens")


def chunks_by_id(db: pw.Database, ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for start in range(0, len(ids), 500):
        part = list(ids[start:start + 500])
        for row in _rows(db, CHUNK_COLUMNS, f"{CHUNK_SQL} WHERE c.id IN ({','.join('?' * len(part))})", part):
            row["location"] = json.loads(row["location"])
            out[row["id"]] = row
    return out


def bm25(db: pw.Database, match: str, limit: int, source_ids: Sequence[int] | None) -> list[tuple[int, float]]:
    """(chunk id, bm25 score: lower is better) of the best `limit` chunks matching `match`
    (an FTS5 query), within `source_ids` when given."""
    if not match:
        return []
    sql = f"SELECT rowid, bm25({FTS_TABLE}) AS score FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH ?"
    args: list[Any] = [match]
    if source_ids is not None:
        if not source_ids:
            return []
        sql += (" AND rowid IN (SELECT c.id FROM doc_chunk c JOIN doc_file f ON f.id = c.file_id "
                f"WHERE f.source_id IN ({','.join('?' * len(source_ids))}))")
        args += list(source_ids)
    sql += " ORDER BY score LIMIT ?"
    return [(r[0], r[1]) for r in db.execute_sql(sql, (*args, limit)).fetchall()]


def chunk_texts_of_sources(db: pw.Database, source_ids: Sequence[int]) -> list[tuple[int, str]]:
    if not source_ids:
        return []
    return [(r[0], r[1]) for r in db.execute_sql(
        f"SELECT c.id, c.text FROM doc_chunk c JOIN doc_file f ON f.id = c.file_id "
        f"WHERE f.source_id IN ({','.join('?' * len(source_ids))})", list(source_ids)).fetchall()]


def chunk_ids_of_sources(db: pw.Database, source_ids: Sequence[int]) -> list[int]:
    if not source_ids:
        return []
    return [r[0] for r in db.execute_sql(
        f"SELECT c.id FROM doc_chunk c JOIN doc_file f ON f.id = c.file_id "
        f"WHERE f.source_id IN ({','.join('?' * len(source_ids))})", list(source_ids)).fetchall()]


# -- projects ------------------------------------------------------------------------------

def add_project(db: pw.Database, name: str, instructions: str) -> dict[str, Any]:
    db.execute_sql("INSERT INTO project (name, instructions) VALUES (?, ?)", (name, instructions))
    return project_named(db, name) or {}


def project_named(db: pw.Database, name: str) -> dict[str, Any] | None:
    found = _rows(db, PROJECT_COLUMNS, f"SELECT {', '.join(PROJECT_COLUMNS)} FROM project WHERE name = ?", (name,))
    return found[0] if found else None


def projects(db: pw.Database) -> list[dict[str, Any]]:
    return _rows(db, PROJECT_COLUMNS, f"SELECT {', '.join(PROJECT_COLUMNS)} FROM project ORDER BY name")


def delete_project(db: pw.Database, project_id: int) -> None:
    db.execute_sql("DELETE FROM project WHERE id = ?", (project_id,))


def set_instructions(db: pw.Database, project_id: int, text: str) -> None:
    db.execute_sql("UPDATE project SET instructions = ? WHERE id = ?", (text, project_id))


def add_project_sources(db: pw.Database, project_id: int, source_ids: Iterable[int]) -> None:
    with db.atomic():
        for sid in source_ids:
            db.execute_sql("INSERT OR IGNORE INTO project_doc (project_id, source_id) VALUES (?, ?)",
                           (project_id, sid))


def project_sources(db: pw.Database, project_id: int) -> list[int]:
    return [r[0] for r in db.execute_sql(
        "SELECT source_id FROM project_doc WHERE project_id = ? ORDER BY source_id", (project_id,)).fetchall()]


def set_chat_project(db: pw.Database, conversation_id: int, project_id: int | None) -> None:
    if project_id is None:
        db.execute_sql("DELETE FROM project_chat WHERE conversation_id = ?", (conversation_id,))
    else:
        db.execute_sql("INSERT INTO project_chat (conversation_id, project_id) VALUES (?, ?) "
                       "ON CONFLICT(conversation_id) DO UPDATE SET project_id = excluded.project_id",
                       (conversation_id, project_id))


def project_of_chat(db: pw.Database, conversation_id: int) -> int | None:
    row = db.execute_sql("SELECT project_id FROM project_chat WHERE conversation_id = ?",
                         (conversation_id,)).fetchone()
    return row[0] if row else None


def chats_of_project(db: pw.Database, project_id: int) -> list[int]:
    return [r[0] for r in db.execute_sql(
        "SELECT conversation_id FROM project_chat WHERE project_id = ? ORDER BY conversation_id",
        (project_id,)).fetchall()]
