"""Numbered schema migrations, each applied once inside a transaction and recorded."""

from __future__ import annotations

from collections.abc import Callable

import peewee as pw

from .models import Conversation, Message, SchemaMigration, Setting


def _m001_initial(db: pw.Database) -> None:
    db.create_tables([Conversation, Message, Setting])


def _m002_message_text_search(db: pw.Database) -> None:
    # Search over titles and message text without scanning every row (desktop sidebar).
    db.execute_sql(
        "CREATE VIRTUAL TABLE IF NOT EXISTS message_fts USING fts5("
        "content, content='message', content_rowid='id', tokenize='unicode61')"
    )
    db.execute_sql(
        "CREATE TRIGGER IF NOT EXISTS message_fts_ai AFTER INSERT ON message BEGIN "
        "INSERT INTO message_fts(rowid, content) VALUES (new.id, new.content); END"
    )
    db.execute_sql(
        "CREATE TRIGGER IF NOT EXISTS message_fts_ad AFTER DELETE ON message BEGIN "
        "INSERT INTO message_fts(message_fts, rowid, content) "
        "VALUES ('delete', old.id, old.content); END"
    )
    db.execute_sql(
        "CREATE TRIGGER IF NOT EXISTS message_fts_au AFTER UPDATE OF content ON message BEGIN "
        "INSERT INTO message_fts(message_fts, rowid, content) "
        "VALUES ('delete', old.id, old.content); "
        "INSERT INTO message_fts(rowid, content) VALUES (new.id, new.content); END"
    )
    db.execute_sql("INSERT INTO message_fts(message_fts) VALUES ('rebuild')")


def _m003_memory(db: pw.Database) -> None:
    # Long-term memories (with their FTS index) and running conversation summaries.
    from .memory_models import create_memory_schema

    create_memory_schema(db)


def _m004_message_viewed_at(db: pw.Database) -> None:
    # Remembers which branch the user looked at last, so `< 2/3 >` choices persist.
    # Migration 1 builds tables from the current models, which already have the column.
    columns = {c.name for c in db.get_columns("message")}
    if "viewed_at" not in columns:
        db.execute_sql("ALTER TABLE message ADD COLUMN viewed_at DATETIME")
    db.execute_sql("UPDATE message SET viewed_at = created_at WHERE viewed_at IS NULL")


def _m005_message_owner(db: pw.Database) -> None:
    # Who writes a streaming answer, so a second Wren process leaves it alone (engine/store/locks.py).
    columns = {c.name for c in db.get_columns("message")}
    if "owner" not in columns:
        db.execute_sql("ALTER TABLE message ADD COLUMN owner TEXT")


def _m006_message_vectors(db: pw.Database) -> None:
    # Sentence embeddings of past messages, tagged with their model (engine/memory/vectors.py).
    from .memory_models import create_message_vectors

    create_message_vectors(db)


def _m007_message_reasoning(db: pw.Database) -> None:
    # An answer's thinking apart from its text, and the seconds it took (engine/inference/reasoning.py).
    columns = {c.name for c in db.get_columns("message")}
    if "reasoning" not in columns:
        db.execute_sql("ALTER TABLE message ADD COLUMN reasoning TEXT NOT NULL DEFAULT ''")
    if "reasoning_seconds" not in columns:
        db.execute_sql("ALTER TABLE message ADD COLUMN reasoning_seconds REAL")


def _m008_document_library(db: pw.Database) -> None:
    # The document library (sources, files, chunks, their index and vectors) and projects
    # (engine/library, engine/store/library.py).
    from .library import create_schema

    create_schema(db)


def _m009_message_citations(db: pw.Database) -> None:
    # The library passages an answer cited, kept with it (engine/store/citations.py).
    from .citations import create_schema

    create_schema(db)


def _m010_citation_cited_by(db: pw.Database) -> None:
    # Who tied a citation to its answer: the model's [n], or Wren's quote or meaning match.
    from .citations import add_cited_by

    add_cited_by(db)


MIGRATIONS: list[tuple[int, str, Callable[[pw.Database], None]]] = [
    (1, "initial", _m001_initial),
    (2, "message_text_search", _m002_message_text_search),
    (3, "memory", _m003_memory),
    (4, "message_viewed_at", _m004_message_viewed_at),
    (5, "message_owner", _m005_message_owner),
    (6, "message_vectors", _m006_message_vectors),
    (7, "message_reasoning", _m007_message_reasoning),
    (8, "document_library", _m008_document_library),
    (9, "message_citations", _m009_message_citations),
    (10, "citation_cited_by", _m010_citation_cited_by),
]


def applied_versions(db: pw.Database) -> set[int]:
    if not db.table_exists(SchemaMigration._meta.table_name):
        return set()
    return {row.version for row in SchemaMigration.select(SchemaMigration.version)}


def migrate(db: pw.Database) -> list[int]:
    """Apply every migration not yet recorded; return the versions applied now."""
    db.create_tables([SchemaMigration], safe=True)
    done = applied_versions(db)
    newly = []
    for version, name, apply in MIGRATIONS:
        if version in done:
            continue
        with db.atomic():
            apply(db)
            SchemaMigration.create(version=version, name=name)
        newly.append(version)
    return newly


def latest_version() -> int:
    return MIGRATIONS[-1][0]
