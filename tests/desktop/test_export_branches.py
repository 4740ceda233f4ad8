"""The window's "Export as JSON/Markdown…" keeps every branch: a chat made in the window
with a regenerated answer and an edited question exports all of its messages, with the
parents the database holds, not only the branch on screen."""

from __future__ import annotations

import json
import sqlite3


def _turn(qtbot, window, act) -> None:
    with qtbot.waitSignal(window.conversations.turn_finished, timeout=15000):
        act()


def test_window_export_keeps_regenerated_and_edited_branches(open_window, send, arun, qtbot, tmp_path, wren_home):
    count = {"n": 0}

    def reply(_prompt: str) -> str:
        count["n"] += 1
        return f"Answer number {count['n']}."

    window = open_window(reply)
    send(window, "Where do herons nest?")
    convs = window.conversations
    cid = convs.current_id
    shown = arun(window.engine.conversations.messages(cid))
    question, answer = shown[0].id, shown[1].id
    _turn(qtbot, window, lambda: convs.regenerate(answer))
    _turn(qtbot, window, lambda: convs.edit_and_resend(question, "Where do egrets nest?"))

    con = sqlite3.connect(wren_home / "wren.sqlite3")
    try:
        truth = dict(con.execute("SELECT id, parent_id FROM message WHERE conversation_id = ?", (cid,)).fetchall())
        texts = dict(con.execute("SELECT id, content FROM message WHERE conversation_id = ?", (cid,)).fetchall())
    finally:
        con.close()
    assert len(truth) == 5  # question, two answers; the edited question, its answer

    data = json.loads(arun(convs.export_to(cid, "json", tmp_path / "chat.json")).read_text())
    assert {int(k): node["parent"] for k, node in data["mapping"].items()} == truth
    assert {int(k): node["message"]["content"] for k, node in data["mapping"].items()} == texts
    assert [m["content"] for m in data["messages"]] == ["Where do egrets nest?", "Answer number 3."]

    md = arun(convs.export_to(cid, "markdown", tmp_path / "chat.md")).read_text()
    assert "Other branches" in md
    assert all(md.count(f"\n\n{text}\n") == 1 for text in texts.values())
