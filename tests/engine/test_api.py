"""The Engine facade over a scripted backend: streaming, persistence, stop, branches, errors."""

from __future__ import annotations

import asyncio

import pytest

from wren.engine.context import ContextOverflow
from wren.engine.errors import InvalidRequest, ModelNotFound, NotFound
from wren.engine.events import Delta, Failed, FailureKind, Finished, FinishReason, Started, Usage
from wren.engine.inference.sampling import SamplingParams
from wren.engine.records import MessageStatus, Role, SendOptions
from wren.engine.store import Store

LONG = " ".join(f"word{i}" for i in range(400))


def run(coro):
    return asyncio.run(coro)


async def collect(stream):
    return [event async for event in stream]


def test_send_streams_in_order_and_stores_the_answer(make_engine):
    async def main():
        engine = make_engine("The capital of France is Paris. 🥐")
        conv = await engine.conversations.create()
        events = await collect(engine.chat.send(conv.id, "What is the capital of France?"))
        await engine.close()
        return engine, conv, events

    engine, conv, events = run(main())
    assert isinstance(events[0], Started)
    assert isinstance(events[-1], Finished) and events[-1].reason is FinishReason.STOP
    text = "".join(e.text for e in events if isinstance(e, Delta))
    assert text == "The capital of France is Paris. 🥐"
    usage = [e for e in events if isinstance(e, Usage)]
    assert len(usage) == 1 and usage[0].completion_tokens > 3 and usage[0].prompt_tokens > 5
    store = Store(engine.store.path)
    shown = store.messages(conv.id)
    assert [(m.role, m.content, m.status) for m in shown] == [
        (Role.USER, "What is the capital of France?", MessageStatus.COMPLETE),
        (Role.ASSISTANT, text, MessageStatus.COMPLETE),
    ]
    assert shown[1].completion_tokens == usage[0].completion_tokens
    assert shown[1].model == "tiny" and shown[1].backend == "scripted"


def test_user_message_is_committed_before_the_answer_is_shown(make_engine):
    """The model may read the prompt while the question is written (engine/turns.py submits
    the generation early, for the first token's sake), but nothing of the answer reaches the
    caller before the question and the answer's row are on disk: a crash after the first
    token the user saw keeps the question."""
    seen: dict = {"rows": []}

    async def main():
        engine = make_engine(lambda prompt: "it is saved")
        conv = await engine.conversations.create()
        async for event in engine.chat.send(conv.id, "is it saved?"):
            if isinstance(event, (Started, Delta)):
                probe = Store(engine.store.path)  # another connection: what is on disk
                seen["rows"].append([(m.role, m.content) for m in probe.messages(conv.id)][:1])
                probe.close()
        await engine.close()

    run(main())
    assert len(seen["rows"]) >= 2, "the answer must start and stream"
    assert all(rows == [(Role.USER, "is it saved?")] for rows in seen["rows"]), seen["rows"]


def test_stop_ends_within_one_token_and_keeps_the_partial_answer(make_engine):
    async def main():
        engine = make_engine(LONG, delay=0.005)
        conv = await engine.conversations.create()
        after_stop = 0
        stopped = False
        events = []
        async for event in engine.chat.send(conv.id, "go"):
            events.append(event)
            if isinstance(event, Delta):
                if stopped:
                    after_stop += 1
                elif len(events) > 10:
                    engine.chat.stop()
                    stopped = True
        msgs = await engine.conversations.messages(conv.id)
        await engine.close()
        return events, after_stop, msgs

    events, after_stop, msgs = run(main())
    assert events[-1].reason is FinishReason.CANCELLED
    assert after_stop <= 1, "stop must end the stream within one token"
    partial = "".join(e.text for e in events if isinstance(e, Delta))
    assert 0 < len(partial) < len(LONG)
    assert msgs[-1].status is MessageStatus.STOPPED and msgs[-1].content == partial


def test_answer_is_checkpointed_while_it_streams(make_engine):
    async def main():
        engine = make_engine(LONG, delay=0.004)
        conv = await engine.conversations.create()
        observed = []
        async for event in engine.chat.send(conv.id, "go"):
            if not isinstance(event, Delta):
                continue
            msgs = await engine.conversations.messages(conv.id)
            if msgs[-1].status is MessageStatus.STREAMING and msgs[-1].content:
                observed.append(len(msgs[-1].content))
        await engine.close()
        return observed

    observed = run(main())
    assert observed, "a streaming answer must reach the database before it finishes"
    assert observed == sorted(observed)


def test_regenerate_makes_a_sibling_and_edit_makes_a_branch_that_survive_restart(make_engine, wren_home):
    answers = iter(["first answer", "second answer", "edited answer"])

    async def main():
        engine = make_engine(lambda prompt: next(answers))
        conv = await engine.conversations.create()
        await collect(engine.chat.send(conv.id, "question"))
        first = (await engine.conversations.messages(conv.id))[-1]
        await collect(engine.chat.regenerate(first.id))
        shown = await engine.conversations.messages(conv.id)
        assert [m.content for m in shown] == ["question", "second answer"]
        assert (shown[-1].sibling_index, shown[-1].sibling_count) == (1, 2)
        shown = await engine.conversations.sibling(shown[-1].id, -1)
        assert shown[-1].content == "first answer"
        await collect(engine.chat.edit_and_resend(shown[0].id, "edited question"))
        shown = await engine.conversations.messages(conv.id)
        assert [m.content for m in shown] == ["edited question", "edited answer"]
        assert (shown[0].sibling_index, shown[0].sibling_count) == (1, 2)
        shown = await engine.conversations.sibling(shown[0].id, -1)
        await engine.close()
        return conv

    conv = run(main())

    async def reopen():
        engine = make_engine("unused")
        shown = await engine.conversations.messages(conv.id)
        await engine.close()
        return shown

    shown = run(reopen())
    assert [m.content for m in shown] == ["question", "first answer"]


def test_stop_strings_end_the_answer_without_showing_them(make_engine):
    async def main():
        engine = make_engine("Sure. Here it is: 1, 2, 3. STOP and nothing after")
        conv = await engine.conversations.create()
        params = SamplingParams(temperature=0.0, stop=("STOP",))
        events = await collect(engine.chat.send(conv.id, "count", SendOptions(sampling=params)))
        await engine.close()
        return events

    events = run(main())
    text = "".join(e.text for e in events if isinstance(e, Delta))
    assert text == "Sure. Here it is: 1, 2, 3. "
    assert events[-1].reason is FinishReason.STOP


def test_max_tokens_ends_with_length(make_engine):
    async def main():
        engine = make_engine(LONG)
        conv = await engine.conversations.create()
        events = await collect(engine.chat.send(conv.id, "go", SendOptions(sampling=SamplingParams(max_tokens=5))))
        await engine.close()
        return events

    events = run(main())
    assert next(e for e in events if isinstance(e, Usage)).completion_tokens == 5
    assert events[-1].reason is FinishReason.LENGTH


@pytest.mark.parametrize("text", ["", "   ", "\n\t"])
def test_empty_message_is_refused_and_nothing_is_written(make_engine, text):
    async def main():
        engine = make_engine()
        conv = await engine.conversations.create()
        with pytest.raises(InvalidRequest, match="empty"):
            await collect(engine.chat.send(conv.id, text))
        msgs = await engine.conversations.messages(conv.id)
        await engine.close()
        return msgs

    assert run(main()) == []


def test_invalid_sampling_values_are_refused_with_the_reason():
    with pytest.raises(InvalidRequest, match="temperature must be between 0 and 5"):
        SamplingParams(temperature=-1)
    with pytest.raises(InvalidRequest, match="top_p"):
        SamplingParams(top_p=0)
    with pytest.raises(InvalidRequest, match="unknown sampling settings: tempreature"):
        SamplingParams.from_dict({"tempreature": 0.5})
    with pytest.raises(InvalidRequest, match="max_tokens"):
        SamplingParams(max_tokens=0)


def test_bad_default_sampling_is_not_saved(make_engine):
    async def main():
        engine = make_engine()
        with pytest.raises(InvalidRequest):
            await engine.settings.set("sampling", {"temperature": 99})
        value = await engine.settings.get("sampling")
        await engine.close()
        return value

    assert run(main()) is None


def test_unknown_model_and_conversation_are_clear_errors(make_engine):
    async def main():
        engine = make_engine()
        with pytest.raises(ModelNotFound, match="no-such-model"):
            await engine.models.load("no-such-model")
        with pytest.raises(NotFound, match="no conversation with id 999"):
            await collect(engine.chat.send(999, "hello"))
        await engine.close()

    run(main())


def test_model_that_fails_to_load_reports_and_keeps_the_question(make_engine):
    from wren.engine.errors import ModelFileError

    async def main():
        engine = make_engine(fail_load=ModelFileError("/models/x/model.safetensors is truncated"))
        conv = await engine.conversations.create()
        events = await collect(engine.chat.send(conv.id, "still saved?"))
        msgs = await engine.conversations.messages(conv.id)
        await engine.close()
        return events, msgs

    events, msgs = run(main())
    failed = [e for e in events if isinstance(e, Failed)]
    assert failed and failed[0].kind is FailureKind.MODEL and "truncated" in failed[0].error
    assert events[-1].reason is FinishReason.ERROR
    assert [m.content for m in msgs] == ["still saved?"]


def test_prompt_longer_than_the_window_is_refused_before_any_work(make_engine):
    async def main():
        engine = make_engine("x", context_length=64)
        conv = await engine.conversations.create()
        with pytest.raises(ContextOverflow, match="nothing was sent"):
            await collect(engine.chat.send(conv.id, LONG))
        prompts = engine.scripted.loaded[0].prompts
        stored = await engine.conversations.messages(conv.id)
        await engine.close()
        return prompts, stored

    assert run(main()) == ([], [])


def test_generate_title_saves_a_short_title(make_engine):
    async def main():
        engine = make_engine(lambda prompt: "Paris facts\nmore" if "title" in prompt else "Paris.")
        conv = await engine.conversations.create()
        await collect(engine.chat.send(conv.id, "Tell me about Paris"))
        title = await engine.chat.generate_title(conv.id)
        saved = (await engine.conversations.get(conv.id)).title
        await engine.close()
        return title, saved

    title, saved = run(main())
    assert title == saved == "Paris facts"


def test_search_and_export(make_engine):
    from wren.engine import export

    async def main():
        engine = make_engine("an answer about zeppelins")
        conv = await engine.conversations.create("Airships")
        await collect(engine.chat.send(conv.id, "tell me"))
        found = await engine.conversations.list("zeppelins")
        shown = await engine.conversations.messages(conv.id)
        info = await engine.conversations.get(conv.id)
        await engine.close()
        return conv, found, export.to_markdown(info, shown), export.to_json(info, shown)

    conv, found, md, js = run(main())
    assert [c.id for c in found] == [conv.id]
    assert "## Wren" in md and "an answer about zeppelins" in md
    import json

    assert json.loads(js)["messages"][1]["content"] == "an answer about zeppelins"


def test_prepare_prewarms_the_draft_so_send_reuses_the_cache(make_engine):
    async def main():
        engine = make_engine("Answer.")
        conv = await engine.conversations.create()
        await collect(engine.chat.send(conv.id, "first question"))
        tokens = await engine.chat.prepare(conv.id, "a second question being typed")
        cached = await engine.chat.prepared()
        events = await collect(engine.chat.send(conv.id, "a second question being typed"))
        await engine.close()
        return tokens, cached, events

    tokens, cached, events = run(main())
    usage = next(e for e in events if isinstance(e, Usage))
    assert cached == tokens == usage.prompt_tokens
    # Everything but the last prompt token came from the cache.
    assert usage.cached_tokens == usage.prompt_tokens - 1


def test_prepare_of_an_oversized_draft_warns_early(make_engine):
    async def main():
        engine = make_engine("x", context_length=64)
        conv = await engine.conversations.create()
        await engine.models.load()
        with pytest.raises(ContextOverflow):
            await engine.chat.prepare(conv.id, LONG)
        empty = await engine.chat.prepare(conv.id, "   ")
        await engine.close()
        return empty

    assert run(main()) is None


def test_stop_during_a_long_prefill_frees_the_worker(make_engine):
    """Cancelling while the prompt is still being prefilled ends the turn within a chunk,
    and the next request runs normally."""
    async def main():
        engine = make_engine("fine", prefill_delay=0.05)
        conv = await engine.conversations.create()
        events = []
        async for event in engine.chat.send(conv.id, LONG[:1500]):
            events.append(event)
            if isinstance(event, Started):
                await asyncio.sleep(0.12)  # a couple of chunks in
                engine.chat.stop()
        calls = engine.scripted.loaded[0].prefill_calls
        after = await collect(engine.chat.send(conv.id, "next"))
        await engine.close()
        return events, calls, after

    events, calls, after = run(main())
    assert events[-1].reason is FinishReason.CANCELLED
    assert not any(isinstance(e, Delta) for e in events)
    assert calls < 8, f"the prefill should stop within a chunk, it ran {calls} of them"
    assert after[-1].reason is FinishReason.STOP
