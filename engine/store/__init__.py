"""Conversations, messages and settings in SQLite (peewee, WAL); every SQL statement of Wren
lives in this package (tests/test_sql_in_store.py): the Store, and named functions per area
(memories, vectors, summaries, past_messages, privacy)."""

from .store import Store

__all__ = ["Store"]
