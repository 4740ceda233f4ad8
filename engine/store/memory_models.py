"""Peewee tables for long-term memories and running conversation summaries.

Bound to a database by `engine.store.memories` and `engine.store.summaries`;
created by migration 3 (`create_memory_schema`).
"""

from __future__ import annotations

import peewee as pw
from playhouse.sqlite_ext import AutoIncrementField

from .models import BaseModel, Conversation, Message, utcnow


class Memory(BaseModel):
    # AUTOINCREMENT: a forgotten memory's id is never reused, so a past answer's provenance
    # can never point at a different memory.
    id = AutoIncrementField()
    text = pw.TextField()
    created_at = pw.DateTimeField(default=utcnow)
    updated_at = pw.DateTimeField(default=utcnow, index=True)
    # SET NULL: purging the chat a memory came from must not take the memory with it.
    source_conversation = pw.ForeignKeyField(Conversation, null=True, on_delete="SET NULL")
    source_message = pw.ForeignKeyField(Message, null=True, on_delete="SET NULL")
    last_used_at = pw.DateTimeField(null=True)
    times_used = pw.IntegerField(default=0)
    origin = pw.CharField(max_length=16, default="chat")  # see engine.memory.records.Origin

    class Meta:
        table_name = "memory"


class MemoryVector(BaseModel):
    """An embedding of a memory's text, kept only while the optional embedder is in use."""

    memory = pw.ForeignKeyField(Memory, primary_key=True, on_delete="CASCADE")
    model = pw.CharField(max_length=64)
    vector = pw.BlobField()  # float32, L2-normalised

    class Meta:
        table_name = "memory_vector"


class ConversationSummary(BaseModel):
    """A running summary of a conversation's lineage from its root through `through_message`.

    Keyed by the last message it covers, so a summary stays valid on its own branch and a
    switch to another branch simply finds (or builds) a different one.
    """

    conversation = pw.ForeignKeyField(Conversation, on_delete="CASCADE")
    through_message = pw.ForeignKeyField(Message, on_delete="CASCADE")
    text = pw.TextField()
    covered = pw.IntegerField()  # messages folded into it
    created_at = pw.DateTimeField(default=utcnow)

    class Meta:
        table_name = "conversation_summary"
        indexes = ((("conversation", "through_message"), True),)


class MessageVector(BaseModel):
    """An embedding of a past chat message ("reference chat history"), with the model it came from.

    Created by migration 6; rows whose `model` is not the embedder in use are re-embedded.
    """

    message = pw.ForeignKeyField(Message, primary_key=True, on_delete="CASCADE")
    model = pw.CharField(max_length=64)
    vector = pw.BlobField()  # float32, L2-normalised

    class Meta:
        table_name = "message_vector"


MEMORY_TABLES = (Memory, MemoryVector, ConversationSummary)


def create_message_vectors(db: pw.Database) -> None:
    with db.bind_ctx((MessageVector,), bind_refs=False, bind_backrefs=False):
        db.create_tables([MessageVector], safe=True)


def create_memory_schema(db: pw.Database) -> None:
    with db.bind_ctx(MEMORY_TABLES, bind_refs=False, bind_backrefs=False):
        db.create_tables(MEMORY_TABLES)
    # Porter stemming lets "allergy" find "allergic", "lives" find "live".
    db.execute_sql(
        "CREATE VIRTUAL TABLE IF NOT EXISTS memory_fts USING fts5("
        "text, content='memory', content_rowid='id', tokenize='porter unicode61')"
    )
    db.execute_sql(
        "CREATE TRIGGER IF NOT EXISTS memory_fts_ai AFTER INSERT ON memory BEGIN "
        "INSERT INTO memory_fts(rowid, text) VALUES (new.id, new.text); END"
    )
    db.execute_sql(
        "CREATE TRIGGER IF NOT EXISTS memory_fts_ad AFTER DELETE ON memory BEGIN "
        "INSERT INTO memory_fts(memory_fts, rowid, text) VALUES ('delete', old.id, old.text); END"
    )
    db.execute_sql(
        "CREATE TRIGGER IF NOT EXISTS memory_fts_au AFTER UPDATE OF text ON memory BEGIN "
        "INSERT INTO memory_fts(memory_fts, rowid, text) VALUES ('delete', old.id, old.text); "
        "INSERT INTO memory_fts(rowid, text) VALUES (new.id, new.text); END"
    )
