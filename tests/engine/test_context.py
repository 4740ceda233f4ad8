"""Context assembly: fitting rules, running-summary reuse, refusals and the report."""

from __future__ import annotations

import asyncio
import json

import pytest

from wren.engine.context import (
    ContextAssembler,
    ContextOverflow,
    ContextReport,
    ContextRequest,
    ContextSettings,
    Instructions,
    MemorySummaries,
    PartKind,
    PartState,
    SummaryStore,
    report_from_meta,
    summary_prompt,
)
from wren.engine.errors import NotFound
from wren.engine.memory.records import Retrieved, SourceKind
from wren.engine.records import MessageStatus, Role
from wren.engine.store import Store

SYSTEM = "You are Wren, a careful assistant."
ABOUT = "I am a data engineer in Lisbon."
HOW = "Answer briefly, in British English."


def words(text: str) -> int:
    """A deterministic stand-in tokenizer: one token per word, at least one."""
    return max(1, len(text.split()))


def history(turns: int, start_id: int = 1) -> list[dict]:
    out, mid = [], start_id
    for n in range(turns):
        out.append({"id": mid, "role": "user", "content": f"question {n} " + "about things " * 8})
        out.append({"id": mid + 1, "role": "assistant", "content": f"answer {n} " + "with detail " * 12})
        mid += 2
    return out


class Summarizer:
    def __init__(self, fail: bool = False):
        self.calls: list[tuple[int, str]] = []
        self.fail = fail

    def __call__(self, turns, previous):
        if self.fail:
            raise RuntimeError("model went away")
        self.calls.append((len(turns), previous))
        return f"summary {len(self.calls)} covering {len(turns)} more messages"


def run(coro):
    return asyncio.run(coro)


def request(hist, text="and now?", **kw) -> ContextRequest:
    kw.setdefault("window", 2048)
    return ContextRequest(
        new_message=text, history=hist, conversation_id=kw.pop("conversation_id", 1),
        system_prompt=SYSTEM, instructions=Instructions(ABOUT, HOW), **kw,
    )


def test_500_turns_fit_2048_with_system_instructions_and_last_turns_intact():
    summarizer = Summarizer()
    assembler = ContextAssembler(words, summaries=MemorySummaries(), summarize=summarizer)
    hist = history(500)
    out = run(assembler.assemble(request(hist)))
    report = out.report
    assert report.reserve == 512 and report.budget == 1536
    assert report.prompt_tokens <= report.budget
    system = out.messages[0]
    assert system["role"] == "system"
    for text in (SYSTEM, ABOUT, HOW):
        assert text in system["content"]
    assert "summary" in system["content"]
    assert out.messages[-1] == {"role": "user", "content": "and now?"}
    # The newest turns are there verbatim, in order, right before the new message.
    tail = [{"role": m["role"], "content": m["content"]} for m in hist[-10:]]
    assert out.messages[-11:-1] == tail
    kinds = {(p.kind, p.state) for p in report.parts}
    assert (PartKind.SYSTEM, PartState.INCLUDED) in kinds
    assert (PartKind.ABOUT_ME, PartState.INCLUDED) in kinds
    assert (PartKind.HOW_TO_RESPOND, PartState.INCLUDED) in kinds
    # Every older message is accounted for: folded into the summary or, beyond what a few
    # model calls can fold in one turn, reported dropped.
    older = report.parts_of(PartKind.HISTORY)
    included = report.parts_of(PartKind.TURN, PartState.INCLUDED)
    assert sum(p.items for p in older) + len(included) == 1000
    assert older[0].source_ids[0] == 1 and older[-1].state is PartState.SUMMARIZED
    assert [p.state for p in older] == [PartState.DROPPED, PartState.SUMMARIZED]
    assert "too far back" in older[0].note
    assert report.summary_through == older[-1].source_ids[1]
    assert report.summarize_calls == len(summarizer.calls) == 4


def test_running_summary_is_reused_and_extended_incrementally():
    summaries = MemorySummaries()
    summarizer = Summarizer()
    hist = history(60)
    first = run(ContextAssembler(words, summaries=summaries, summarize=summarizer).assemble(request(hist, window=1024)))
    calls_after_first = len(summarizer.calls)
    assert calls_after_first >= 1 and first.report.summary_through is not None

    # A fresh assembler (a later turn, after a restart) finds the saved summary and reuses it.
    extra = []
    mid = hist[-1]["id"] + 1
    per_turn_calls = []
    for n in range(12):
        extra += [{"id": mid, "role": "user", "content": f"follow-up {n} " + "word " * 8},
                  {"id": mid + 1, "role": "assistant", "content": f"reply {n} " + "word " * 12}]
        mid += 2
        before = len(summarizer.calls)
        out = run(ContextAssembler(words, summaries=summaries, summarize=summarizer).assemble(
            request(hist + extra, window=1024)))
        per_turn_calls.append(len(summarizer.calls) - before)
        assert out.report.prompt_tokens <= out.report.budget
        assert out.report.summarize_calls == per_turn_calls[-1]
    # Most turns reuse the summary as it is; an extension folds only the newly old turns and
    # builds on the previous summary instead of starting over.
    assert per_turn_calls.count(0) >= 8, per_turn_calls
    assert sum(per_turn_calls) >= 1
    for folded, previous in summarizer.calls[calls_after_first:]:
        assert previous.startswith("summary ")
        assert folded < 30


def test_summary_is_stored_with_the_conversation_and_survives_a_restart(tmp_path):
    store = Store(tmp_path / "w.sqlite3")
    conv = store.create_conversation("long")
    parent = None
    for n in range(80):
        role = Role.USER if n % 2 == 0 else Role.ASSISTANT
        parent = store.add_message(conv.id, role, f"message {n} " + "text " * 15, parent_id=parent).id
    lineage = store.lineage(parent)
    summarizer = Summarizer()
    req = request(lineage, window=1024, conversation_id=conv.id)
    run(ContextAssembler(words, summaries=SummaryStore(store), summarize=summarizer).assemble(req))
    made = len(summarizer.calls)
    assert made >= 1
    store.close()

    reopened = Store(tmp_path / "w.sqlite3")
    again = run(ContextAssembler(words, summaries=SummaryStore(reopened), summarize=summarizer).assemble(req))
    assert len(summarizer.calls) == made and again.report.summarize_calls == 0
    assert again.report.summary_through is not None


def test_first_summary_of_a_long_chat_can_fold_it_all_when_allowed_more_calls():
    summarizer = Summarizer()
    assembler = ContextAssembler(words, summaries=MemorySummaries(), summarize=summarizer, max_summary_calls=100)
    report = run(assembler.assemble(request(history(500)))).report
    older = report.parts_of(PartKind.HISTORY)
    assert [p.state for p in older] == [PartState.SUMMARIZED] and older[0].source_ids[0] == 1
    assert 4 < report.summarize_calls == len(summarizer.calls) < 40
    # chunks chain: each call extends the previous call's summary
    assert [prev for _, prev in summarizer.calls[1:]] == [f"summary {n} covering {summarizer.calls[n - 1][0]} more messages"
                                                          for n in range(1, len(summarizer.calls))]


def test_a_summary_from_another_branch_is_not_used():
    summaries = MemorySummaries()
    summarizer = Summarizer()
    main = history(60)
    run(ContextAssembler(words, summaries=summaries, summarize=summarizer).assemble(request(main, window=1024)))
    # A branch that left the main line at message 10 shares none of the summarized tail.
    branch = main[:10] + history(50, start_id=10_000)
    out = run(ContextAssembler(words, summaries=summaries, summarize=summarizer).assemble(request(branch, window=1024)))
    assert out.report.summary_through >= 10_000


def test_oversized_message_is_refused_before_anything_is_sent():
    summarizer = Summarizer()
    assembler = ContextAssembler(words, summaries=MemorySummaries(), summarize=summarizer)
    with pytest.raises(ContextOverflow) as caught:
        run(assembler.assemble(request(history(5), text="word " * 3000)))
    message = str(caught.value)
    assert "your message is about 3,004 tokens" in message and "nothing was sent" in message
    assert caught.value.limit < 2048 and caught.value.tokens > caught.value.limit
    assert summarizer.calls == []


def test_instructions_too_long_for_the_window_are_refused_with_their_own_reason():
    assembler = ContextAssembler(words)
    req = ContextRequest(window=600, new_message="hi", system_prompt="rule " * 320,
                         instructions=Instructions("fact " * 100, ""))
    with pytest.raises(ContextOverflow, match="system prompt and custom instructions"):
        run(assembler.assemble(req))


def test_answer_reserve_default_and_setting():
    assert ContextSettings().reserve(2048) == 512
    assert ContextSettings().reserve(512) == 256
    assert ContextSettings(answer_reserve=100).reserve(2048) == 100
    out = run(ContextAssembler(words).assemble(request([], settings=ContextSettings(answer_reserve=1000))))
    assert out.report.reserve == 1000


def test_short_conversation_is_sent_whole_without_a_summary():
    hist = history(3)
    summarizer = Summarizer()
    out = run(ContextAssembler(words, summarize=summarizer).assemble(request(hist)))
    assert summarizer.calls == []
    assert len(out.messages) == 1 + 6 + 1
    assert out.report.summary_through is None
    assert not out.report.parts_of(PartKind.HISTORY)


def test_without_a_summarizer_or_when_it_fails_old_turns_are_reported_dropped():
    for assembler in (ContextAssembler(words, summaries=MemorySummaries()),
                      ContextAssembler(words, summaries=MemorySummaries(), summarize=Summarizer(fail=True))):
        out = run(assembler.assemble(request(history(200))))
        dropped = out.report.parts_of(PartKind.HISTORY, PartState.DROPPED)
        assert dropped and "not summarized" in dropped[0].note
        assert out.report.prompt_tokens <= out.report.budget


def test_drafts_never_call_the_model():
    summarizer = Summarizer()
    assembler = ContextAssembler(words, summaries=MemorySummaries(), summarize=summarizer)
    out = run(assembler.assemble(request(history(200)), allow_summarize=False))
    assert summarizer.calls == [] and out.report.summarize_calls == 0


def test_async_summarizer_is_awaited():
    async def summarize(turns, previous):
        await asyncio.sleep(0)
        return "async summary"

    out = run(ContextAssembler(words, summaries=MemorySummaries(), summarize=summarize).assemble(request(history(200))))
    assert "async summary" in out.messages[0]["content"]


def test_memories_fill_their_budget_and_the_rest_are_reported_dropped():
    items = [Retrieved(SourceKind.MEMORY, i, f"fact number {i} " + "detail " * 20, 1.0 - i / 100, 25)
             for i in range(1, 20)]
    out = run(ContextAssembler(words).assemble(request(history(2), retrieved=items)))
    used = out.report.memory_ids
    assert 0 < len(used) < len(items)
    assert used == tuple(range(1, len(used) + 1))  # best first
    assert all(f"fact number {i} " in out.messages[0]["content"] for i in used)
    assert len(out.report.parts_of(PartKind.MEMORY, PartState.DROPPED)) == len(items) - len(used)


def test_report_round_trips_through_json_meta():
    items = [Retrieved(SourceKind.MEMORY, 7, "I prefer metric units", 1.0, 6),
             Retrieved(SourceKind.PAST_CHAT, 99, "we talked about Porto", 0.5, 6, conversation_id=3)]
    out = run(ContextAssembler(words, summaries=MemorySummaries(), summarize=Summarizer()).assemble(
        request(history(300), retrieved=items, new_message_id=5000)))
    meta = json.loads(json.dumps({"context": out.report.to_dict()}))
    again = report_from_meta(meta)
    assert again == out.report
    assert again.memory_ids == (7,)
    assert report_from_meta({}) is None
    assert ContextReport.from_dict(out.report.to_dict(include_prompt=False)).rendered_prompt == ""


def test_exact_count_trims_when_the_estimate_was_short():
    # `count` underestimates by 4x; the exact chat counter catches it.
    exact = lambda messages: sum(words(m["content"]) + 4 for m in messages)  # noqa: E731
    assembler = ContextAssembler(lambda t: max(1, words(t) // 4), count_chat=exact,
                                 summaries=MemorySummaries(), summarize=Summarizer())
    out = run(assembler.assemble(request(history(100), window=1024)))
    assert out.report.exact and out.report.prompt_tokens <= out.report.budget
    assert out.report.prompt_tokens == exact(out.messages)
    assert any("exact count" in p.note for p in out.report.parts)


def test_failed_and_blocked_messages_are_left_out(tmp_path):
    store = Store(":memory:")
    conv = store.create_conversation()
    q = store.add_message(conv.id, Role.USER, "first question", parent_id=None)
    bad = store.add_message(conv.id, Role.ASSISTANT, "half", parent_id=q.id, status=MessageStatus.FAILED)
    q2 = store.add_message(conv.id, Role.USER, "again", parent_id=bad.id)
    out = run(ContextAssembler(words).assemble(
        ContextRequest(window=2048, new_message="again", history=store.lineage(q2.id), new_message_id=q2.id)))
    assert [m["content"] for m in out.messages] == ["first question", "again"]


def test_fast_lineage_matches_the_store():
    from wren.engine.context import lineage

    store = Store(":memory:")
    conv = store.create_conversation()
    q = store.add_message(conv.id, Role.USER, "q1", parent_id=None)
    a1 = store.add_message(conv.id, Role.ASSISTANT, "a1", parent_id=q.id)
    store.add_message(conv.id, Role.ASSISTANT, "a1 again", parent_id=q.id)
    q2 = store.add_message(conv.id, Role.USER, "q2", parent_id=a1.id)
    fast = lineage(store, q2.id)
    assert [m["id"] for m in fast] == [m.id for m in store.lineage(q2.id)]
    assert fast[0] == {"id": q.id, "role": "user", "content": "q1", "status": "complete"}
    # The one query both read through names only the columns it knows.
    with pytest.raises(ValueError, match="ancestor_rows reads"):
        store.ancestor_rows(q2.id, ("id", "content FROM chain; --"))
    with pytest.raises(NotFound):
        lineage(store, 10_000)


def test_summary_prompt_carries_previous_summary_and_turns():
    chat = summary_prompt([{"role": "user", "content": "I moved to Porto"}], "User likes tea.")
    assert chat[0]["role"] == "system"
    assert "User likes tea." in chat[1]["content"] and "User: I moved to Porto" in chat[1]["content"]


def test_real_tokenizer_counts_exactly(tiny_model_dir):
    from wren.engine.tokenize import Tokenizer

    tokenizer = Tokenizer.from_dir(tiny_model_dir)
    assembler = ContextAssembler.for_tokenizer(tokenizer, summaries=MemorySummaries(), summarize=Summarizer())
    out = run(assembler.assemble(request(history(500))))
    assert out.report.exact
    assert out.prompt_ids == tokenizer.encode_chat(out.messages)
    assert out.report.prompt_tokens == len(out.prompt_ids) <= out.report.budget
    assert out.report.rendered_prompt == tokenizer.render_chat(out.messages)
    assert SYSTEM in out.report.rendered_prompt and ABOUT in out.report.rendered_prompt
