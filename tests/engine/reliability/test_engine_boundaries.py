"""The Engine facade's boundary: text that is not valid Unicode, over-long titles, refused
questions that must leave no empty chat (and be refused before the model loads), and a
close() that closes every database connection."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from wren.engine.context import ContextOverflow
from wren.engine.errors import InvalidRequest
from wren.engine.events import Finished, Started
from wren.engine.records import TITLE_MAX_CHARS
from wren.engine.store import Store

REPO = Path(__file__).resolve().parents[3]
SURROGATE = "hello \ud800 world"


def run(coro):
    return asyncio.run(coro)


async def collect(stream):
    return [event async for event in stream]


@pytest.mark.parametrize("what", ["send", "rename", "create", "memory", "edit_memory"])
def test_lone_surrogates_are_refused_clearly_at_the_boundary(make_engine, what):
    async def main():
        engine = make_engine("fine")
        conv = await engine.conversations.create("ok")
        try:
            with pytest.raises(InvalidRequest, match="not valid Unicode.*position 6"):
                if what == "send":
                    await collect(engine.chat.send(conv.id, SURROGATE))
                elif what == "rename":
                    await engine.conversations.rename(conv.id, SURROGATE)
                elif what == "create":
                    await engine.conversations.create(SURROGATE)
                elif what == "memory":
                    await engine.memories.add(SURROGATE)
                else:
                    memory = await engine.memories.add("I like tea")
                    await engine.memories.edit(memory.id, SURROGATE)
            assert [m.content for m in await engine.conversations.messages(conv.id)] == []
            assert engine.models.current is None  # refused before the model loaded
        finally:
            await engine.close()

    run(main())


def test_titles_are_bounded_and_put_on_one_line(make_engine):
    async def main():
        engine = make_engine("fine")
        try:
            conv = await engine.conversations.create("x" * 1_000_000)
            assert len(conv.title) == TITLE_MAX_CHARS and conv.title.endswith("…")
            renamed = await engine.conversations.rename(conv.id, "two\nlines\x1b[31m and  spaces " + "y" * 500)
            assert len(renamed.title) == TITLE_MAX_CHARS
            assert renamed.title.startswith("two lines [31m and spaces y")
            with pytest.raises(InvalidRequest, match="cannot be empty"):
                await engine.conversations.rename(conv.id, " \n\x00 ")
        finally:
            await engine.close()

    run(main())


@pytest.mark.parametrize("text, error", [("   \n", "empty"), ("x" * 2_000_001, "characters long"),
                                         ("word " * 5000, "tokens")])
def test_refused_questions_leave_no_conversation_and_load_no_model(make_engine, text, error):
    async def main():
        engine = make_engine("fine")
        try:
            with pytest.raises(InvalidRequest, match=error):
                await collect(engine.chat.send_new(text))
            assert engine.models.current is None  # the token count used the tokenizer alone
            return await engine.conversations.list()
        finally:
            await engine.close()

    assert run(main()) == []


def test_too_many_tokens_is_context_overflow_before_loading(make_engine):
    async def main():
        engine = make_engine("fine")
        try:
            with pytest.raises(ContextOverflow):
                await engine.chat.check_question("word " * 5000)
            assert engine.models.current is None
            conv = await engine.conversations.create("kept")
            with pytest.raises(ContextOverflow):  # an existing chat: refused, nothing stored
                await collect(engine.chat.send(conv.id, "word " * 5000))
            assert await engine.conversations.messages(conv.id) == []
        finally:
            await engine.close()

    run(main())


def test_send_new_makes_the_chat_only_for_an_accepted_question(make_engine):
    async def main():
        engine = make_engine("Paris.")
        try:
            events = await collect(engine.chat.send_new("What is the capital of France?"))
            started = next(e for e in events if isinstance(e, Started))
            assert isinstance(events[-1], Finished)
            (conv,) = await engine.conversations.list()
            assert conv.id == started.conversation_id and conv.title == "What is the capital of France?"
            assert [m.content for m in await engine.conversations.messages(conv.id)] == ["What is the capital of France?", "Paris."]
        finally:
            await engine.close()

    run(main())


def _db_fds(path: Path) -> list[str]:
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target == str(path):
            found.append(target)
    return found


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts open files through /proc")
def test_close_closes_every_database_connection(make_engine, wren_home):
    db = wren_home / "wren.sqlite3"

    async def main():
        engine = make_engine("fine")  # its Store was opened on this (the main) thread
        conv = await engine.conversations.create("t")
        await collect(engine.chat.send(conv.id, "hello"))  # and used on the database thread
        assert _db_fds(db.resolve())
        await engine.close()
        return engine

    engine = run(main())
    assert _db_fds(db.resolve()) == []  # before the fix: the opening thread's connection stayed
    assert engine.store.open_connections() == 0


def test_a_fresh_process_reopens_the_file_after_close(make_engine, wren_home):
    db = wren_home / "wren.sqlite3"

    async def main():
        engine = make_engine("fine")
        conv = await engine.conversations.create("t")
        await collect(engine.chat.send(conv.id, "hello"))
        await engine.close()

    run(main())
    probe = ("import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('BEGIN EXCLUSIVE');"
             "print(c.execute('PRAGMA integrity_check').fetchone()[0]); c.execute('COMMIT')")
    done = subprocess.run([sys.executable, "-c", probe, str(db)], capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout.strip() == "ok", done.stderr
    con = sqlite3.connect(db)
    assert con.execute("SELECT count(*) FROM message").fetchone()[0] == 2
    con.close()
    assert Store(db).integrity_check() == "ok"
