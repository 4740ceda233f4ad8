"""The context report is the prompt as the model read it (issue 34): with tools offered and a
file attached, the inspector's exact prompt is the text the model was given, tool definitions
included, and its count is the answer's record (and so what the status bar and `wren context`
show). The real Engine over a scripted backend, a real file on disk."""

from __future__ import annotations

import asyncio
import json

from wren.engine.context import PartKind, PartState, report_from_meta
from wren.engine.records import SendOptions
from wren.engine.terminal.memory import format_report


def test_the_report_counts_and_shows_the_tools_and_the_file_the_model_read(make_engine, tmp_path):
    note = tmp_path / "diet.md"
    note.write_text("# Diet\n\nNo peanuts; vegetarian since 2019.\n", encoding="utf-8")

    async def main():
        engine = make_engine("Lentil soup would suit you.")
        conv = await engine.conversations.create()
        options = SendOptions(attachments=(str(note),), tools=("current_datetime",))
        _ = [e async for e in engine.chat.send(conv.id, "What should I cook tonight?", options)]
        seen = engine.scripted.loaded[0].prompts[0]
        messages = await engine.conversations.messages(conv.id)
        report = await engine.conversations.context_report(messages[-1].id)
        await engine.close()
        return seen, messages[-1], report

    seen, answer, report = asyncio.run(main())
    assert "current_datetime" in seen and "No peanuts" in seen  # what the model was given
    assert report is not None and report == report_from_meta(answer.meta)
    assert report.rendered_prompt == seen  # the exact prompt is every token it read
    assert report.prompt_tokens == answer.prompt_tokens  # one number: the inspector and the record
    tools = report.parts_of(PartKind.TOOLS, PartState.INCLUDED)
    assert [p.text for p in tools] == ["current_datetime"] and tools[0].tokens > 10
    # the parts add up to the prompt: nothing the model read is unaccounted for beyond the
    # chat template's own markup
    included = sum(report.tokens_by_kind().values())
    assert report.prompt_tokens - 40 <= included <= report.prompt_tokens + 40
    assert report.parts_of(PartKind.ATTACHMENT, PartState.INCLUDED)[0].text == "diet.md"
    # `wren context` says the same number
    assert f"prompt {answer.prompt_tokens:,} of" in format_report(report, answer.id)
    assert json.loads(json.dumps(report.to_dict()))["parts"][0]["kind"] == "tools"


def test_continue_keeps_the_context_an_answer_filled(make_engine):
    """Continue adds to the answer's tokens: the record's prompt + answer (the status bar's
    number, context_used) grows; it fell to the prompt + the new tokens only."""
    from wren.engine.context.report import context_used
    from wren.engine.events import Delta

    async def main():
        engine = make_engine(" ".join(f"w{i}" for i in range(300)), delay=0.003)
        conv = await engine.conversations.create()
        seen = 0
        async for event in engine.chat.send(conv.id, "count"):
            seen += isinstance(event, Delta)
            if seen == 20:
                engine.chat.stop(conv.id)
        cut = (await engine.conversations.messages(conv.id))[-1]
        _ = [e async for e in engine.chat.continue_answer(cut.id)]
        grown = (await engine.conversations.messages(conv.id))[-1]
        whole = len(engine.scripted.loaded[0].tokenizer.encode(grown.content))
        await engine.close()
        return cut, grown, whole

    cut, grown, whole = asyncio.run(main())
    assert grown.id == cut.id and len(grown.content) > len(cut.content) and cut.completion_tokens
    assert abs(grown.completion_tokens - whole) <= 3  # the whole answer's tokens, as read back
    assert context_used(grown.prompt_tokens, grown.completion_tokens) > context_used(cut.prompt_tokens, cut.completion_tokens)


def test_a_continued_answer_that_ends_is_not_offered_continue_again(make_engine):
    """completion_tokens counts the whole answer after a Continue; the length-limit check
    (records.cut_at_limit) counts only its last part, so a finished one is not "cut"."""
    from wren.engine.inference.sampling import SamplingParams
    from wren.engine.records import can_continue, cut_at_limit

    async def main():
        engine = make_engine(" ".join(f"w{i}" for i in range(40)))
        conv = await engine.conversations.create()
        options = SendOptions(sampling=SamplingParams(temperature=0.0, max_tokens=12))
        _ = [e async for e in engine.chat.send(conv.id, "count", options)]
        cut = (await engine.conversations.messages(conv.id))[-1]
        _ = [e async for e in engine.chat.continue_answer(cut.id)]
        after = (await engine.conversations.messages(conv.id))[-1]
        await engine.close()
        return cut, after

    cut, after = asyncio.run(main())
    assert cut_at_limit(cut) and can_continue(cut)
    assert after.completion_tokens >= 12  # the whole answer's tokens
    assert not cut_at_limit(after) and not can_continue(after)
