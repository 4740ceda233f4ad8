"""Token probabilities (SamplingParams.logprobs): what the sampler records, how it rides on
the deltas (serial and batched workers), what an answer stores, and that replay with them
on is still bit-identical."""

from __future__ import annotations

import asyncio
import json
import math
import threading
from collections.abc import Sequence

import numpy as np
import pytest

from tests.fixtures.hash_model import HashBackend
from wren.engine.errors import InvalidRequest
from wren.engine.events import Delta, Finished, FinishReason, TokenLogprob, Usage, event_to_dict
from wren.engine.inference.sampling import Sampler, SamplingParams
from wren.engine.inference.worker import GenerationRequest, ModelWorker
from wren.engine.logprobs import METADATA_KEY, from_metadata
from wren.engine.records import SendOptions
from wren.engine.tokenize import Tokenizer


class Collect:
    def __init__(self) -> None:
        self.events: list = []
        self.done = threading.Event()

    def __call__(self, event) -> None:
        self.events.append(event)
        if isinstance(event, Finished):
            self.done.set()

    @property
    def deltas(self) -> list[Delta]:
        return [e for e in self.events if isinstance(e, Delta)]


def check_entries(entries: Sequence[TokenLogprob], k: int, *, greedy: bool) -> None:
    """Each probability between 0 and 1, the top sorted, the chosen token among them when
    greedy, never more likely than the first when sampled."""
    for entry in entries:
        assert isinstance(entry.token, str) and isinstance(entry.id, int)
        assert 0.0 <= math.exp(entry.logprob) <= 1.0
        assert len(entry.top) == k
        tops = [t.logprob for t in entry.top]
        assert all(0.0 <= math.exp(lp) <= 1.0 for lp in tops)
        assert tops == sorted(tops, reverse=True)
        assert sum(math.exp(lp) for lp in tops) <= 1.0 + 1e-6
        if k:
            assert entry.logprob <= entry.top[0].logprob + 1e-12
            if entry.id in [t.id for t in entry.top]:
                assert entry.logprob == next(t.logprob for t in entry.top if t.id == entry.id)
            if greedy:
                assert entry.top[0].id == entry.id and entry.top[0].logprob == entry.logprob


# -- the sampler ----------------------------------------------------------------------------


def _logits(seed: int, n: int = 50) -> np.ndarray:
    return (2.0 * np.random.default_rng(seed).standard_normal(n)).astype(np.float32)


def test_greedy_token_is_the_first_of_the_top_and_its_probability_is_the_softmax():
    x = _logits(1)
    sampler = Sampler(SamplingParams(temperature=0.0, logprobs=5))
    token = sampler(x)
    choice = sampler.last
    assert choice is not None and choice.id == token == int(np.argmax(x))
    assert choice.top_ids[0] == token and len(choice.top_ids) == 5
    z = x.astype(np.float64)
    expected = z - (z.max() + np.log(np.exp(z - z.max()).sum()))
    assert choice.logprob == pytest.approx(expected[token], abs=1e-6)  # float32 exponentials
    assert list(choice.top_ids) == list(np.argsort(-expected, kind="stable")[:5])
    assert np.allclose(choice.top_logprobs, np.sort(expected)[::-1][:5])


def test_sampled_tokens_are_never_likelier_than_the_first_and_the_probabilities_ignore_temperature():
    hot = Sampler(SamplingParams(temperature=1.5, top_p=0.95, seed=11, logprobs=4))
    cold = Sampler(SamplingParams(temperature=0.3, seed=11, logprobs=4))
    for step in range(40):
        x = _logits(100 + step)
        hot(x)
        cold(x)
        a, b = hot.last, cold.last
        assert a.logprob <= a.top_logprobs[0] and 0.0 < math.exp(a.logprob) <= 1.0
        # the same scores, whatever temperature drew the token (documented on Sampler)
        assert a.top_ids == b.top_ids and a.top_logprobs == b.top_logprobs
    # over the whole vocabulary the probabilities add up to one
    full = Sampler(SamplingParams(temperature=1.0, seed=3, logprobs=20))
    full(_logits(7, n=20))
    assert sum(math.exp(v) for v in full.last.top_logprobs) == pytest.approx(1.0, abs=1e-6)


def test_probabilities_follow_the_repetition_guard_and_the_constraint():
    x = np.zeros(10, dtype=np.float32)
    x[4] = 3.0
    x[6] = 2.0
    guarded = Sampler(SamplingParams(temperature=0.0, repetition_penalty=5.0, penalize_prompt=True, logprobs=2))
    assert guarded(x, [4]) == 6  # 3/5 < 2: the penalty moved the first place
    assert guarded.last.top_ids == (6, 4)

    class OnlyOdd:  # a constraint that allows odd ids
        def restrict(self, logits):
            ids = np.arange(1, logits.size, 2)
            return logits[ids], ids

        def advance(self, token):
            assert token % 2 == 1

    constrained = Sampler(SamplingParams(temperature=0.0, logprobs=3), OnlyOdd())
    assert constrained(x) == 1  # ties among the odd ids: the lowest
    choice = constrained.last
    assert all(i % 2 == 1 for i in choice.top_ids)
    assert math.exp(choice.logprob) == pytest.approx(1 / 5)  # five allowed ids, equally likely


def test_logprobs_off_records_nothing_and_zero_records_only_the_chosen_token():
    off = Sampler(SamplingParams(temperature=0.8, seed=1))
    off(_logits(2))
    assert off.last is None
    only = Sampler(SamplingParams(temperature=0.8, seed=1, logprobs=0))
    token = only(_logits(2))
    assert only.last.id == token and only.last.top_ids == () and only.last.logprob < 0


@pytest.mark.parametrize("value,problem", [
    (21, "logprobs must be from 0 to 20"), (-1, "logprobs must be from 0 to 20"),
    ("5", "logprobs must be a whole number"), (True, "logprobs must be a whole number"),
])
def test_bad_logprobs_setting_is_refused_with_a_clear_error(value, problem):
    with pytest.raises(InvalidRequest, match=problem):
        SamplingParams(logprobs=value)
    assert SamplingParams.from_dict({"logprobs": 5}).logprobs == 5
    assert SamplingParams.from_dict(SamplingParams(logprobs=3).to_dict()).logprobs == 3


# -- the worker: one at a time and batched --------------------------------------------------


def _run_worker(tiny_model_dir, slots: int, params: list[SamplingParams], prompts: list[str]) -> list[Collect]:
    tok = Tokenizer.from_dir(tiny_model_dir)
    sinks = [Collect() for _ in prompts]
    worker = ModelWorker("hash", HashBackend(slots), tiny_model_dir, tok)
    for text, p, sink in zip(prompts, params, sinks):
        worker.submit(GenerationRequest(tok.encode(text), p, sink))
    worker.loaded.result(timeout=30)
    for sink in sinks:
        assert sink.done.wait(30)
    worker.close()
    return sinks


PROMPTS = ["The little wren sang", "What is the capital of France?"]


@pytest.mark.parametrize("slots", [1, 2], ids=["serial", "batched"])
def test_worker_deltas_carry_one_entry_per_token_joining_to_the_text(tiny_model_dir, slots):
    sampled = SamplingParams(temperature=1.0, seed=5, max_tokens=40, logprobs=5)
    greedy = SamplingParams(temperature=0.0, max_tokens=40, logprobs=3)
    got = _run_worker(tiny_model_dir, slots, [sampled, greedy], PROMPTS)
    for sink, k, is_greedy in ((got[0], 5, False), (got[1], 3, True)):
        deltas = sink.deltas
        assert deltas and all(d.logprobs is not None for d in deltas)
        entries = [e for d in deltas for e in d.logprobs]
        usage = next(e for e in sink.events if isinstance(e, Usage))
        assert len(entries) == usage.completion_tokens  # every token shown, end of text not counted
        assert "".join(e.token for e in entries) == "".join(d.text for d in deltas)
        for d in deltas:  # each delta's own tokens make up its text
            assert "".join(e.token for e in d.logprobs) == d.text
        check_entries(entries, k, greedy=is_greedy)
    # the same requests without logprobs: the same text, no entries
    plain = _run_worker(tiny_model_dir, slots, [sampled.with_(logprobs=None), greedy.with_(logprobs=None)], PROMPTS)
    for with_, without in zip(got, plain):
        assert all(d.logprobs is None for d in without.deltas)
        assert "".join(d.text for d in without.deltas) == "".join(d.text for d in with_.deltas)


def test_batched_entries_equal_those_of_each_sequence_alone(tiny_model_dir):
    params = [SamplingParams(temperature=0.9, seed=s, max_tokens=24, logprobs=4) for s in (1, 2)]
    alone = [_run_worker(tiny_model_dir, 1, [p], [t])[0] for p, t in zip(params, PROMPTS)]
    together = _run_worker(tiny_model_dir, 2, params, PROMPTS)
    for a, b in zip(alone, together):
        assert [d.logprobs for d in a.deltas] == [d.logprobs for d in b.deltas]


# -- an answer: live, stored, continued, replayed ---------------------------------------------


def _engine(make_engine, backend):
    return make_engine(backend=backend)


async def _answer(engine, conv_id: int, text: str, params: SamplingParams):
    events = [e async for e in engine.chat.send(conv_id, text, SendOptions(sampling=params))]
    return events, (await engine.conversations.messages(conv_id))[-1]


def test_an_answer_stores_the_entries_its_deltas_carried_and_replay_repeats_them(make_engine):
    async def main():
        engine = _engine(make_engine, HashBackend())
        conv = await engine.conversations.create("odds")
        params = SamplingParams(temperature=1.0, max_tokens=30, logprobs=5)  # no seed: one is drawn
        events, answer = await _answer(engine, conv.id, "roll the dice", params)
        replayed = [e async for e in engine.chat.replay(answer.id)]
        again = (await engine.conversations.messages(conv.id))[-1]
        off, plain = await _answer(engine, conv.id, "and again", params.with_(logprobs=None))
        await engine.close()
        return events, answer, replayed, again, off, plain

    events, answer, replayed, again, off, plain = asyncio.run(main())
    deltas = [e for e in events if isinstance(e, Delta)]
    live = [entry for d in deltas for entry in d.logprobs]
    check_entries(live, 5, greedy=False)
    assert "".join(e.token for e in live) == answer.content == "".join(d.text for d in deltas)
    stored = answer.meta[METADATA_KEY]
    assert stored == [e.to_dict() for e in live]
    assert set(stored[0]) == {"token", "id", "logprob", "top"} and set(stored[0]["top"][0]) == {"token", "id", "logprob"}
    assert from_metadata(answer.meta) == tuple(live)  # the stored shape reads back as the events
    # Replay: the same text, seed and probabilities, bit for bit
    assert again.id != answer.id and again.content == answer.content
    assert again.meta[METADATA_KEY] == stored
    assert [entry for e in replayed if isinstance(e, Delta) for entry in e.logprobs] == live
    # Off: no entries live, none stored
    assert all(e.logprobs is None for e in off if isinstance(e, Delta))
    assert METADATA_KEY not in plain.meta


def test_event_json_has_the_entries_and_leaves_them_out_when_off(make_engine):
    async def main():
        engine = _engine(make_engine, HashBackend())
        conv = await engine.conversations.create("json")
        events, _ = await _answer(engine, conv.id, "hi", SamplingParams(temperature=0.0, max_tokens=6, logprobs=2))
        await engine.close()
        return events

    events = asyncio.run(main())
    delta = next(e for e in events if isinstance(e, Delta))
    data = json.loads(json.dumps(event_to_dict(delta)))
    assert data["type"] == "delta" and data["logprobs"] == [e.to_dict() for e in delta.logprobs]
    assert event_to_dict(Delta("x")) == {"type": "delta", "text": "x"}


def test_stop_strings_and_split_characters_keep_the_tokens_joined_to_the_answer(make_engine):
    # The scripted model answers this text exactly (greedy); the byte-level tokenizer splits
    # the accented letters and the emoji over several tokens, and the stop string cuts one.
    reply = "naïve café ☕ ok. STOP and more"

    async def main():
        engine = make_engine(reply)
        conv = await engine.conversations.create("stops")
        params = SamplingParams(temperature=0.0, max_tokens=60, logprobs=1, stop=("OP and",))
        events, answer = await _answer(engine, conv.id, "say it", params)
        await engine.close()
        return events, answer

    events, answer = asyncio.run(main())
    assert answer.content == "naïve café ☕ ok. ST"
    entries = from_metadata(answer.meta)
    assert "".join(e.token for e in entries) == answer.content
    assert any(e.token == "" for e in entries)  # a token that is part of a character
    check_entries(entries, 1, greedy=True)
    assert [entry for e in events if isinstance(e, Delta) for entry in e.logprobs] == list(entries)


def test_a_continued_answer_extends_its_stored_entries(make_engine):
    async def main():
        engine = _engine(make_engine, HashBackend())
        conv = await engine.conversations.create("more")
        params = SamplingParams(temperature=0.7, seed=9, max_tokens=8, logprobs=3)
        first, cut = await _answer(engine, conv.id, "go on", params)
        more = [e async for e in engine.chat.continue_answer(cut.id)]
        grown = await engine.conversations.message(cut.id)
        await engine.close()
        return first, cut, more, grown

    first, cut, more, grown = asyncio.run(main())
    assert first[-1].reason is FinishReason.LENGTH
    before = cut.meta[METADATA_KEY]
    after = grown.meta[METADATA_KEY]
    added = [entry for e in more if isinstance(e, Delta) for entry in e.logprobs]
    assert added and after == before + [e.to_dict() for e in added]
    assert "".join(d["token"] for d in after) == grown.content


# -- torch, the tiny random-weight model ------------------------------------------------------


@pytest.mark.slow  # loads the tiny model on torch
def test_replay_with_logprobs_is_bit_identical_on_torch(wren_home, tiny_model_dir):
    from tests.fixtures.tiny import tiny_engine

    async def main():
        engine = tiny_engine(wren_home, tiny_model_dir)
        await engine.models.load(backend="torch-cpu")
        conv = await engine.conversations.create("dice")
        params = SamplingParams(temperature=1.0, max_tokens=12, logprobs=5)
        events, first = await _answer(engine, conv.id, "roll", params)
        [_ async for _ in engine.chat.replay(first.id)]
        again = (await engine.conversations.messages(conv.id))[-1]
        await engine.close()
        return events, first, again

    events, first, again = asyncio.run(main())
    entries = from_metadata(first.meta)
    assert entries and "".join(e.token for e in entries) == first.content
    check_entries(entries, 5, greedy=False)
    assert again.content == first.content and again.meta[METADATA_KEY] == first.meta[METADATA_KEY]


def test_a_model_that_gives_no_probabilities_leaves_none_stored():
    from wren.engine.logprobs import AnswerLogprobs

    probs = AnswerLogprobs(SamplingParams(logprobs=3), {})
    probs.arrived(Delta("remote text"))  # a remote provider's delta: no entries
    assert probs.attach() is None
    meta = {METADATA_KEY: ["stale"]}
    probs.store(meta)
    assert METADATA_KEY not in meta
    # a continuation of an answer that kept none for its text so far stores none either
    later = AnswerLogprobs(SamplingParams(logprobs=3), {}, prefix="earlier text")
    later.arrived(Delta("x", (TokenLogprob("x", 87, -0.5),)))
    assert later.attach() is None
