"""`wren chat`'s /attach: a file for the next message, its text in that prompt, its name said
in the terminal and kept with the stored question; a bad path is refused and nothing is sent."""

from __future__ import annotations

import asyncio
import io

from wren.engine.terminal.chat import Chat
from wren.engine.terminal.output import Output


def test_attach_puts_the_file_in_the_next_prompt_only(make_engine, tmp_path):
    note = tmp_path / "trip-notes.md"
    note.write_text("Flight TP 1351 leaves at **07:45**.\n", encoding="utf-8")
    engine = make_engine(lambda prompt: "At 07:45.")
    err = io.StringIO()

    async def scenario():
        await engine.models.load()
        chat = Chat(engine, await engine.settings.default_sampling(), out=Output(io.StringIO()), err=err)
        await chat.handle(f"/attach {tmp_path / 'missing.md'}")
        await chat.handle(f"/attach {note}")
        await chat.handle("/attach")
        assert [p for m in engine.scripted.loaded for p in m.prompts] == []  # nothing sent yet
        await chat.handle("What time does my flight leave, according to the attached notes?")
        await chat.handle("/attach")
        prompts = [p for m in engine.scripted.loaded for p in m.prompts]
        stored = await engine.conversations.messages(chat.conv.id)
        await engine.close()
        return prompts, stored

    prompts, stored = asyncio.run(scenario())
    text = err.getvalue()
    assert "/attach: " in text and "missing.md is not a file" in text
    assert "(attached to your next message: trip-notes.md)" in text
    assert "(with trip-notes.md)" in text
    assert text.rstrip().endswith("(no files attached; /attach PATH)")  # they left with the message
    assert len(prompts) == 1 and "Flight TP 1351 leaves at **07:45**." in prompts[0]
    assert stored[0].meta["attachments"] == [str(note.resolve())]
