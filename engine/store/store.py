"""The conversation store: every read and write of conversations, messages and settings."""

from __future__ import annotations

import functools
import re
import sqlite3
from pathlib import Path
from typing import Any, Iterable

import peewee as pw

from engine.errors import NotFound, StoreError
from engine.records import ConversationInfo, MessageInfo, MessageStatus, Role
from engine.store.migrations import migrate
from engine.store.models import TABLES, Conversation, Message, Setting, utcnow

_PRAGMAS = {
    "journal_mode": "wal",
    "synchronous": "normal",  # with WAL: a killed process loses nothing committed
    "foreign_keys": 1,
    "busy_timeout": 3000,
}


def _guarded(method):
    """Turn SQLite's terse failures into errors that say what to do."""

    @functools.wraps(method)
    def wrapper(self: "Store", *args, **kwargs):
        self.bind()
        try:
            return method(self, *args, **kwargs)
        except (pw.OperationalError, sqlite3.OperationalError) as exc:
            raise self._explain(exc) from exc
        except (pw.DatabaseError, sqlite3.DatabaseError) as exc:
            raise StoreError(f"the database {self.path} is unusable: {exc}") from exc

    return wrapper


class Store:
    """Owns one SQLite database. Not thread-safe: the engine calls it from one worker."""

    def __init__(self, path: Path | str, *, busy_timeout_ms: int = 3000, first_id: int | None = None):
        """`first_id`: ids of new conversations and messages start above it (an in-memory
        store for temporary chats uses it so its ids never collide with the user's)."""
        self.path = str(path)
        in_memory = self.path == ":memory:"
        if not in_memory:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        pragmas = dict(_PRAGMAS, busy_timeout=busy_timeout_ms)
        # An in-memory database exists per connection: share one across threads.
        self.db = pw.SqliteDatabase(self.path, pragmas=pragmas, check_same_thread=False,
                                    thread_safe=not in_memory)
        self._open(first_id)

    def bind(self) -> None:
        """Point this thread's table classes at this store's database."""
        if Conversation._meta.database is not self.db:
            self.db.bind(TABLES, bind_refs=False, bind_backrefs=False)

    @_guarded
    def _open(self, first_id: int | None) -> None:
        self.db.connect(reuse_if_open=True)
        migrate(self.db)
        self.recover_interrupted()
        if first_id is not None and Conversation.select().count() == 0:
            # SQLite numbers new rows after the largest id: a hidden placeholder sets the floor.
            Conversation.insert(id=first_id, title="", deleted_at=utcnow()).execute()
            Message.insert(id=first_id, conversation=first_id, role=Role.SYSTEM, content="",
                           status=MessageStatus.COMPLETE).execute()

    def _explain(self, exc: Exception) -> StoreError:
        text = str(exc).lower()
        if "locked" in text or "busy" in text:
            return StoreError(
                f"the database {self.path} is locked by another program; nothing was "
                "changed — close the other program or try again"
            )
        if "readonly" in text or "read-only" in text:
            return StoreError(
                f"the database {self.path} is read-only; nothing was changed — check the "
                "file's permissions or the disk"
            )
        if "unable to open" in text:
            return StoreError(f"cannot open the database {self.path}: {exc}")
        return StoreError(f"database error in {self.path}: {exc}")

    def close(self) -> None:
        if not self.db.is_closed():
            self.db.close()

    # -- conversations -------------------------------------------------------------

    @_guarded
    def create_conversation(
        self, title: str = "", model: str | None = None, settings: dict | None = None
    ) -> ConversationInfo:
        conv = Conversation.create(title=title, model=model, settings=settings or {})
        return _conversation_info(conv)

    @_guarded
    def get_conversation(self, conversation_id: int) -> ConversationInfo:
        return _conversation_info(self._conversation(conversation_id))

    def _conversation(self, conversation_id: int) -> Conversation:
        conv = Conversation.get_or_none(
            (Conversation.id == conversation_id) & Conversation.deleted_at.is_null()
        )
        if conv is None:
            raise NotFound(f"no conversation with id {conversation_id}")
        return conv

    @_guarded
    def list_conversations(self, query: str | None = None, limit: int = 500) -> list[ConversationInfo]:
        """Pinned first, then newest first; `query` matches titles and message text."""
        select = Conversation.select().where(Conversation.deleted_at.is_null())
        if query and query.strip():
            ids = self._search_ids(query)
            select = select.where(Conversation.id.in_(ids) if ids else Conversation.id < 0)
        rows = select.order_by(Conversation.pinned.desc(), Conversation.updated_at.desc(), Conversation.id.desc()).limit(limit)
        return [_conversation_info(c) for c in rows]

    def _search_ids(self, query: str) -> list[int]:
        like = f"%{_escape_like(query.strip())}%"
        ids = {
            c.id
            for c in Conversation.select(Conversation.id).where(
                Conversation.title ** like | Conversation.title.contains(query.strip())
            )
        }
        fts = _fts_query(query)
        if fts:
            cursor = self.db.execute_sql(
                "SELECT DISTINCT m.conversation_id FROM message_fts f "
                "JOIN message m ON m.id = f.rowid WHERE message_fts MATCH ? LIMIT 1000",
                (fts,),
            )
            ids.update(row[0] for row in cursor.fetchall())
        return sorted(ids)

    @_guarded
    def update_conversation(self, conversation_id: int, **fields: Any) -> ConversationInfo:
        allowed = {"title", "model", "settings", "pinned"}
        unknown = set(fields) - allowed
        if unknown:
            raise ValueError(f"cannot update conversation fields {sorted(unknown)}")
        conv = self._conversation(conversation_id)
        for key, value in fields.items():
            setattr(conv, key, value)
        conv.updated_at = utcnow() if "title" not in fields else conv.updated_at
        conv.save()
        return _conversation_info(conv)

    @_guarded
    def delete_conversation(self, conversation_id: int) -> None:
        """Soft delete: hidden at once, restorable until purged."""
        conv = self._conversation(conversation_id)
        conv.deleted_at = utcnow()
        conv.save()

    @_guarded
    def restore_conversation(self, conversation_id: int) -> ConversationInfo:
        conv = Conversation.get_or_none(Conversation.id == conversation_id)
        if conv is None:
            raise NotFound(f"no conversation with id {conversation_id}")
        conv.deleted_at = None
        conv.save()
        return _conversation_info(conv)

    @_guarded
    def purge_deleted(self) -> int:
        with self.db.atomic():
            return Conversation.delete().where(Conversation.deleted_at.is_null(False)).execute()

    # -- messages ------------------------------------------------------------------

    @_guarded
    def add_message(
        self,
        conversation_id: int,
        role: Role,
        content: str,
        *,
        parent_id: int | None,
        status: MessageStatus = MessageStatus.COMPLETE,
        **fields: Any,
    ) -> MessageInfo:
        with self.db.atomic():
            conv = self._conversation(conversation_id)
            if parent_id is not None:
                parent = Message.get_or_none(Message.id == parent_id)
                if parent is None or parent.conversation_id != conversation_id:
                    raise NotFound(f"no message {parent_id} in conversation {conversation_id}")
            msg = Message.create(
                conversation=conv.id, parent=parent_id, role=role, content=content,
                status=status, **fields,
            )
            conv.current_leaf = msg.id
            conv.updated_at = utcnow()
            conv.save()
        return self._info(msg)

    @_guarded
    def update_message(self, message_id: int, **fields: Any) -> None:
        """Checkpoint or finish a message; one short transaction."""
        fields["updated_at"] = utcnow()
        Message.update(**fields).where(Message.id == message_id).execute()

    @_guarded
    def get_message(self, message_id: int) -> MessageInfo:
        return self._info(self._message(message_id))

    def _message(self, message_id: int) -> Message:
        msg = Message.get_or_none(Message.id == message_id)
        if msg is None:
            raise NotFound(f"no message with id {message_id}")
        return msg

    @_guarded
    def messages(self, conversation_id: int) -> list[MessageInfo]:
        """The messages the user sees: root to the current leaf along parent links."""
        conv = self._conversation(conversation_id)
        rows = {m.id: m for m in Message.select().where(Message.conversation == conv.id)}
        chain: list[Message] = []
        node = rows.get(conv.current_leaf) if conv.current_leaf else None
        while node is not None:
            chain.append(node)
            node = rows.get(node.parent_id) if node.parent_id else None
        chain.reverse()
        siblings: dict[int | None, list[int]] = {}
        for m in sorted(rows.values(), key=lambda m: m.id):
            siblings.setdefault(m.parent_id, []).append(m.id)
        return [self._info(m, siblings[m.parent_id]) for m in chain]

    _CHAIN_COLUMNS = frozenset({"id", "role", "content", "status"})

    @_guarded
    def ancestor_rows(self, message_id: int, columns: tuple[str, ...] = ("id",)) -> list[tuple]:
        """`columns` of `message_id` and its ancestors, oldest first, in one recursive
        query (about a millisecond for a 1,000-message branch)."""
        unknown = set(columns) - self._CHAIN_COLUMNS
        if unknown or not columns:
            raise ValueError(f"ancestor_rows reads {sorted(self._CHAIN_COLUMNS)}, not {sorted(unknown)}")
        picked = ", ".join(columns)
        rows = self.db.execute_sql(
            f"WITH RECURSIVE chain(id, parent_id, role, content, status, depth) AS ("
            " SELECT id, parent_id, role, content, status, 0 FROM message WHERE id = ?"
            " UNION ALL SELECT m.id, m.parent_id, m.role, m.content, m.status, chain.depth + 1"
            " FROM message AS m JOIN chain ON m.id = chain.parent_id)"
            f" SELECT {picked} FROM chain ORDER BY depth DESC",
            (message_id,),
        ).fetchall()
        if not rows:
            raise NotFound(f"no message with id {message_id}")
        return rows

    def _ancestor_ids(self, message_id: int) -> list[int]:
        return [r[0] for r in self.ancestor_rows(message_id)]

    @_guarded
    def lineage(self, message_id: int) -> list[MessageInfo]:
        """`message_id` and its ancestors, oldest first: the history a reply sees."""
        ids = self._ancestor_ids(message_id)
        rows = {m.id: m for m in Message.select().where(Message.id.in_(ids))}
        conversation_id = rows[message_id].conversation_id
        siblings: dict[int | None, list[int]] = {}
        for m in Message.select(Message.id, Message.parent).where(
            Message.conversation == conversation_id
        ).order_by(Message.id):
            siblings.setdefault(m.parent_id, []).append(m.id)
        return [self._info(rows[i], siblings[rows[i].parent_id]) for i in ids]

    @_guarded
    def siblings(self, message_id: int) -> list[int]:
        msg = self._message(message_id)
        same_parent = Message.parent.is_null() if msg.parent_id is None else Message.parent == msg.parent_id
        return [
            m.id
            for m in Message.select(Message.id)
            .where((Message.conversation == msg.conversation_id) & same_parent)
            .order_by(Message.id)
        ]

    @_guarded
    def switch_to(self, message_id: int) -> None:
        """Show `message_id`'s branch, continuing below it along the most recently viewed
        children, and remember the choice."""
        msg = self._message(message_id)
        chain = [msg]
        while True:
            child = (
                Message.select()
                .where(Message.parent == chain[-1].id)
                .order_by(Message.viewed_at.desc(), Message.id.desc())
                .first()
            )
            if child is None:
                break
            chain.append(child)
        with self.db.atomic():
            ancestors = self._ancestor_ids(message_id)
            Message.update(viewed_at=utcnow()).where(
                Message.id.in_(ancestors + [m.id for m in chain])
            ).execute()
            Conversation.update(current_leaf=chain[-1].id).where(
                Conversation.id == msg.conversation_id
            ).execute()

    @_guarded
    def recover_interrupted(self) -> int:
        """Messages left `streaming` by a crash become `interrupted`."""
        return (
            Message.update(status=MessageStatus.INTERRUPTED, updated_at=utcnow())
            .where(Message.status == MessageStatus.STREAMING)
            .execute()
        )

    def _info(self, msg: Message, siblings: Iterable[int] | None = None) -> MessageInfo:
        siblings = list(self.siblings(msg.id) if siblings is None else siblings)
        return MessageInfo(
            id=msg.id, conversation_id=msg.conversation_id, parent_id=msg.parent_id,
            role=msg.role, content=msg.content, status=msg.status, created_at=msg.created_at,
            model=msg.model, backend=msg.backend, prompt_tokens=msg.prompt_tokens,
            completion_tokens=msg.completion_tokens, time_to_first_token=msg.time_to_first_token,
            tokens_per_second=msg.tokens_per_second, error=msg.error, sampling=msg.sampling or {},
            meta=msg.meta or {}, sibling_index=siblings.index(msg.id) if msg.id in siblings else 0,
            sibling_count=max(1, len(siblings)),
        )

    # -- settings ------------------------------------------------------------------

    @_guarded
    def get_setting(self, key: str, default: Any = None) -> Any:
        row = Setting.get_or_none(Setting.key == key)
        return default if row is None else row.value

    @_guarded
    def set_setting(self, key: str, value: Any) -> None:
        """Save a setting; None clears it (the default applies again)."""
        if value is None:
            Setting.delete().where(Setting.key == key).execute()
        else:
            Setting.insert(key=key, value=value).on_conflict_replace().execute()

    @_guarded
    def integrity_check(self) -> str:
        return self.db.execute_sql("PRAGMA integrity_check").fetchone()[0]


def _conversation_info(conv: Conversation) -> ConversationInfo:
    return ConversationInfo(
        id=conv.id, title=conv.title, created_at=conv.created_at, updated_at=conv.updated_at,
        model=conv.model, pinned=bool(conv.pinned), settings=conv.settings or {},
    )


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


_WORD = re.compile(r"\w+", re.UNICODE)


def _fts_query(text: str) -> str:
    """User text → a safe FTS5 query: each word quoted, so `"`, `*`, NEAR, `-` are literal."""
    words = _WORD.findall(text)
    return " ".join(f'"{w}"' for w in words[:16])
