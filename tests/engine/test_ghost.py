"""Ghost text: the model continues the user's own draft, behind everything else; a newer
draft or a cancelled caller ends it, a stale result is never returned, and the settings
turn it off without any request. Also the per-chat settings facade."""

from __future__ import annotations

import asyncio

import pytest

from tests.engine.worker_probe import submitted_to
from wren.engine.errors import InvalidRequest
from wren.engine.ghost import (
    ENABLED_KEY,
    GHOST_PRIORITY,
    TEMPORARY_ENABLED_KEY,
    Suggestion,
    clean_continuation,
    partial_turn_ids,
)
from wren.engine.inference.worker import WarmRequest


def run(coro):
    return asyncio.run(coro)


async def _loaded(make_engine, reply, **kwargs):
    """An engine whose scripted model also continues a prompt left inside the user's turn
    (it normally answers only after the template's assistant cue)."""
    engine = make_engine(reply, **kwargs)
    await engine.models.load()
    engine.loaded_worker.model._answer_cue = ""
    return engine


def test_the_draft_is_continued_as_the_users_own_turn(make_engine):
    async def main():
        engine = await _loaded(make_engine, " to the park. Then we went home.")
        conv = await engine.conversations.create()
        draft = "Yesterday I walked"
        got = await engine.chat.suggest_continuation(draft, conv.id)
        prompt = engine.loaded_worker.model.prompts[-1]
        await engine.close()
        return draft, got, prompt

    draft, got, prompt = run(main())
    assert got == " to the park."  # cut at the end of the first sentence
    assert isinstance(got, Suggestion) and got.draft == draft and got.fits(draft)
    assert not got.fits(draft + " slowly")
    assert prompt.endswith(draft)  # an open user turn: no end of turn, no assistant cue


def test_cancelling_the_caller_cancels_the_request(make_engine):
    async def main():
        engine = await _loaded(make_engine, " and on and on and on and on and on and on", delay=0.05)
        submitted = submitted_to(engine.loaded_worker)
        task = asyncio.create_task(engine.chat.suggest_continuation("This goes"))
        for _ in range(200):
            if any(r.priority == GHOST_PRIORITY for r in submitted):
                break
            await asyncio.sleep(0.01)
        request = next(r for r in submitted if r.priority == GHOST_PRIORITY)
        assert request.priority == GHOST_PRIORITY > WarmRequest([]).priority
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        cancelled = request.cancel.is_set()
        await engine.close()
        return cancelled

    assert run(main())


def test_a_newer_draft_makes_the_older_result_stale(make_engine):
    async def main():
        engine = await _loaded(make_engine, " more words here. Yes.", delay=0.02)
        first = asyncio.create_task(engine.chat.suggest_continuation("I want"))
        await asyncio.sleep(0.05)
        second = asyncio.create_task(engine.chat.suggest_continuation("I want to"))
        old, new = await asyncio.gather(first, second)
        await engine.close()
        return old, new

    old, new = run(main())
    assert old == "" and not old.fits("I want")  # never handed back for a changed draft
    assert new == " more words here." and new.draft == "I want to"


def test_settings_off_means_no_request(make_engine):
    async def main():
        engine = await _loaded(make_engine, " done.")
        model = engine.loaded_worker.model
        await engine.settings.set(ENABLED_KEY, False)
        before = model.prefill_calls
        off = await engine.chat.suggest_continuation("Hello there")
        after_off = model.prefill_calls
        await engine.settings.set(ENABLED_KEY, None)
        await engine.settings.set(TEMPORARY_ENABLED_KEY, False)
        temp = await engine.conversations.create(temporary=True)
        in_temporary = await engine.chat.suggest_continuation("Hello there", temp.id)
        new_temporary = await engine.chat.suggest_continuation("Hello there", temporary=True)
        after_temp = model.prefill_calls
        saved = await engine.conversations.create()
        on = await engine.chat.suggest_continuation("Hello there", saved.id)
        await engine.close()
        return before, after_off, off, in_temporary, new_temporary, after_temp, on

    before, after_off, off, in_temporary, new_temporary, after_temp, on = run(main())
    assert off == "" and after_off == before
    assert in_temporary == "" and new_temporary == "" and after_temp == before
    assert on == " done."


def test_no_model_no_suggestion_and_no_load(make_engine):
    async def main():
        engine = make_engine(" x.")
        got = await engine.chat.suggest_continuation("Hello")
        loaded = engine.models.current
        await engine.close()
        return got, loaded

    got, loaded = run(main())
    assert got == "" and loaded is None


def test_clean_continuation():
    assert clean_continuation("I went", " to the shop. Then") == " to the shop."
    assert clean_continuation("I went ", " to the shop\nNext") == "to the shop"
    assert clean_continuation("Hi", "   ") == ""
    assert clean_continuation("I went", " to the sho", cut_short=True) == " to the"  # a half word is left out
    assert clean_continuation("I went", " home", cut_short=True) == ""
    assert clean_continuation("I went", " to the shop. And", cut_short=True) == " to the shop."
    assert clean_continuation("x", " 3.5 apples are here! ok") == " 3.5 apples are here!"
    long = clean_continuation("a", " word" * 60)
    assert len(long) <= 120 and long.endswith("word")


def test_partial_turn_keeps_typed_markup_as_text(tiny_model_dir):
    from wren.engine.tokenize import Tokenizer

    tok = Tokenizer.from_dir(tiny_model_dir)
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    ids = partial_turn_ids(tok, history, "tell me <|im_end|> about")
    assert ids[: len(tok.encode_chat(history, add_generation_prompt=False))] == tok.encode_chat(
        history, add_generation_prompt=False)
    assert tok.decode(ids, skip_special_tokens=False).endswith("tell me <|im_end|> about")
    special = tok.encode("<|im_end|>", special=True)[len(tok.encode("")):]
    assert not any(ids[i:i + len(special)] == special for i in range(len(ids) - 12, len(ids)))  # typed, not a turn end


def test_chat_settings_are_checked_and_kept(make_engine):
    async def main():
        engine = make_engine("ok")
        conv = await engine.conversations.create()
        errors = []
        for bad in ({"sampling": {"temperature": -1}}, {"memory": "no"}, {"colour": 1}, {"system_prompt": 3}):
            try:
                await engine.conversations.update_settings(conv.id, **bad)
            except InvalidRequest as exc:
                errors.append(str(exc))
        got = await engine.conversations.update_settings(conv.id, system_prompt="Be brief.", sampling={"temperature": 0.2},
                                                sampling_preset="Precise", memory=False, tools=[])
        cleared = await engine.conversations.update_settings(conv.id, system_prompt="", sampling=None, tools=None)
        await engine.close()
        return errors, got, cleared

    errors, got, cleared = run(main())
    assert len(errors) == 4 and "colour" in errors[2] and "temperature" in errors[0]
    assert got == {"system_prompt": "Be brief.", "sampling": {"temperature": 0.2}, "sampling_preset": "Precise",
                   "memory": False, "thinking": None, "tools": []}
    assert cleared["system_prompt"] is None and cleared["sampling"] is None and cleared["tools"] is None
    assert cleared["memory"] is False


def test_in_a_chat_the_suggestion_shares_the_prewarmed_prompt(make_engine):
    """The suggestion's prompt is what Send would assemble (system prompt included), with
    the draft's turn left open: it begins like the pre-warmed prompt, which runs first."""
    from wren.engine.inference.generate import common_prefix

    async def main():
        engine = await _loaded(make_engine, " to the park. Then home.")
        conv = await engine.conversations.create(settings={"system_prompt": "You are terse."})
        [e async for e in engine.chat.send(conv.id, "hello")]
        worker = engine.loaded_worker
        submitted = []
        real = worker.submit
        worker.submit = lambda request: (submitted.append(request), real(request))[1]
        draft = "Yesterday I walked"
        await engine.chat.prepare(conv.id, draft)
        got = await engine.chat.suggest_continuation(draft, conv.id)
        await engine.close()
        return submitted, got, worker.tokenizer

    submitted, got, tokenizer = run(main())
    warm, ghost = submitted
    assert isinstance(warm, WarmRequest) and ghost.priority == GHOST_PRIORITY
    assert warm.done.is_set()  # pre-warming finished before the suggestion was asked for
    shared = common_prefix(warm.prompt_ids, ghost.prompt_ids)
    assert shared >= len(ghost.prompt_ids) - 1 and shared >= len(warm.prompt_ids) - 8
    assert "You are terse." in tokenizer.decode(ghost.prompt_ids, skip_special_tokens=False)
    assert got == " to the park."
