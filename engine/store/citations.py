"""The SQL of an answer's citations: the library passages it cited, kept with the message
(migration 9) so its sources show when the chat is read back. A row goes with its message
(the foreign key cascades), so deleting and purging a chat removes the passage text too."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import peewee as pw

TABLE = "message_citation"
SCHEMA = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} (message_id INTEGER NOT NULL REFERENCES message(id) ON DELETE CASCADE, "
    "number INTEGER NOT NULL, path TEXT NOT NULL, location TEXT NOT NULL, place TEXT NOT NULL, "
    "passage TEXT NOT NULL, chunk_id INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (message_id, number))",
)
COLUMNS = ("message_id", "number", "path", "location", "place", "passage", "chunk_id", "cited_by")


def create_schema(db: pw.Database) -> None:
    for sql in SCHEMA:
        db.execute_sql(sql)


def add_cited_by(db: pw.Database) -> None:
    """Migration 10: who tied each citation to its answer (engine.events.CitedBy's value);
    those kept before it were all the model's markers."""
    if "cited_by" not in {c.name for c in db.get_columns(TABLE)}:
        db.execute_sql(f"ALTER TABLE {TABLE} ADD COLUMN cited_by TEXT NOT NULL DEFAULT 'marker'")


def save(db: pw.Database, message_id: int, cited: Sequence[dict[str, Any]]) -> None:
    """Replace the citations of `message_id` with `cited` (dicts of COLUMNS but message_id)."""
    with db.atomic():
        db.execute_sql(f"DELETE FROM {TABLE} WHERE message_id = ?", (message_id,))
        for c in cited:
            db.execute_sql(f"INSERT INTO {TABLE} ({', '.join(COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                           (message_id, c["number"], c["path"], json.dumps(c["location"]), c["place"],
                            c["passage"], c["chunk_id"], c.get("cited_by", "marker")))


def of_messages(db: pw.Database, message_ids: Iterable[int]) -> dict[int, list[dict[str, Any]]]:
    """{message id: its citations in the order of their numbers} for those that have any."""
    ids = list(message_ids)
    found: dict[int, list[dict[str, Any]]] = {}
    for start in range(0, len(ids), 500):
        part = ids[start:start + 500]
        rows = db.execute_sql(f"SELECT {', '.join(COLUMNS)} FROM {TABLE} WHERE message_id IN "
                              f"({','.join('?' * len(part))}) ORDER BY message_id, rowid", part).fetchall()
        for row in rows:
            c = dict(zip(COLUMNS, row))
            c["location"] = json.loads(c["location"])
            found.setdefault(c.pop("message_id"), []).append(c)
    return found


def scrub(db: pw.Database, removed: dict[int, str], replacement: str) -> int:
    """Replace the passage of each citation of a removed chunk (id -> text; by id, or by its
    text where the file was indexed again since) with `replacement`; how many changed."""
    changed = 0
    ids, texts = list(removed), list(set(removed.values()))
    for start in range(0, max(len(ids), len(texts)), 400):
        id_part, text_part = ids[start:start + 400], texts[start:start + 400]
        changed += db.execute_sql(
            f"UPDATE {TABLE} SET passage = ? WHERE chunk_id IN ({','.join('?' * len(id_part))}) "
            f"OR passage IN ({','.join('?' * len(text_part))})", [replacement, *id_part, *text_part]).rowcount
    return changed
