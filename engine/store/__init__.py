"""Conversations, messages and settings in SQLite (peewee, WAL)."""

from engine.store.store import Store

__all__ = ["Store"]
