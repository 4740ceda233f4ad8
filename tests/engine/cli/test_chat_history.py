"""`wren chat`'s input history forgets a chat deleted for good, and `wren data erase`
clears it: the real `wren chat` on a pseudo-terminal writes the real history file, the
chat is deleted through the Engine as the window does, and readline's Ctrl+R search in
the next session is what shows whether the words are gone."""

from __future__ import annotations

import asyncio
import json
import stat
import sys

import pytest

from tests.engine.cli.conftest import LAUNCHER, child_env
from tests.engine.cli.test_chat_pty import Terminal
from wren.engine.terminal.main import main

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX; no readline there"),
]
HERON, EGRET = "heron secret alpha", "egret words beta"


@pytest.fixture
def chat(tiny_chosen, tmp_path):
    inputrc = tmp_path / "inputrc"
    inputrc.write_text("set enable-bracketed-paste off\n")
    started: list[Terminal] = []

    def start() -> Terminal:
        t = Terminal([sys.executable, str(LAUNCHER), "chat"],
                     child_env(TERM="xterm", INPUTRC=str(inputrc), WREN_TEST_CTTY="1"))
        started.append(t)
        t.expect(">>> ")
        return t

    yield start
    for t in started:
        t.kill()


def say(t: Terminal, line: str, answer: str | None = None) -> None:
    t.send(line + "\r")
    if answer:
        t.expect(answer)
    t.expect(">>> ")


def quit_(t: Terminal) -> None:
    t.send("/bye\r")
    assert t.finish() == 0, t.seen


def saved(wren_home) -> list[dict]:
    return [json.loads(line) for line in (wren_home / "chat_history").read_text().splitlines()]


def chat_ids(wren_home) -> dict[str, int]:
    """Each chat's id by its title (the first question, as `wren chat` names it)."""
    from wren.engine.store import Store

    store = Store(wren_home / "wren.sqlite3")
    try:
        return {c.title: c.id for c in store.list_conversations()}
    finally:
        store.close()


def recalls(t: Terminal, words: str) -> bool:
    """Ctrl+R for `words`, then Enter: True when the history still had a line with them
    (the line found is sent and echoed; a failed search sends an empty line, which is not)."""
    t.send("\x12" + words)
    t.send("\r")
    t.send("marker line\r")  # answered after whatever the search sent
    shown = t.expect("echo: marker line")
    t.expect(">>> ")
    return f"echo: {words}" in shown


def delete(conversation_id: int, *, permanently: bool = True, undo_seconds: float | None = None) -> None:
    from wren.engine.api import Engine

    async def go() -> None:
        engine = Engine.open()
        if undo_seconds is not None:
            engine.privacy.undo_seconds = undo_seconds
        await engine.conversations.delete(conversation_id, permanently=permanently)
        if undo_seconds is not None:
            await asyncio.sleep(undo_seconds + 0.5)  # the window's undo bar closes
        await engine.close()

    asyncio.run(go())


def test_delete_forever_removes_the_chats_lines_from_the_history(chat, wren_home):
    t = chat()
    say(t, "/system be brief")  # typed before the chat exists: it goes with the chat made next
    say(t, HERON, f"echo: {HERON}")
    say(t, "/new")
    say(t, EGRET, f"echo: {EGRET}")
    quit_(t)
    history = wren_home / "chat_history"
    assert stat.S_IMODE(history.stat().st_mode) == 0o600
    assert HERON in history.read_text()
    chats = chat_ids(wren_home)
    heron_chat, egret_chat = chats[HERON], chats[EGRET]

    delete(heron_chat)  # "Delete permanently" in the window's sidebar
    left = history.read_text()
    assert "heron" not in left and "be brief" not in left
    assert EGRET in left
    tags = {e["t"]: e["c"] for e in saved(wren_home)}
    assert tags[EGRET] == egret_chat

    t = chat()
    assert not recalls(t, "heron secret")
    assert recalls(t, "egret words")
    quit_(t)


def test_the_undo_window_closing_and_a_delete_during_a_session_forget_too(chat, wren_home):
    t = chat()
    say(t, HERON, f"echo: {HERON}")
    quit_(t)
    heron_chat = chat_ids(wren_home)[HERON]
    delete(heron_chat, permanently=False, undo_seconds=0.5)  # deleted, not undone, purged
    assert "heron" not in (wren_home / "chat_history").read_text()

    t = chat()
    say(t, EGRET, f"echo: {EGRET}")
    delete(chat_ids(wren_home)[EGRET])  # deleted by another window while this chat is still open
    quit_(t)
    assert "egret" not in (wren_home / "chat_history").read_text()


def test_data_erase_clears_the_history(chat, wren_home, capsys):
    t = chat()
    say(t, HERON, f"echo: {HERON}")
    quit_(t)
    assert HERON in (wren_home / "chat_history").read_text()
    assert main(["data", "erase", "--yes"]) == 0
    capsys.readouterr()
    assert not (wren_home / "chat_history").exists()
    t = chat()
    assert not recalls(t, "heron secret")
    quit_(t)


def test_old_untagged_history_lines_are_dropped(chat, wren_home):
    """Lines from before tagging cannot be matched to a chat, so they cannot be deleted
    with it: the first session drops them rather than keep a deleted chat's words."""
    (wren_home / "chat_history").write_text("an old line from a chat long deleted\n")
    t = chat()
    assert not recalls(t, "an old line")
    say(t, EGRET, f"echo: {EGRET}")
    quit_(t)
    texts = [e["t"] for e in saved(wren_home)]
    assert EGRET in texts and not any("old line" in text for text in texts)
