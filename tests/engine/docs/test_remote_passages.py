"""Library passages bound for a remote model pass the remote policy like any other text:
a secret in a document is redacted before it leaves, and the user is told (an outgoing
SafetyNotice). A real local OpenAI-compatible server stands in for the provider."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.engine.providers.fakeserver import FakeServer
from wren.engine.events import SafetyAction, SafetyNotice

SECRET = "sk-proj-" + "Qw3eR5tY7uI9oP1aS3dF5gH7jK9lZ1xC3vB5nM7"


def test_a_secret_in_a_library_passage_is_redacted_for_a_remote_model(make_engine, tmp_path: Path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "setup.md").write_text(f"# Deploy\n\nThe deploy script reads the API key {SECRET} from here.\n")
    server = FakeServer().start()

    async def main():
        engine = make_engine("a local answer")
        engine.library.index.embedder = lambda: None
        await engine.library.add([str(folder)])
        await engine.library.sync()
        await engine.providers.add("fake", server.base_url, models=("fake-chat",))
        await engine.models.load("fake/fake-chat")
        conv = await engine.conversations.create()
        events = [e async for e in engine.chat.send(conv.id, "Where does the deploy script read its API key?")]
        await engine.close()
        return events

    try:
        events = asyncio.run(main())
        (chat,) = server.chats()
    finally:
        server.stop()
    sent = str(chat.body["messages"])
    assert "deploy script reads the API key" in sent  # the passage went, so the check below can fail
    assert SECRET not in sent and "[REDACTED:secret.openai_key]" in sent
    notices = [e for e in events if isinstance(e, SafetyNotice) and e.stage == "outgoing"]
    assert [(n.category, n.action) for n in notices] == [("secret.openai_key", SafetyAction.REDACT)]
