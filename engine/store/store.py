"""The conversation store: every read and write of conversations, messages and settings."""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import logging
import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import peewee as pw

from .. import paths
from ..errors import DatabaseDamaged, InvalidRequest, NotFound, StoreError, WrenError
from ..records import ConversationInfo, MessageInfo, MessageStatus, Role, clean_title
from . import health, rows
from .locks import HeldLock, is_held, owner_token
from .migrations import applied_versions, latest_version, migrate
from .models import TABLES, Conversation, Message, Setting, utcnow

log = logging.getLogger(__name__)
NOTICE = "wren_notice"  # a log record with this attribute set is for the user to read now

_PRAGMAS = {
    "journal_mode": "wal",
    "synchronous": "normal",  # with WAL: a killed process loses nothing committed
    "foreign_keys": 1,
    "busy_timeout": 3000,
    "secure_delete": 1,  # deleted text is overwritten with zeros, not left in free pages
}
# An answer's checkpoints while another program holds the database: each try waits at
# most this long for the lock (the stream never stalls behind it), and the tries back off.
CHECKPOINT_WAIT_MS = 50
CHECKPOINT_BACKOFF = (0.25, 8.0)  # first and longest pause between tries, seconds
# How long the last write of an answer keeps trying a locked database before giving up
# (its text then waits in the side journal for the next start).
LOCK_RETRY_SECONDS = 60.0
_SQLITE_FULL = 13


def _guarded(method):
    """Turn SQLite's terse failures into errors that say what to do."""

    @functools.wraps(method)
    def wrapper(self: Store, *args, **kwargs):
        self.bind()
        try:
            return method(self, *args, **kwargs)
        except UnicodeEncodeError as exc:
            # A str holding lone surrogates (not text): SQLite cannot store it.
            raise InvalidRequest(
                f"the text is not valid Unicode (a lone surrogate at position {exc.start}); "
                "nothing was saved"
            ) from exc
        except OverflowError as exc:  # an id beyond SQLite's 64-bit integers names no row
            raise _oversize_id(method, args, kwargs) from exc
        except (pw.OperationalError, sqlite3.OperationalError) as exc:
            raise self._explain(exc) from exc
        except (pw.DatabaseError, sqlite3.DatabaseError) as exc:
            if _disk_full(exc) or self._found_damage(exc):
                raise self._explain(exc) from exc
            raise StoreError(f"the database {self.path} is unusable: {exc}") from exc

    return wrapper


class _TrackedSqliteDatabase(pw.SqliteDatabase):
    """Peewee opens one connection per thread that uses it; this one remembers them all,
    so closing the store closes every one (a connection left open in a process that opens
    the file again is SQLite's documented way to corrupt it)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._opened: list[sqlite3.Connection] = []
        self._opened_lock = threading.Lock()

    def _connect(self):
        conn = super()._connect()
        with self._opened_lock:
            self._opened = [c for c in self._opened if _is_open(c)] + [conn]
        return conn

    def open_connections(self) -> int:
        with self._opened_lock:
            return sum(1 for c in self._opened if _is_open(c))

    def close_all(self) -> None:
        if not self.is_closed():
            self.close()  # this thread's, through peewee, so its state knows
        with self._opened_lock:
            opened, self._opened = self._opened, []
        for conn in opened:
            if _is_open(conn):
                conn.close()


def _is_open(conn: sqlite3.Connection) -> bool:
    try:
        conn.total_changes  # noqa: B018  raises ProgrammingError once closed
        return True
    except sqlite3.ProgrammingError:
        return False


class Store:
    """Owns one SQLite database. Not thread-safe: the engine calls it from one worker.

    Each Store over a file owns the answers it streams: it holds an OS lock named by its
    owner token for as long as it is open, and marks its `streaming` rows with that token.
    Opening a Store marks `streaming` rows interrupted only when their owner's lock is free
    (its process is gone), so a second Wren never clobbers a live answer."""

    def __init__(self, path: Path | str, *, busy_timeout_ms: int = 3000, first_id: int | None = None,
                 lock_retry_seconds: float = LOCK_RETRY_SECONDS):
        """`first_id`: ids of new conversations and messages start above it (an in-memory
        store for temporary chats uses it so its ids never collide with the user's).
        `lock_retry_seconds`: how long an answer's final write waits out a database locked
        by another program."""
        self.path = str(path)
        in_memory = self.path == ":memory:"
        self._busy_timeout_ms = busy_timeout_ms
        self.lock_retry_seconds = lock_retry_seconds
        self.owner: str | None = None
        self._owner_lock: HeldLock | None = None
        self._pending: dict[int, dict[str, Any]] = {}  # unsaved checkpoints, by message id
        self._next_try: dict[int, tuple[float, float]] = {}  # message id -> (when, pause)
        self._streaming: set[int] = set()  # answers this store is streaming now
        # What SQLite's check found wrong with the file (engine/store/health.py); while it
        # holds anything, the database is open for reading only.
        self.damage: tuple[str, ...] = ()
        self._readable = False  # opened: what a damaged file still holds can be read
        if not in_memory:
            try:
                paths.make_dirs(Path(self.path).parent)  # the data folder: an existing one is left as it is
                paths.private_file(Path(self.path))  # 0600; SQLite gives its -wal and -shm the same
                self.owner = owner_token()
                self._owner_lock = HeldLock(paths.private_dir(self._owners_dir) / f"{self.owner}.lock")
            except OSError as exc:  # a read-only data folder, a file of mode 000, a full disk
                if self._owner_lock is not None:
                    self._owner_lock.release()
                raise self._file_problem(exc) from exc
        pragmas = dict(_PRAGMAS, busy_timeout=busy_timeout_ms)
        # An in-memory database exists per connection: share one across threads.
        self.db = _TrackedSqliteDatabase(self.path, pragmas=pragmas, check_same_thread=False,
                                         thread_safe=not in_memory)
        try:
            self._open(first_id)
        except BaseException:
            self.close()
            raise

    @property
    def folder(self) -> Path:
        """The folder holding the database (the data folder)."""
        return Path(self.path).resolve().parent

    @property
    def _owners_dir(self) -> Path:
        """Lock files of the live processes that own answers (hidden, beside the database)."""
        path = Path(self.path)
        return path.with_name(f".{path.name}-owners")

    @property
    def _journal_dir(self) -> Path:
        """Answers a locked database could not take yet, one JSON file each."""
        path = Path(self.path)
        return path.with_name(f".{path.name}-journal")

    def bind(self) -> None:
        """Point this thread's table classes at this store's database."""
        if Conversation._meta.database is not self.db:
            self.db.bind(TABLES, bind_refs=False, bind_backrefs=False)

    @_guarded
    def _open(self, first_id: int | None) -> None:
        self.db.connect(reuse_if_open=True)
        if self.owner is not None:  # a file: checked before anything is written to it
            self._mark_damaged(health.quick_check(self.db))
        if self.damage:
            if not applied_versions(self.db) >= set(range(1, latest_version() + 1)):
                raise DatabaseDamaged(health.damaged_message(self.path, self.damage)
                                      + "; it also needs an upgrade, which Wren will not write into it", self.damage)
            # a notice: the CLI shows it on stderr before what it lists (engine/terminal/main.py)
            log.warning("%s", health.damaged_message(self.path, self.damage), extra={NOTICE: True})
            self._readable = True
            return
        migrate(self.db)
        self.recover_interrupted()
        self._readable = True
        if first_id is not None and Conversation.select().count() == 0:
            # SQLite numbers new rows after the largest id: a hidden placeholder sets the floor.
            Conversation.insert(id=first_id, title="", deleted_at=utcnow()).execute()
            Message.insert(id=first_id, conversation=first_id, role=Role.SYSTEM, content="",
                           status=MessageStatus.COMPLETE).execute()

    def _file_problem(self, exc: OSError) -> StoreError:
        """The database's file or folder cannot be made or opened (before SQLite is asked)."""
        where = exc.filename or self.path
        if _disk_full(exc):
            return self._explain(exc)
        if exc.errno == errno.EROFS:
            return StoreError(f"the data folder {self.folder} is on a read-only file system, so Wren cannot "
                              f"open its database there ({where}); make it writable, or set WREN_HOME to a "
                              "writable folder")
        if isinstance(exc, PermissionError):
            return StoreError(f"permission denied on {where}: Wren cannot open its database {self.path} "
                              f"in the data folder {self.folder}; check that you own them and can read and "
                              "write them (e.g. `ls -l` that folder)")
        return StoreError(f"cannot open the database {self.path}: {exc.strerror or exc} ({where})")

    def _mark_damaged(self, problems: tuple[str, ...]) -> None:
        """From now on this database is read, never written (SQLite refuses every write)."""
        if not problems or self.damage:
            return
        self.damage = problems
        try:
            self.db.pragma("query_only", 1, permanent=True)  # this connection and the next ones
        except (pw.DatabaseError, sqlite3.DatabaseError):  # not even that reads: nothing will write
            pass

    def _found_damage(self, exc: BaseException) -> bool:
        """After a DatabaseError: is the file damaged? SQLite's check decides, before any
        further write."""
        if self.damage:
            return True
        try:
            problems = health.quick_check(self.db)
        except (pw.DatabaseError, sqlite3.DatabaseError):  # locked now: judge by the error alone
            problems = ()
        if not problems and health.is_damage(exc):
            problems = (str(exc),)
        self._mark_damaged(problems)
        if self.damage and self._readable:
            log.warning("%s", health.damaged_message(self.path, self.damage), extra={NOTICE: True})
        return bool(self.damage)

    def _explain(self, exc: Exception) -> StoreError:
        if self.damage or (health.is_damage(exc) and self._found_damage(exc)):
            # writes refused by query_only read "attempt to write a readonly database"
            if self._readable:  # its problems were told when it opened (logged as a notice)
                return DatabaseDamaged(health.refused_message(self.path, reading=health.is_damage(exc)), self.damage)
            return DatabaseDamaged(health.damaged_message(self.path, self.damage, readable=False), self.damage)
        text = " ".join(str(e) for e in health.error_chain(exc)).lower()
        if _disk_full(exc):
            return StoreError(
                f"the disk is full: the database {self.path} in the data folder {self.folder} "
                "cannot grow; free some space on that disk and try again (what was saved before "
                "is intact)"
            )
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

    def open_connections(self) -> int:
        """How many SQLite connections this store holds open (every thread's)."""
        return self.db.open_connections()

    def close(self) -> None:
        """Close every connection and give up ownership of this store's answers."""
        if self._pending:
            try:
                self.flush_held()  # a last try; what is still refused the next start marks interrupted
            except Exception as exc:
                log.warning("answers left unsaved at close: %s", exc)
        self.db.close_all()
        if self._owner_lock is not None:
            self._owner_lock.release()
            self._owner_lock = None

    # -- conversations -------------------------------------------------------------

    @_guarded
    def create_conversation(
        self, title: str = "", model: str | None = None, settings: dict | None = None
    ) -> ConversationInfo:
        conv = Conversation.create(title=clean_title(title), model=model, settings=settings or {})
        return _conversation_info(conv)

    @_guarded
    def get_conversation(self, conversation_id: int) -> ConversationInfo:
        return _conversation_info(rows.conversation(self.db.connection(), conversation_id))

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
        if "title" in fields:
            fields["title"] = clean_title(fields["title"])
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
    def discard_if_empty(self, conversation_id: int) -> bool:
        """Delete a conversation that holds no message at all (a question that was refused
        after its chat was made); True if it was deleted."""
        with self.db.atomic():
            if Message.select().where(Message.conversation == conversation_id).exists():
                return False
            return Conversation.delete().where(Conversation.id == conversation_id).execute() > 0

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
        if self._pending:
            self.flush_held()  # an answer a full disk left unfinished, before the next one
        if status is MessageStatus.STREAMING:
            fields.setdefault("owner", self.owner)
        msg = Message(conversation=conversation_id, parent=parent_id, role=role, content=content,
                      status=status, **fields)
        with self.db.atomic():  # in plain SQL (rows.py): every Send writes two messages
            conn = self.db.connection()
            rows.check_place(conn, conversation_id, parent_id)
            msg.id = rows.insert_message(conn, msg)
            if status is MessageStatus.STREAMING:
                self._streaming.add(msg.id)
            rows.show_leaf(conn, conversation_id, msg.id, utcnow())
            siblings = rows.sibling_ids(conn, conversation_id, parent_id)
        return self._info(msg, siblings)

    def update_message(self, message_id: int, **fields: Any) -> None:
        """Checkpoint (content only) or finish (with a status) a message; one short transaction.

        Another program holding the database never loses the answer: a checkpoint that meets
        a lock waits at most CHECKPOINT_WAIT_MS, keeps the text in memory and in a small side
        journal (written atomically) and is tried again, backing off, at later checkpoints;
        the finishing write retries for up to `lock_retry_seconds`. If the lock never frees,
        the journal stays and the next start saves its text with the row `interrupted`."""
        if message_id not in self._streaming:
            return self._update_plain(message_id, **fields)  # not an answer being streamed here
        self.bind()
        merged = {**self._pending.pop(message_id, {}), **fields, "updated_at": utcnow()}
        final = "status" in fields
        if not final and time.monotonic() < self._next_try.get(message_id, (0.0, 0.0))[0]:
            self._hold(message_id, merged)  # backing off: keep it for a later try
            return
        deadline = time.monotonic() + (self.lock_retry_seconds if final else 0.0)
        pause = self._next_try.get(message_id, (0.0, CHECKPOINT_BACKOFF[0]))[1]
        while True:
            wait_ms = CHECKPOINT_WAIT_MS
            if final:
                left_ms = (deadline - time.monotonic()) * 1000
                wait_ms = int(max(CHECKPOINT_WAIT_MS, min(self._busy_timeout_ms, left_ms)))
            try:
                self._write_message(message_id, merged, wait_ms=wait_ms)
                break
            except (pw.OperationalError, sqlite3.OperationalError) as exc:
                if not _locked(exc):
                    raise self._refused(message_id, merged, final, exc) from exc
                left = deadline - time.monotonic()
                if left <= 0:
                    self._hold(message_id, merged)
                    self._next_try[message_id] = (time.monotonic() + pause, min(pause * 2, CHECKPOINT_BACKOFF[1]))
                    if final:
                        raise StoreError(
                            f"the database {self.path} stayed locked by another program for "
                            f"{self.lock_retry_seconds:g} s; the answer's text is kept in "
                            f"{self._journal_path(message_id)} and saved the next time Wren starts"
                        ) from exc
                    log.info("checkpoint of message %s deferred: %s is locked", message_id, self.path)
                    return
                time.sleep(min(pause, left))
                pause = min(pause * 2, CHECKPOINT_BACKOFF[1])
            except UnicodeEncodeError as exc:
                raise InvalidRequest(f"the text is not valid Unicode (a lone surrogate at position {exc.start})") from exc
            except (pw.DatabaseError, sqlite3.DatabaseError) as exc:
                raise self._refused(message_id, merged, final, exc) from exc
        self._next_try.pop(message_id, None)
        if final:
            self._streaming.discard(message_id)
        self._drop_journal(message_id)

    def writable(self, wait: float) -> bool:
        """Whether the database takes a write within `wait` seconds (False: another program
        holds it locked); nothing is written. Any other failure raises as a write's would."""
        if self.owner is None:
            return True  # in memory: no other program
        self.bind()
        self.db.execute_sql(f"PRAGMA busy_timeout = {int(wait * 1000)}")
        try:
            self.db.execute_sql("BEGIN IMMEDIATE")
            self.db.execute_sql("ROLLBACK")
            return True
        except (pw.OperationalError, sqlite3.OperationalError) as exc:
            if _locked(exc):
                return False
            raise self._explain(exc) from exc
        finally:
            self.db.execute_sql(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")

    def _refused(self, message_id: int, fields: dict[str, Any], final: bool, exc: Exception) -> StoreError:
        """A write refused for a reason waiting will not cure (a full disk): kept in memory
        and tried again (flush_held); a finishing one is then saved as interrupted, saying why."""
        error = self._explain(exc)
        if final:
            fields = {**fields, "status": MessageStatus.INTERRUPTED, "error": f"not saved when it ended: {error}"}
        self._hold(message_id, fields)
        return error

    def flush_held(self) -> int:
        """Try again the finishing writes a full disk held back, so an answer does not stay
        `streaming` for as long as this process lives; how many were saved now (those
        waiting out a lock keep their journal and back-off)."""
        saved = 0
        for message_id, fields in list(self._pending.items()):
            if "status" not in fields or message_id in self._next_try:
                continue
            try:
                self.update_message(message_id, **{k: v for k, v in fields.items() if k != "updated_at"})
            except (StoreError, InvalidRequest):
                continue
            saved += 1
        return saved

    @_guarded
    def _update_plain(self, message_id: int, **fields: Any) -> None:
        fields["updated_at"] = utcnow()
        Message.update(**fields).where(Message.id == message_id).execute()

    def _write_message(self, message_id: int, fields: dict[str, Any], wait_ms: int) -> None:
        self.db.execute_sql(f"PRAGMA busy_timeout = {int(wait_ms)}")
        try:
            Message.update(**fields).where(Message.id == message_id).execute()
        finally:
            self.db.execute_sql(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")

    def unsaved(self, message_id: int) -> dict[str, Any]:
        """What is held for `message_id` because the database was locked (empty: nothing)."""
        return dict(self._pending.get(message_id, {}))

    def _hold(self, message_id: int, fields: dict[str, Any]) -> None:
        self._pending[message_id] = fields
        if self.owner is None:
            return  # an in-memory store: nothing survives it anyway
        record = {"message_id": message_id, "owner": self.owner,
                  "fields": {k: v for k, v in fields.items() if k != "updated_at"}}
        path = self._journal_path(message_id)
        tmp = path.with_name(f".{path.name}.{self.owner}.tmp")
        try:
            paths.private_dir(path.parent)  # answers' text: the user's alone, whatever the data folder's mode
            with open(paths.private_file(tmp), "w", encoding="utf-8") as out:
                json.dump(record, out, ensure_ascii=False, default=_json_default)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, path)
        except (OSError, TypeError, ValueError) as exc:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)  # a full disk leaves no empty file behind
            log.warning("cannot journal message %s beside %s: %s", message_id, self.path, exc)

    def _journal_path(self, message_id: int) -> Path:
        return self._journal_dir / f"{message_id}.json"

    def _drop_journal(self, message_id: int) -> None:
        if self.owner is not None:
            try:
                self._journal_path(message_id).unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("cannot remove the journal of message %s: %s", message_id, exc)

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
        conn = self.db.connection()  # in plain SQL (rows.py): every Send reads them
        conv = rows.conversation(conn, conversation_id)
        found = {m.id: m for m in rows.conversation_messages(conn, conv.id)}
        chain: list[Message] = []
        node = found.get(conv.current_leaf) if conv.current_leaf else None
        while node is not None:
            chain.append(node)
            node = found.get(node.parent_id) if node.parent_id else None
        chain.reverse()
        siblings: dict[int | None, list[int]] = {}
        for m in sorted(found.values(), key=lambda m: m.id):
            siblings.setdefault(m.parent_id, []).append(m.id)
        return [self._info(m, siblings[m.parent_id]) for m in chain]

    @_guarded
    def tree(self, conversation_id: int) -> tuple[list[MessageInfo], int | None]:
        """Every message of a conversation, every branch, oldest first, and the current
        leaf (the message whose branch is shown): what an export must keep."""
        conv = self._conversation(conversation_id)
        rows = list(Message.select().where(Message.conversation == conv.id).order_by(Message.id))
        siblings: dict[int | None, list[int]] = {}
        for m in rows:
            siblings.setdefault(m.parent_id, []).append(m.id)
        return [self._info(m, siblings[m.parent_id]) for m in rows], conv.current_leaf

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
        """Messages left `streaming` by a process that is gone become `interrupted`, with any
        text its journal kept (the database was locked when it died). Answers another live
        process is streaming are left alone."""
        if self.owner is None:
            return Message.update(status=MessageStatus.INTERRUPTED, updated_at=utcnow()).where(
                Message.status == MessageStatus.STREAMING).execute()
        recovered = self._replay_journals()
        gone: dict[str | None, bool] = {}
        ids = []
        for row in Message.select(Message.id, Message.owner).where(Message.status == MessageStatus.STREAMING):
            if row.owner not in gone:
                gone[row.owner] = not self._owner_alive(row.owner)
            if gone[row.owner]:
                ids.append(row.id)
        if ids:
            recovered += Message.update(status=MessageStatus.INTERRUPTED, updated_at=utcnow()).where(
                Message.id.in_(ids) & (Message.status == MessageStatus.STREAMING)).execute()
        self._sweep_owner_files()
        return recovered

    def _owner_alive(self, owner: str | None) -> bool:
        if not owner:
            return False  # written before answers had owners
        if owner == self.owner:
            return True
        if "/" in owner or "\\" in owner or owner.startswith("."):
            return False
        return is_held(self._owners_dir / f"{owner}.lock")

    def _replay_journals(self) -> int:
        folder = self._journal_dir
        if not folder.is_dir():
            return 0
        count = 0
        for path in sorted(folder.glob("*.json")):
            try:
                record = json.loads(path.read_text(encoding="utf-8"))
                message_id = int(record["message_id"])
                owner = record.get("owner")
                fields = dict(record["fields"])
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("ignoring the unreadable answer journal %s: %s", path, exc)
                path.unlink(missing_ok=True)
                continue
            if self._owner_alive(owner):
                continue  # its process still runs and will save it itself
            keep = {k: v for k, v in fields.items() if k in _JOURNAL_FIELDS}
            with self.db.atomic():
                row = Message.get_or_none(Message.id == message_id)
                if row is not None and row.status is MessageStatus.STREAMING:
                    keep.update(
                        status=MessageStatus.INTERRUPTED, updated_at=utcnow(),
                        error="the database was locked by another program when this answer ended; "
                              "the text shown was saved when Wren next started",
                    )
                    Message.update(**keep).where(Message.id == message_id).execute()
                    count += 1
            path.unlink(missing_ok=True)
            log.info("saved message %s from its journal %s", message_id, path)
        return count

    def _sweep_owner_files(self) -> None:
        """Lock files of owners that are gone (a killed process leaves its file behind)."""
        folder = self._owners_dir
        try:
            entries = list(folder.glob("*.lock"))
        except OSError:
            return
        for path in entries:
            if path.stem != self.owner and not is_held(path):
                path.unlink(missing_ok=True)

    def _info(self, msg: Message, siblings: Iterable[int] | None = None) -> MessageInfo:
        siblings = list(self.siblings(msg.id) if siblings is None else siblings)
        return MessageInfo(
            id=msg.id, conversation_id=msg.conversation_id, parent_id=msg.parent_id,
            role=msg.role, content=msg.content, status=msg.status, created_at=msg.created_at,
            model=msg.model, backend=msg.backend, prompt_tokens=msg.prompt_tokens,
            completion_tokens=msg.completion_tokens, time_to_first_token=msg.time_to_first_token,
            tokens_per_second=msg.tokens_per_second, error=msg.error, sampling=msg.sampling or {},
            meta=msg.meta or {}, sibling_index=siblings.index(msg.id) if msg.id in siblings else 0,
            sibling_count=max(1, len(siblings)), reasoning=msg.reasoning or "",
            reasoning_seconds=msg.reasoning_seconds,
        )

    # -- settings ------------------------------------------------------------------

    @_guarded
    def get_setting(self, key: str, default: Any = None) -> Any:
        row = Setting.get_or_none(Setting.key == key)
        return default if row is None else row.value

    @_guarded
    def get_settings(self, *keys: str) -> dict[str, Any]:
        """Several settings in one query: {key: value} for each key that is set."""
        return rows.settings(self.db.connection(), keys)

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


_JOURNAL_FIELDS = frozenset({
    "content", "completion_tokens", "time_to_first_token", "tokens_per_second", "meta", "error",
})


def read_setting(path: Path | str, key: str, default: Any = None) -> Any:
    """One setting read straight from the database file, without opening a Store (no
    migration, no recovery, nothing written): for a short-lived process that only needs
    to know one choice before deciding what to start. `default` when the file, the table
    or the key is missing, or the file cannot be read."""
    try:
        conn = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True, timeout=1.0)
    except (sqlite3.Error, OSError, ValueError):
        return default
    try:
        row = conn.execute(f"SELECT value FROM {Setting._meta.table_name} WHERE key = ?", (key,)).fetchone()
        return default if row is None or row[0] is None else json.loads(row[0])
    except (sqlite3.Error, ValueError):
        return default
    finally:
        conn.close()


def _disk_full(exc: BaseException) -> bool:
    for e in health.error_chain(exc):
        if getattr(e, "sqlite_errorcode", None) == _SQLITE_FULL:
            return True
        text = str(e).lower()
        if "database or disk is full" in text or "no space left" in text:
            return True
        if isinstance(e, OSError) and e.errno == 28:  # ENOSPC
            return True
    return False


def _oversize_id(method: Any, args: tuple, kwargs: dict) -> WrenError:
    """SQLite's integers are 64-bit: a bigger id names no row (found by its parameter)."""
    import inspect

    try:
        bound = inspect.signature(method).bind(None, *args, **kwargs).arguments
    except TypeError:
        bound = {}
    for name, value in bound.items():
        if isinstance(value, int) and not -(2**63) <= value < 2**63:
            noun = {"conversation_id": "conversation", "message_id": "message", "parent_id": "message"}.get(name)
            if noun:
                return NotFound(f"no {noun} with id {value} (ids are whole numbers up to {2**63 - 1})")
            return InvalidRequest(f"{name.replace('_', ' ')} {value} is too large (at most {2**63 - 1})")
    return InvalidRequest(f"a number is too large for the database (at most {2**63 - 1})")


def _locked(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def _json_default(value: Any) -> Any:
    if hasattr(value, "value"):  # an enum
        return value.value
    return str(value)


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
