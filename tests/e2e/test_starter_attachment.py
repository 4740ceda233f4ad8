"""The real starter model with a Markdown note attached: the note's text is in its prompt, so
its answer draws on the note (before, it never called read_attachment and made a time up).
The 135M starter does not reliably pick the right line of a note (greedy, it answers with the
hotel's 15:00), so the check is that the note reached it, not that it reads it well."""

from __future__ import annotations

import asyncio

import pytest

pytestmark = pytest.mark.slow

NOTE = """# Trip to Lisbon

- Flight TP 1351 leaves Berlin at 07:45 on Friday, gate B12.
- Hotel check-in from 15:00.
"""


def test_the_starter_answers_from_the_attached_note(starter_models_dir, wren_home, tmp_path):
    from wren.engine.api import Engine
    from wren.engine.events import Delta, ToolCall
    from wren.engine.inference.sampling import SamplingParams
    from wren.engine.modelhub.registry import ModelRegistry
    from wren.engine.records import SendOptions
    from wren.engine.store import Store

    note = tmp_path / "trip-notes.md"
    note.write_text(NOTE, encoding="utf-8")

    async def main():
        engine = Engine(Store(wren_home / "wren.sqlite3"), ModelRegistry(starter_models_dir))
        await engine.models.load(backend="torch-cpu")
        conv = await engine.conversations.create()
        options = SendOptions(sampling=SamplingParams(temperature=0.0, max_tokens=48), attachments=(str(note),))
        events = [e async for e in engine.chat.send(
            conv.id, "What time does my flight leave, according to the attached notes?", options)]
        await engine.close()
        return events

    events = asyncio.run(main())
    answer = "".join(e.text for e in events if isinstance(e, Delta))
    assert not [e for e in events if isinstance(e, ToolCall)]  # the text was there: no tool needed
    assert any(word in answer for word in ("Lisbon", "Berlin", "B12", "1351", "07:45", "15:00")), answer
