"""Settings-page calls on the Engine: memories, instructions, safety rules, diagnostics."""

from __future__ import annotations

import asyncio
import io
import zipfile

import pytest

from wren.engine.errors import InvalidRequest
from wren.engine.events import SafetyAction
from wren.engine.safety import PolicyError


def run(coro):
    return asyncio.run(coro)


def test_memory_management_round_trip(make_engine):
    async def main():
        engine = make_engine()
        a = await engine.memories.add("I prefer metric units")
        b = await engine.memories.add("My sister is called Ana")
        edited = await engine.memories.edit(a.id, "I prefer metric units and 24-hour time")
        found = await engine.memories.list("sister")
        deleted = await engine.memories.delete(b.id)
        after_delete = await engine.memories.list()
        await engine.memories.restore(deleted)
        restored = await engine.memories.list()
        cleared = await engine.memories.clear()
        empty = await engine.memories.list()
        with pytest.raises(InvalidRequest):
            await engine.memories.add("x" * 100_000)
        await engine.close()
        return edited, found, after_delete, restored, cleared, empty

    edited, found, after_delete, restored, cleared, empty = run(main())
    assert "24-hour" in edited.text
    assert [m.text for m in found] == ["My sister is called Ana"]
    assert len(after_delete) == 1 and len(restored) == 2 and cleared == 2 and empty == []


def test_instructions_reach_the_prompt(make_engine):
    async def main():
        engine = make_engine("ok")
        await engine.settings.set_instructions("I am a nurse in Porto.", "Answer in one sentence.")
        conv = await engine.conversations.create()
        async for _ in engine.chat.send(conv.id, "hello"):
            pass
        prompt = engine.scripted.loaded[0].prompts[-1]
        saved = await engine.settings.instructions()
        await engine.close()
        return prompt, saved

    prompt, saved = run(main())
    assert saved.about_me == "I am a nurse in Porto."
    assert "nurse in Porto" in prompt and "one sentence" in prompt


def test_safety_actions_change_the_policy_in_force(make_engine, wren_home):
    async def main():
        engine = make_engine("ok")
        before = {r.category: r for r in engine.safety.rules()}
        await engine.safety.set_action("pii.email", "local", SafetyAction.BLOCK)
        after = {r.category: r for r in engine.safety.rules()}
        conv = await engine.conversations.create()
        events = [e async for e in engine.chat.send(conv.id, "write to jane.doe.77@mailbox-test.org please")]
        with pytest.raises(PolicyError):
            await engine.safety.set_blocklist([], ["bad("])
        await engine.safety.set_blocklist(["pineapple"], [])
        await engine.close()
        return before, after, events

    before, after, events = run(main())
    assert before["pii.email"].local is SafetyAction.ALLOW
    assert after["pii.email"].local is SafetyAction.BLOCK and after["pii.email"].remote is before["pii.email"].remote
    assert events[-1].reason.value == "blocked"
    text = (wren_home / "safety" / "policy.toml").read_text()
    assert "pineapple" in text and "bad(" not in text


def test_diagnostics_bundle_is_a_zip(make_engine):
    async def main():
        engine = make_engine()
        data = await engine.settings.diagnostics_bundle()
        await engine.close()
        return data

    names = zipfile.ZipFile(io.BytesIO(run(main()))).namelist()
    assert "system.json" in names
