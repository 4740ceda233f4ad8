"""Continue an answer that ended stopped or at the length limit: the same message grows,
and its prompt and text so far come from the KV cache."""

from __future__ import annotations

import asyncio

import pytest

from wren.engine.errors import InvalidRequest
from wren.engine.events import Delta, Finished, FinishReason, Started, Usage
from wren.engine.inference.sampling import SamplingParams
from wren.engine.records import MessageStatus, SendOptions

ANSWER = "one two three four five six seven eight nine ten eleven twelve."


def run(coro):
    return asyncio.run(coro)


async def collect(stream):
    return [event async for event in stream]


@pytest.mark.slow  # loads the tiny model on torch (about 20 s on 2 busy cores)
def test_continue_extends_an_answer_cut_at_the_length_limit_reusing_the_cache(wren_home, tiny_model_dir):
    """On torch with the tiny model: the continued answer's prompt is its own prompt plus
    its text so far, found in the prefix cache."""
    from tests.fixtures.tiny import tiny_engine

    async def main():
        engine = tiny_engine(wren_home, tiny_model_dir)
        await engine.models.load(backend="torch-cpu")
        conv = await engine.conversations.create("counting")
        params = SamplingParams(temperature=0.0, max_tokens=6)
        first = await collect(engine.chat.send(conv.id, "count", SendOptions(sampling=params)))
        cut = (await engine.conversations.messages(conv.id))[-1]
        events = await collect(engine.chat.continue_answer(cut.id))
        shown = await engine.conversations.messages(conv.id)
        await engine.close()
        return first, cut, events, shown

    first, cut, events, shown = run(main())
    assert first[-1].reason is FinishReason.LENGTH
    started = next(e for e in events if isinstance(e, Started))
    assert started.assistant_message_id == cut.id  # the same message, not a new one
    usage = next(e for e in events if isinstance(e, Usage))
    assert usage.cached_tokens > 0
    assert isinstance(events[-1], Finished) and events[-1].message_id == cut.id
    added = "".join(e.text for e in events if isinstance(e, Delta))
    assert usage.completion_tokens > 0
    assert len(shown) == 2 and shown[-1].id == cut.id
    assert shown[-1].content == cut.content + added


def test_continue_a_stopped_answer(make_engine):
    async def main():
        engine = make_engine(ANSWER * 20, delay=0.005)
        conv = await engine.conversations.create("counting")
        async for event in engine.chat.send(conv.id, "count"):
            if isinstance(event, Delta):
                engine.chat.stop(conv.id)
        stopped = (await engine.conversations.messages(conv.id))[-1]
        events = await collect(engine.chat.continue_answer(stopped.id))
        after = (await engine.conversations.messages(conv.id))[-1]
        await engine.close()
        return stopped, events, after

    stopped, events, after = run(main())
    assert stopped.status is MessageStatus.STOPPED
    assert after.id == stopped.id and after.content.startswith(stopped.content)
    assert len(after.content) > len(stopped.content)
    assert next(e for e in events if isinstance(e, Usage)).cached_tokens > 0


def test_a_finished_answer_or_a_question_cannot_be_continued(make_engine):
    async def main():
        engine = make_engine("Done.")
        conv = await engine.conversations.create("x")
        await collect(engine.chat.send(conv.id, "hi"))
        question, answer = await engine.conversations.messages(conv.id)
        errors = []
        for mid in (question.id, answer.id):
            with pytest.raises(InvalidRequest) as info:
                await collect(engine.chat.continue_answer(mid))
            errors.append(str(info.value))
        await engine.close()
        return errors

    errors = run(main())
    assert "not an answer" in errors[0]
    assert "complete" in errors[1] and "stopped" in errors[1]
