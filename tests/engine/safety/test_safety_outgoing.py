"""Everything bound for a remote model passes the remote policy: memories, the system
prompt, earlier turns and tool results, not only the typed text. A real local
OpenAI-compatible server stands in for the provider and records what it receives."""

from __future__ import annotations

import asyncio

import pytest

from tests.engine.providers.fakeserver import FakeServer
from wren.engine.events import SafetyAction, SafetyNotice
from wren.engine.records import SendOptions
from wren.engine.safety import Policy
from wren.engine.safety.outgoing import guard_outgoing

SECRET = "sk-proj-" + "Qw3eR5tY7uI9oP1aS3dF5gH7jK9lZ1xC3vB5nM7"
CARD_NBSP = "4111\u00a01111\u00a01111\u00a01111"


@pytest.fixture
def server():
    s = FakeServer().start()
    yield s
    s.stop()


async def _ask_remote(make_engine, server, question: str, options: SendOptions | None = None):
    engine = make_engine("a local answer")
    await engine.providers.add("fake", server.base_url, models=("fake-chat",))
    await engine.memories.add(f"My OpenAI API key is {SECRET}")
    await engine.models.load("fake/fake-chat")
    conv = await engine.conversations.create()
    events = [e async for e in engine.chat.send(conv.id, question, options)]
    await engine.close()
    return events


def test_a_memory_holding_an_api_key_does_not_leave_verbatim(make_engine, server):
    options = SendOptions(system_prompt=f"You are helpful. The user's card: {CARD_NBSP}.")
    events = asyncio.run(_ask_remote(make_engine, server, "What is my OpenAI API key?", options))
    (chat,) = server.chats()
    sent = str(chat.body["messages"])
    assert SECRET not in sent and "Qw3eR5tY7uI9" not in sent
    assert "[REDACTED:secret.openai_key]" in sent
    assert "4111" not in sent and "[REDACTED:pii.payment_card]" in sent
    notices = [e for e in events if isinstance(e, SafetyNotice) and e.stage == "outgoing"]
    assert {n.category for n in notices} >= {"secret.openai_key", "pii.payment_card"}
    assert all(n.action is SafetyAction.REDACT for n in notices)
    assert all(SECRET not in repr(e) for e in events)


def test_what_the_user_typed_keeps_the_policys_warning():
    """The typed question was scanned and its warning shown as it was sent: it goes as
    typed. The same key in the system prompt is redacted (nobody saw it go)."""
    messages = [
        {"role": "system", "content": f"remember {SECRET}"},
        {"role": "assistant", "content": "ok", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": f'{{"k": "{SECRET}"}}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": f"result {SECRET}"},
        {"role": "user", "content": f"is {SECRET} still valid?"},
    ]
    sent, notices = guard_outgoing(messages, Policy.shipped(), typed=3)
    assert SECRET not in str(sent[:3])
    assert sent[1]["tool_calls"][0]["id"] == "c1" and sent[2]["tool_call_id"] == "c1"
    assert sent[3]["content"] == messages[3]["content"]
    assert [n.action for n in notices] == [SafetyAction.REDACT] * 3 + [SafetyAction.WARN]
    assert messages[0]["content"] == f"remember {SECRET}"  # the caller's list is not changed


def test_a_card_number_typed_with_no_break_spaces_does_not_leave(make_engine, server):
    events = asyncio.run(_ask_remote(make_engine, server, f"is my card {CARD_NBSP} still valid?"))
    (chat,) = server.chats()
    sent = str(chat.body["messages"])
    assert "4111" not in sent and "[REDACTED:pii.payment_card]" in sent
    typed = [e for e in events if isinstance(e, SafetyNotice) and e.stage == "input"]
    assert [(n.category, n.action) for n in typed] == [("pii.payment_card", SafetyAction.REDACT)]


def test_a_secret_in_an_attached_file_is_redacted_while_the_typed_question_keeps_its_policy(make_engine, server, tmp_path):
    """An attached file's text goes into the question's message; only what the user typed
    there keeps the policy's warning, the file's secret is masked like any passage."""
    notes = tmp_path / "notes.md"
    notes.write_text(f"Deploy notes. The API key is {SECRET}. Flight at 07:45.\n")

    async def ask():
        engine = make_engine("a local answer")
        await engine.providers.add("fake", server.base_url, models=("fake-chat",))
        await engine.models.load("fake/fake-chat")
        conv = await engine.conversations.create()
        events = [e async for e in engine.chat.send(conv.id, "When does my flight leave?",
                                               SendOptions(attachments=(str(notes),)))]
        await engine.close()
        return events

    events = asyncio.run(ask())
    sent = server.chats()[-1].body["messages"][-1]["content"]
    assert "Flight at 07:45" in sent and sent.endswith("When does my flight leave?")
    assert SECRET not in sent and "[REDACTED:secret.openai_key]" in sent
    assert any(isinstance(e, SafetyNotice) and e.stage == "outgoing" for e in events)


def test_what_is_typed_after_attached_text_keeps_its_warning():
    from wren.engine.safety.outgoing import guard_outgoing
    from wren.engine.safety.policy import Policy

    typed = f"my key is {SECRET}"
    message = f"[attached]\nkey {SECRET}\n\n{typed}"
    (out,), _ = guard_outgoing([{"role": "user", "content": message}], Policy.shipped(), 0, typed)
    text = out["content"]
    assert text.endswith(typed)  # typed now: the policy warns, it does not mask
    assert text.count(SECRET) == 1  # the attached copy is masked
