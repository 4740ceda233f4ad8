"""A long prompt is read in chunks: the answer's stream says how far (PrefillProgress,
before the first Delta), Stop lands within a chunk, and the question stays saved."""

from __future__ import annotations

import asyncio
import io
import json

import pytest

from wren.engine.events import Delta, Finished, FinishReason, PrefillProgress, Started, Usage, event_to_dict
from wren.engine.inference.worker import PREFILL_CHUNK
from wren.engine.progress import PrefillLine, format_prefill_progress
from wren.engine.records import MessageStatus, Role

# Far more than one chunk of the tiny tokenizer's tokens (it splits "wordN" into several).
LONG_QUESTION = " ".join(f"word{i}" for i in range(300))


def run(coro):
    return asyncio.run(coro)


def _check_progress(events) -> list[PrefillProgress]:
    """Progress comes before any text, its counts rise to the total, and it is sent at
    most once per chunk (plus the closing done == total)."""
    progress = [e for e in events if isinstance(e, PrefillProgress)]
    first_delta = next(i for i, e in enumerate(events) if isinstance(e, Delta))
    assert all(events.index(p) < first_delta for p in progress)
    started = next(i for i, e in enumerate(events) if isinstance(e, Started))
    assert all(events.index(p) > started for p in progress)
    dones = [p.done for p in progress]
    total = progress[0].total
    assert all(p.total == total for p in progress)
    assert dones == sorted(set(dones)) and dones[-1] == total
    assert all(b - a <= PREFILL_CHUNK + 1 for a, b in zip(dones, dones[1:]))
    return progress


def test_long_prompt_reports_progress_before_the_answer(make_engine):
    async def main():
        engine = make_engine("Read it all.", prefill_delay=0.01)
        conv = await engine.conversations.create()
        events = [e async for e in engine.chat.send(conv.id, LONG_QUESTION)]
        msgs = await engine.conversations.messages(conv.id)
        await engine.close()
        return events, msgs

    events, msgs = run(main())
    progress = _check_progress(events)
    total = progress[0].total
    assert total == msgs[-1].prompt_tokens > 2 * PREFILL_CHUNK
    # Every chunk announced: from nothing cached to the whole prompt.
    assert progress[0].done == 0
    assert len(progress) == -(-(total - 1) // PREFILL_CHUNK) + 1
    usage = next(e for e in events if isinstance(e, Usage))
    assert usage.prompt_tokens == total
    assert "".join(e.text for e in events if isinstance(e, Delta)) == "Read it all."
    assert events[-1].reason is FinishReason.STOP
    assert event_to_dict(progress[0]) == {"type": "prefill_progress", "done": 0, "total": total}
    json.dumps(event_to_dict(progress[-1]))  # the CLI's --json line


def test_short_prompt_and_cached_prefix_report_no_progress(make_engine):
    async def main():
        engine = make_engine("Fine.")
        conv = await engine.conversations.create()
        short = [e async for e in engine.chat.send(conv.id, "hello")]
        long_first = [e async for e in engine.chat.send(conv.id, LONG_QUESTION)]
        # The next turn reuses the cached conversation: only a few new tokens to read.
        follow_up = [e async for e in engine.chat.send(conv.id, "and then?")]
        await engine.close()
        return short, long_first, follow_up

    short, long_first, follow_up = run(main())
    assert not [e for e in short if isinstance(e, PrefillProgress)]
    assert [e for e in long_first if isinstance(e, PrefillProgress)]
    cached = next(e for e in follow_up if isinstance(e, Usage)).cached_tokens
    assert cached > PREFILL_CHUNK  # the premise: the long turn was reused
    assert not [e for e in follow_up if isinstance(e, PrefillProgress)]


def test_stop_while_reading_the_prompt_ends_within_a_chunk_and_keeps_the_question(make_engine):
    async def main():
        engine = make_engine("This answer must never appear.", prefill_delay=0.05)
        conv = await engine.conversations.create()
        events = []
        async for event in engine.chat.send(conv.id, LONG_QUESTION):
            events.append(event)
            if isinstance(event, PrefillProgress) and event.done > 0:
                engine.chat.stop(conv.id)  # one chunk read, the next in flight
        msgs = await engine.conversations.messages(conv.id)
        calls = engine.scripted.loaded[0].prefill_calls
        await engine.close()
        return events, msgs, calls

    events, msgs, calls = run(main())
    progress = [e for e in events if isinstance(e, PrefillProgress)]
    assert progress[-1].done < progress[-1].total
    # Stopped after the first chunk: at most the chunk in flight when Stop came ran after it.
    assert len(progress) <= 3 and calls <= 3
    assert not [e for e in events if isinstance(e, Delta)]
    assert isinstance(events[-1], Finished) and events[-1].reason is FinishReason.CANCELLED
    assert [(m.role, m.status) for m in msgs] == [
        (Role.USER, MessageStatus.COMPLETE), (Role.ASSISTANT, MessageStatus.STOPPED)]
    assert msgs[0].content == LONG_QUESTION and msgs[1].content == ""


def test_cli_progress_line_text():
    assert format_prefill_progress(1024, 4289) == "reading the prompt: 1,024/4,289 tokens"
    assert format_prefill_progress(0, 7) == "reading the prompt: 0/7 tokens"
    with pytest.raises(ValueError, match="done <= total"):
        format_prefill_progress(8, 7)
    with pytest.raises(ValueError, match="total >= 1"):
        format_prefill_progress(0, 0)
    with pytest.raises(TypeError, match="token counts"):
        format_prefill_progress(1.5, 7)


def test_cli_progress_line_overwrites_itself_on_a_terminal_and_stays_silent_on_a_pipe():
    out = io.StringIO()
    line = PrefillLine(out, tty=True)
    line.update(256, 600)
    line.update(512, 600)
    line.clear()
    line.clear()  # nothing shown: nothing more written
    assert out.getvalue() == (
        "\rreading the prompt: 256/600 tokens\x1b[K\rreading the prompt: 512/600 tokens\x1b[K\r\x1b[K")
    piped = io.StringIO()  # StringIO is no terminal
    quiet = PrefillLine(piped)
    quiet.update(256, 600)
    quiet.clear()
    assert piped.getvalue() == "" and not quiet.tty
