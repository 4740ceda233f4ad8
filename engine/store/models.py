"""Peewee tables. Bound to a database by `Store`; nothing outside engine/store sees them."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import peewee as pw
from playhouse.shortcuts import ThreadSafeDatabaseMetadata

from ..records import MessageStatus, Role


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


class JSONField(pw.TextField):
    def db_value(self, value):
        return None if value is None else json.dumps(value, ensure_ascii=False)

    def python_value(self, value):
        return None if value is None else json.loads(value)


class EnumField(pw.CharField):
    def __init__(self, enum_cls, **kwargs):
        self.enum_cls = enum_cls
        super().__init__(max_length=16, **kwargs)

    def db_value(self, value):
        return None if value is None else self.enum_cls(value).value

    def python_value(self, value):
        return None if value is None else self.enum_cls(value)


class BaseModel(pw.Model):
    # Made by peewee's metaclass, declared for type checkers only (an annotation is no field):
    # the primary key every table has, an int on a row and a field expression on the class.
    id: Any

    class Meta:
        database = None  # bound by Store, per thread
        # Each thread binds the tables to the database of the Store it is using, so two
        # stores in one process (a temporary chat's beside the user's) never cross.
        model_metadata_class = ThreadSafeDatabaseMetadata


class Conversation(BaseModel):
    title = pw.TextField(default="")
    created_at = pw.DateTimeField(default=utcnow)
    updated_at = pw.DateTimeField(default=utcnow, index=True)
    model = pw.TextField(null=True)
    settings = JSONField(default=dict)
    pinned = pw.BooleanField(default=False)
    deleted_at = pw.DateTimeField(null=True, index=True)  # soft delete, so delete can be undone
    current_leaf = pw.IntegerField(null=True)  # the message whose path the user sees


class Message(BaseModel):
    conversation = pw.ForeignKeyField(Conversation, backref="messages", on_delete="CASCADE")
    parent = pw.ForeignKeyField("self", null=True, backref="children", on_delete="CASCADE")
    # the foreign keys' raw ids, as peewee makes them (declared for type checkers only)
    conversation_id: int
    parent_id: int | None
    role = EnumField(Role)
    content = pw.TextField(default="")
    status = EnumField(MessageStatus, index=True)
    created_at = pw.DateTimeField(default=utcnow)
    updated_at = pw.DateTimeField(default=utcnow)
    viewed_at = pw.DateTimeField(default=utcnow)  # last shown; picks the branch to show
    model = pw.TextField(null=True)
    backend = pw.TextField(null=True)
    prompt_tokens = pw.IntegerField(null=True)
    completion_tokens = pw.IntegerField(null=True)
    time_to_first_token = pw.FloatField(null=True)
    tokens_per_second = pw.FloatField(null=True)
    error = pw.TextField(null=True)
    sampling = JSONField(default=dict)
    meta = JSONField(default=dict)
    # The Store (one per process) that writes this answer while it streams; recovery at
    # start marks a `streaming` message interrupted only once its owner is gone.
    owner = pw.TextField(null=True)
    # An answer's thinking (Reasoning events), kept apart from its content, and how long
    # the model spent on it in seconds (None: it did not think apart).
    reasoning = pw.TextField(default="")
    reasoning_seconds = pw.FloatField(null=True)


class Setting(BaseModel):
    key = pw.CharField(primary_key=True)
    value = JSONField()


class SchemaMigration(BaseModel):
    version = pw.IntegerField(primary_key=True)
    name = pw.TextField()
    applied_at = pw.DateTimeField(default=utcnow)

    class Meta:
        table_name = "schema_migrations"


TABLES = (Conversation, Message, Setting, SchemaMigration)
