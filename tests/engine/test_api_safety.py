"""Safety through the Engine: input block/redact, output block while streaming, clean logs."""

from __future__ import annotations

import asyncio
from pathlib import Path

from wren.engine.events import Delta, Finished, FinishReason, SafetyAction, SafetyNotice
from wren.engine.records import MessageStatus

# Built at run time so no key-shaped literal sits in the repository.
FAKE_OPENAI_KEY = "sk-proj-" + "Ab3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1eF3hJ5kL7nP9rS1"
EMAIL = "jane.doe.4521@mailbox-test.org"


def write_policy(home: Path, text: str) -> None:
    (home / "safety").mkdir(exist_ok=True)
    (home / "safety" / "policy.toml").write_text(text)


async def collect(stream):
    return [e async for e in stream]


def test_blocked_input_is_neither_sent_nor_stored(make_engine, wren_home):
    write_policy(wren_home, '[blocklist]\nwords = ["pineapple"]\n')

    async def main():
        engine = make_engine("should never run")
        conv = await engine.conversations.create()
        events = await collect(engine.chat.send(conv.id, "I love Pineapple on pizza"))
        msgs = await engine.conversations.messages(conv.id)
        await engine.close()
        return events, msgs

    events, msgs = asyncio.run(main())
    notices = [e for e in events if isinstance(e, SafetyNotice)]
    assert notices and notices[0].action is SafetyAction.BLOCK and notices[0].category == "user.blocklist"
    assert notices[0].span == (7, 16)
    assert events[-1] == Finished(FinishReason.BLOCKED)
    assert msgs == []


def test_redacted_input_is_stored_and_sent_redacted(make_engine, wren_home):
    write_policy(wren_home, '[actions]\n"secret.openai_key" = "redact"\n')
    prompts = []

    async def main():
        engine = make_engine(lambda prompt: prompts.append(prompt) or "noted")
        conv = await engine.conversations.create()
        events = await collect(engine.chat.send(conv.id, f"my key is {FAKE_OPENAI_KEY} ok"))
        msgs = await engine.conversations.messages(conv.id)
        await engine.close()
        return events, msgs

    events, msgs = asyncio.run(main())
    assert any(isinstance(e, SafetyNotice) and e.action is SafetyAction.REDACT for e in events)
    assert FAKE_OPENAI_KEY not in msgs[0].content and "[REDACTED:secret.openai_key]" in msgs[0].content
    assert FAKE_OPENAI_KEY not in prompts[0]
    assert msgs[0].meta["safety"][0]["category"] == "secret.openai_key"


def test_blocked_output_never_reaches_the_screen_or_the_disk(make_engine, wren_home):
    write_policy(wren_home, '[blocklist]\nwords = ["forbidden phrase"]\n')

    async def main():
        engine = make_engine("Sure, here is the forbidden phrase you wanted and more text after it.")
        conv = await engine.conversations.create()
        events = await collect(engine.chat.send(conv.id, "go on"))
        msgs = await engine.conversations.messages(conv.id)
        await engine.close()
        return events, msgs

    events, msgs = asyncio.run(main())
    shown = "".join(e.text for e in events if isinstance(e, Delta))
    assert "forbidden" not in shown.lower() and "after it" not in shown
    assert events[-1].reason is FinishReason.BLOCKED
    answer = msgs[-1]
    assert answer.status is MessageStatus.BLOCKED and answer.content == ""
    assert answer.meta["safety"][0]["action"] == "block"


def test_logs_never_contain_prompts_secrets_or_personal_data(make_engine, wren_home):
    from wren.engine.logs import close_logging, setup_logging

    log_dir = setup_logging().parent
    try:
        async def main():
            engine = make_engine(f"Reply mentioning {EMAIL} and {FAKE_OPENAI_KEY}")
            conv = await engine.conversations.create()
            await collect(engine.chat.send(conv.id, f"email {EMAIL}, key {FAKE_OPENAI_KEY}, secret plan zebra"))
            await engine.close()

        asyncio.run(main())
    finally:
        close_logging()
    logs = "".join(p.read_text() for p in Path(log_dir).rglob("*") if p.is_file())
    assert "answer.finished" in logs  # something was logged at all
    for leaked in (EMAIL, FAKE_OPENAI_KEY, "secret plan zebra", "Reply mentioning"):
        assert leaked not in logs
