"""Conversations, messages and settings in SQLite (peewee, WAL)."""

from .store import Store

__all__ = ["Store"]
