"""Attached files reach the prompt: the real Engine over a scripted backend, real files on
disk. A file that fits goes in whole with the question; one too long for the window goes in
as an excerpt that says so; one that cannot be read is named with the reason. Each is a part
of the answer's context report."""

from __future__ import annotations

import asyncio

from wren.engine.context import PartKind, PartState, report_from_meta
from wren.engine.events import AnswerNotice, Delta, NoticeKind
from wren.engine.records import SendOptions

NOTE = """# Trip to Lisbon

- Flight TP 1351 leaves Berlin at **07:45** on Friday, gate B12.
- Hotel check-in from 15:00.
"""


def run(coro):
    return asyncio.run(coro)


async def _drain(stream):
    return [event async for event in stream]


def _attachment_parts(meta):
    report = report_from_meta(meta)
    assert report is not None, "the answer kept no context report"
    return report, report.parts_of(PartKind.ATTACHMENT)


def test_an_attached_markdown_note_is_in_the_prompt_and_the_report(make_engine, tmp_path):
    note = tmp_path / "trip-notes.md"
    note.write_text(NOTE, encoding="utf-8")

    async def main():
        engine = make_engine("Your flight leaves at 07:45.")
        conv = await engine.conversations.create()
        question = "What time does my flight leave, according to the attached notes?"
        events = await _drain(engine.chat.send(conv.id, question, SendOptions(attachments=(str(note),))))
        first_prompt = engine.scripted.loaded[0].prompts[-1]
        later = await _drain(engine.chat.send(conv.id, "And which gate?"))
        second_prompt = engine.scripted.loaded[0].prompts[-1]
        shown = await engine.conversations.messages(conv.id)
        await engine.close()
        return events, later, first_prompt, second_prompt, shown

    events, later, first_prompt, second_prompt, shown = run(main())
    assert "".join(e.text for e in events if isinstance(e, Delta)) == "Your flight leaves at 07:45."
    assert not [e for e in events if isinstance(e, AnswerNotice)]  # it fit whole: nothing to say
    # the note's text and the question, in the user's turn, in that order
    user_turn = first_prompt.split("<|im_start|>user\n")[-1]
    assert "Flight TP 1351 leaves Berlin at **07:45**" in user_turn
    assert "[file: trip-notes.md]" in user_turn
    assert user_turn.index("07:45") < user_turn.index("What time does my flight leave")
    assert "<|im_start|>system" not in user_turn
    # the whole note is in the prompt: no tool is offered to read it again
    assert "read_attachment" not in first_prompt and "You can call tools" not in first_prompt
    # the user's stored message keeps its text as typed and names its file
    question, answer = shown[0], shown[1]
    assert question.content == "What time does my flight leave, according to the attached notes?"
    assert question.meta["attachments"] == [str(note.resolve())]
    report, parts = _attachment_parts(answer.meta)
    assert [(p.text, p.state, p.source_ids) for p in parts] == [("trip-notes.md", PartState.INCLUDED, (question.id,))]
    assert parts[0].tokens > 20 and parts[0].note == "the whole file"
    assert "07:45" in report.rendered_prompt
    assert report.tokens_by_kind()["attachment"] == parts[0].tokens
    # a later question in the same chat still has the note
    assert "Flight TP 1351" in second_prompt.split("<|im_start|>user\n")[-1]
    _, later_parts = _attachment_parts(shown[-1].meta)
    assert [(p.text, p.state) for p in later_parts] == [("trip-notes.md", PartState.INCLUDED)]


def test_a_file_too_long_for_the_window_goes_in_as_an_excerpt_that_says_so(make_engine, tmp_path):
    from wren.engine.inference.backends.scripted import ScriptedBackend

    big = tmp_path / "log.md"
    lines = [f"line {n}: the value of item {n} is {n * 7}" for n in range(6000)]
    big.write_text("\n".join(lines) + "\nLAST LINE OF THE FILE\n", encoding="utf-8")

    async def main():
        engine = make_engine(backend=ScriptedBackend("ok", context_length=4096))
        conv = await engine.conversations.create()
        events = await _drain(engine.chat.send(conv.id, "What is item 2?", SendOptions(attachments=(str(big),))))
        prompt = engine.scripted.loaded[0].prompts[-1]
        shown = await engine.conversations.messages(conv.id)
        await engine.close()
        return events, prompt, shown

    events, prompt, shown = run(main())
    # the user is told too, as the answer starts, and the answer keeps it
    notices = [e for e in events if isinstance(e, AnswerNotice)]
    assert [n.about for n in notices] == [NoticeKind.ATTACHMENT_CUT]
    assert notices[0].text.startswith("log.md is too long for this model's window: the model read only the first ")
    assert shown[-1].meta["notices"] == [{"about": "attachment_cut", "text": notices[0].text}]
    assert "line 2: the value of item 2 is 14" in prompt
    assert "LAST LINE OF THE FILE" not in prompt
    assert "[… log.md goes on: only its first" in prompt
    assert '"name": "read_attachment"' in prompt  # offered, to read on
    report, parts = _attachment_parts(shown[-1].meta)
    assert len(parts) == 1 and parts[0].state is PartState.INCLUDED
    assert parts[0].note.startswith("an excerpt: the first")
    assert report.prompt_tokens <= report.budget


def test_a_file_gone_before_the_answer_is_named_with_the_reason(make_engine, tmp_path):
    note = tmp_path / "gone.md"
    note.write_text("the door code is 4711", encoding="utf-8")

    async def main():
        engine = make_engine("ok")
        conv = await engine.conversations.create()
        await _drain(engine.chat.send(conv.id, "first", SendOptions(attachments=(str(note),))))
        note.unlink()
        await _drain(engine.chat.send(conv.id, "what is the door code?"))
        prompt = engine.scripted.loaded[0].prompts[-1]
        shown = await engine.conversations.messages(conv.id)
        await engine.close()
        return prompt, shown

    prompt, shown = run(main())
    assert "4711" not in prompt.split("<|im_start|>user\n")[-1]
    assert "[file: gone.md — it could not be read:" in prompt
    _, parts = _attachment_parts(shown[-1].meta)
    assert [(p.text, p.state) for p in parts] == [("gone.md", PartState.DROPPED)]
    assert parts[0].note.startswith("could not be read")


def test_continuing_an_answer_keeps_the_file_in_its_prompt(make_engine, tmp_path):
    note = tmp_path / "recipe.md"
    note.write_text("Bake at 180 degrees for 25 minutes.", encoding="utf-8")

    async def main():
        from wren.engine.inference.sampling import SamplingParams

        engine = make_engine("Bake it at 180 degrees for twenty-five minutes, then let it cool.")
        conv = await engine.conversations.create()
        options = SendOptions(attachments=(str(note),), sampling=SamplingParams(temperature=0, max_tokens=3))
        await _drain(engine.chat.send(conv.id, "how long?", options))
        answer = (await engine.conversations.messages(conv.id))[-1]
        model = engine.scripted.loaded[0]
        first = model.prompts[-1]
        await _drain(engine.chat.continue_answer(answer.id))
        # what the model holds after the continuation: its prompt, then the answer so far
        seen = model.tokenizer.decode(model._ids, skip_special_tokens=False)
        await engine.close()
        return first, seen, answer.content

    first, seen, kept = run(main())
    assert "Bake at 180 degrees" in first
    question_turn, answered = seen.rsplit("<|im_start|>user\n", 1)[-1].split("<|im_start|>assistant\n")
    assert "[file: recipe.md]\nBake at 180 degrees for 25 minutes." in question_turn
    assert answered.startswith(kept)


def test_the_transcript_names_the_attached_file(make_engine, tmp_path):
    """`wren conversations show` prints this Markdown: the question is followed by its files."""
    note = tmp_path / "trip-notes.md"
    note.write_text(NOTE, encoding="utf-8")

    async def main():
        engine = make_engine("At 07:45.")
        conv = await engine.conversations.create()
        await _drain(engine.chat.send(conv.id, "When do I fly?", SendOptions(attachments=(str(note),))))
        await _drain(engine.chat.send(conv.id, "Thanks"))
        text = await engine.conversations.export(conv.id, "markdown")
        await engine.close()
        return text

    text = run(main())
    assert "When do I fly?\n\n_Attached: trip-notes.md_\n" in text
    assert text.count("_Attached:") == 1


def test_a_file_changed_between_questions_is_read_again(make_engine, tmp_path):
    note = tmp_path / "todo.md"
    note.write_text("- buy milk\n", encoding="utf-8")

    async def main():
        engine = make_engine("ok")
        conv = await engine.conversations.create()
        await _drain(engine.chat.send(conv.id, "what is on my list?", SendOptions(attachments=(str(note),))))
        first = engine.scripted.loaded[0].prompts[-1]
        note.write_text("- buy milk\n- call the plumber about the leaking tap\n", encoding="utf-8")
        await _drain(engine.chat.send(conv.id, "and now?"))
        second = engine.scripted.loaded[0].prompts[-1]
        await engine.close()
        return first, second

    first, second = run(main())
    assert "buy milk" in first and "plumber" not in first
    assert "call the plumber" in second.split("<|im_start|>user\n")[-1]
