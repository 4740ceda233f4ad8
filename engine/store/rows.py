"""Message rows written on the Send path in plain SQL. Building a query through peewee
costs several times the statement itself (about 0.2 ms a query on a small machine) and a
Send writes two messages; the values still go through the peewee fields' own conversions,
so a row written here is the row `Message.create` writes."""

from __future__ import annotations

import sqlite3
from typing import Any

import peewee as pw

from ..errors import NotFound
from .models import Conversation, Message, Setting

_INSERTS: dict[tuple[str, ...], str] = {}  # the INSERT for each set of columns given


def _key(record_id: Any) -> Any:
    """A row id as peewee's id field passes it to SQLite."""
    return Conversation._meta.fields["id"].db_value(record_id)


def check_place(conn: sqlite3.Connection, conversation_id: int, parent_id: int | None) -> None:
    """NotFound unless the conversation exists (not deleted) and holds `parent_id`."""
    key = _key(conversation_id)
    if conn.execute("SELECT 1 FROM conversation WHERE id = ? AND deleted_at IS NULL", (key,)).fetchone() is None:
        raise NotFound(f"no conversation with id {conversation_id}")
    if parent_id is not None:
        row = conn.execute("SELECT conversation_id FROM message WHERE id = ?",
                           (_key(parent_id),)).fetchone()
        if row is None or row[0] != conversation_id:
            raise NotFound(f"no message {parent_id} in conversation {conversation_id}")


def insert_message(conn: sqlite3.Connection, msg: Message) -> int:
    """Insert the unsaved `msg` (its fields as set, defaults included, as peewee's save
    inserts them); its new id."""
    data: dict[str, Any] = msg.__data__
    fields = Message._meta.fields
    names = tuple(n for n in data if n != "id")
    sql = _INSERTS.get(names)
    if sql is None:
        columns = ", ".join(f'"{fields[n].column_name}"' for n in names)
        sql = _INSERTS[names] = f'INSERT INTO "message" ({columns}) VALUES ({", ".join("?" * len(names))})'
    cursor = conn.execute(sql, [fields[n].db_value(data[n]) for n in names])
    assert cursor.lastrowid is not None
    return cursor.lastrowid


def show_leaf(conn: sqlite3.Connection, conversation_id: int, message_id: int, now: Any) -> None:
    """The conversation shows `message_id`'s branch and was updated `now`."""
    conn.execute("UPDATE conversation SET current_leaf = ?, updated_at = ? WHERE id = ?",
                 (message_id, Conversation.updated_at.db_value(now), conversation_id))


def sibling_ids(conn: sqlite3.Connection, conversation_id: int, parent_id: int | None) -> list[int]:
    """The ids of the messages under `parent_id` (None: the roots), oldest first."""
    if parent_id is None:
        rows = conn.execute("SELECT id FROM message WHERE conversation_id = ? AND parent_id IS NULL ORDER BY id",
                            (conversation_id,))
    else:
        rows = conn.execute("SELECT id FROM message WHERE conversation_id = ? AND parent_id = ? ORDER BY id",
                            (conversation_id, parent_id))
    return [r[0] for r in rows]


# -- reads: a Send reads its conversation, the branch it follows and its settings --------

_SELECTS: dict[type, str] = {}


def _select(model: type[pw.Model]) -> str:
    sql = _SELECTS.get(model)
    if sql is None:
        columns = ", ".join(f'"{f.column_name}"' for f in model._meta.sorted_fields)
        sql = _SELECTS[model] = f'SELECT {columns} FROM "{model._meta.table_name}"'
    return sql


def _loaded(model: type[pw.Model], found: list[tuple]) -> list[Any]:
    """Row objects as peewee's own query makes them (each value through its field)."""
    fields = model._meta.sorted_fields
    out = []
    for row in found:
        item = model(__no_default__=1)
        data = item.__data__
        for field, value in zip(fields, row):
            data[field.name] = None if value is None else field.python_value(value)
        out.append(item)
    return out


def conversation(conn: sqlite3.Connection, conversation_id: int) -> Conversation:
    """The conversation (not deleted); NotFound."""
    found = conn.execute(_select(Conversation) + " WHERE id = ? AND deleted_at IS NULL",
                         (_key(conversation_id),)).fetchall()
    if not found:
        raise NotFound(f"no conversation with id {conversation_id}")
    return _loaded(Conversation, found)[0]


def conversation_messages(conn: sqlite3.Connection, conversation_id: int) -> list[Message]:
    """Every message of the conversation, every branch."""
    return _loaded(Message, conn.execute(_select(Message) + " WHERE conversation_id = ?", (conversation_id,)).fetchall())


def settings(conn: sqlite3.Connection, keys: tuple[str, ...]) -> dict[str, Any]:
    """{key: value} for each of `keys` that is set."""
    if not keys:
        return {}
    value = Setting.value
    found = conn.execute(f'SELECT key, value FROM setting WHERE key IN ({", ".join("?" * len(keys))})', keys)
    return {key: None if raw is None else value.python_value(raw) for key, raw in found}
