"""Numbered schema migrations, each applied once inside a transaction and recorded."""

from __future__ import annotations

from typing import Callable

import peewee as pw

from engine.store.models import Conversation, Message, SchemaMigration, Setting


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


MIGRATIONS: list[tuple[int, str, Callable[[pw.Database], None]]] = [
    (1, "initial", _m001_initial),
    (2, "message_text_search", _m002_message_text_search),
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
