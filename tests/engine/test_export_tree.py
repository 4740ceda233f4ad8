"""Exports keep the whole tree of a chat: edits, answers made again and continued answers.

The chat is built through the Engine the way the window makes it (send, regenerate, stop
then continue, edit and resend); every message id is taken from the turns' own Started
events, so the checks do not lean on the export's query to list what should be there."""

from __future__ import annotations

import asyncio
import json
import zipfile

from wren.engine.events import Delta, Started
from wren.engine.inference.backends.scripted import ScriptedBackend
from wren.engine.terminal.main import main

FIRST, EDITED, SECOND = "Tell me about herons", "Tell me about egrets instead", "Now a long story"
STORY = "Once upon a time a grey heron fished all day by the quiet river bank, and waited."


def run(coro):
    return asyncio.run(coro)


def _replies() -> ScriptedBackend:
    count = {"n": 0}

    def reply(prompt: str) -> str:
        if prompt.rfind(SECOND) > prompt.rfind(FIRST):  # the story is asked last
            return STORY
        count["n"] += 1
        return f"Answer number {count['n']}."

    return ScriptedBackend(reply)


async def _turn(stream, made: list[int], *, stop=None) -> None:
    async for event in stream:
        if isinstance(event, Started):
            made += [event.user_message_id, event.assistant_message_id]
        if stop is not None and isinstance(event, Delta):
            stop()


async def build_branchy_chat(engine) -> tuple[int, list[int]]:
    """Q1 → A1 | A2 (made again) → Q2 → A3 (stopped, then continued); Q1' (edited) → A4.
    Returns the chat's id and every message id the turns reported, in order."""
    made: list[int] = []
    conv = await engine.conversations.create("Herons")
    await _turn(engine.chat.send(conv.id, FIRST), made)
    await _turn(engine.chat.regenerate(made[1]), made)
    engine.scripted.delay = 0.005
    await _turn(engine.chat.send(conv.id, SECOND), made, stop=lambda: engine.chat.stop(conv.id))
    engine.scripted.delay = 0.0
    await _turn(engine.chat.continue_answer(made[-1]), made)
    await _turn(engine.chat.edit_and_resend(made[0], EDITED), made)
    return conv.id, list(dict.fromkeys(made))  # continue and regenerate repeat ids


def _expected(engine, ids: list[int]):
    async def read():
        return {i: await engine.conversations.message(i) for i in ids}

    return read()


def test_json_export_holds_every_message_with_its_parent_and_children(make_engine):
    async def scenario():
        engine = make_engine(backend=_replies())
        cid, ids = await build_branchy_chat(engine)
        truth = await _expected(engine, ids)
        shown = await engine.conversations.messages(cid)
        data = json.loads(await engine.conversations.export(cid, "json"))
        await engine.close()
        return ids, truth, shown, data

    ids, truth, shown, data = run(scenario())
    assert len(ids) == 7  # Q1, A1, A2 (made again), Q2, A3 (continued in place), Q1' (edited), A4
    assert len(shown) == 2  # the window shows the edited branch alone
    mapping = data["mapping"]
    assert sorted(int(k) for k in mapping) == sorted(ids)
    for i, msg in truth.items():
        node = mapping[str(i)]
        assert node["parent"] == msg.parent_id
        assert node["message"]["content"] == msg.content and node["message"]["role"] == msg.role.value
        assert node["message"]["status"] == msg.status.value
        assert node["children"] == sorted(j for j, m in truth.items() if m.parent_id == i)
    assert data["current_node"] == shown[-1].id
    assert [m["id"] for m in data["messages"]] == [m.id for m in shown]
    story = next(m for m in truth.values() if m.content.startswith("Once"))
    assert story.content == STORY and mapping[str(story.id)]["message"]["content"] == STORY  # continued, whole
    roots = [k for k, node in mapping.items() if node["parent"] is None]
    assert len(roots) == 2  # the question and its edit


def test_markdown_export_shows_the_branch_on_screen_then_every_other_branch(make_engine):
    async def scenario():
        engine = make_engine(backend=_replies())
        cid, ids = await build_branchy_chat(engine)
        truth = await _expected(engine, ids)
        md = await engine.conversations.export(cid, "markdown")
        await engine.close()
        return truth, md

    truth, md = run(scenario())
    body, _, others = md.partition("# Other branches")
    assert "2 other branches" in body
    assert EDITED in body and FIRST not in body  # the branch on screen reads first
    for msg in truth.values():
        assert md.count(f"\n\n{msg.content}\n") == 1, msg.content  # every message, once
    assert "after You: “Tell me about herons”" in others  # where the regenerated answer branches off
    assert others.index(FIRST) < others.index("Answer number 1.")
    assert others.index("Answer number 2.") < others.index(SECOND) < others.index(STORY)


def test_export_everything_and_the_cli_keep_every_branch(make_engine, tmp_path, capsys):
    async def scenario():
        engine = make_engine(backend=_replies())
        cid, ids = await build_branchy_chat(engine)
        truth = await _expected(engine, ids)
        await engine.close()
        return cid, truth

    cid, truth = run(scenario())
    target = tmp_path / "backup.zip"
    assert main(["data", "export", str(target)]) == 0
    capsys.readouterr()
    with zipfile.ZipFile(target) as zf:
        manifest = json.loads(zf.read("manifest.json"))
        stem = manifest["conversations"][0]["file"]
        data = json.loads(zf.read(f"{stem}.json"))
        md = zf.read(f"{stem}.md").decode()
    assert manifest["version"] == 2 and manifest["conversations"][0]["messages"] == len(truth)
    assert {int(k): v["parent"] for k, v in data["mapping"].items()} == {i: m.parent_id for i, m in truth.items()}
    assert all(md.count(f"\n\n{m.content}\n") == 1 for m in truth.values())

    assert main(["conversations", "export", str(cid), "--format", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert {int(k) for k in printed["mapping"]} == set(truth)


def test_a_chat_without_branches_exports_as_before(make_engine):
    async def scenario():
        engine = make_engine("Plain answer.")
        conv = await engine.conversations.create("Plain")
        await _turn(engine.chat.send(conv.id, "One question"), [])
        md, data = await engine.conversations.export(conv.id, "markdown"), json.loads(await engine.conversations.export(conv.id, "json"))
        await engine.close()
        return md, data

    md, data = run(scenario())
    assert "Other branches" not in md and "other branch" not in md
    assert [m["content"] for m in data["messages"]] == ["One question", "Plain answer."]
    assert len(data["mapping"]) == 2 and data["current_node"] == data["messages"][-1]["id"]


def test_a_failed_or_cut_answer_says_why_in_markdown():
    """`wren conversations show` said "Wren _(failed)_" with nothing after it; the JSON had the reason."""
    from datetime import datetime

    from wren.engine.export import to_markdown
    from wren.engine.records import ConversationInfo, MessageInfo, MessageStatus, Role

    now = datetime(2026, 11, 29, 10, 0)
    conv = ConversationInfo(1, "Remote", now, now, None, False)
    question = MessageInfo(1, 1, None, Role.USER, "hi", MessageStatus.COMPLETE, now)
    failed = MessageInfo(2, 1, 1, Role.ASSISTANT, "", MessageStatus.FAILED, now,
                         error="could not connect to http://127.0.0.1:9/v1")
    text = to_markdown(conv, [question, failed])
    assert "_(failed)_" in text and "_could not connect to http://127.0.0.1:9/v1_" in text
    whole = MessageInfo(3, 1, 1, Role.ASSISTANT, "Hello.", MessageStatus.COMPLETE, now, error=None)
    assert "_could not" not in to_markdown(conv, [question, whole])
