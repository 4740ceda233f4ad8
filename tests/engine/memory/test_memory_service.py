"""MemoryService: remember/forget in chat, settings, temporary chats, history, provenance."""

from __future__ import annotations

import asyncio

import pytest

from wren.engine.context import ContextAssembler, ContextRequest, report_from_meta
from wren.engine.memory import TEMPORARY_KEY, MemoryRefused, MemoryService, Origin, SourceKind
from wren.engine.memory.suggest import suggest
from wren.engine.records import Role
from wren.engine.store import Store


def words(text: str) -> int:
    return max(1, len(text.split()))


@pytest.fixture
def service():
    return MemoryService(Store(":memory:"))


def test_remember_and_forget_in_chat(service):
    out = service.handle_message("Remember that my sister Clara lives in Berlin. From now on, answer briefly.")
    assert [m.text for m in out.saved] == ["My sister Clara lives in Berlin", "Answer briefly"]
    assert all(m.origin is Origin.CHAT for m in out.saved)
    out = service.handle_message("Please forget everything about my sister.")
    assert [m.text for m in out.forgotten] == ["My sister Clara lives in Berlin"]
    assert [m.text for m in service.list()] == ["Answer briefly"]
    out = service.handle_message("Forget that I live on the moon.")
    assert out.forgotten == () and out.unmatched_forgets == ("I live on the moon",)
    assert out.to_dict()["unmatched_forgets"] == ["I live on the moon"]


def test_forget_everything_asks_first(service):
    service.add("I like tea")
    out = service.handle_message("Forget everything you know about me.")
    assert out.confirm_clear_all and service.memories.count() == 1


def test_a_huge_remember_request_is_refused_with_the_reason(service):
    out = service.handle_message("Remember that " + "I like long walks " * 8000)
    assert out.saved == () and len(out.refused) == 1
    assert "short fact" in out.refused[0][1]
    with pytest.raises(MemoryRefused):
        service.add("x" * 100 * 1024)


def test_temporary_chats_and_memory_off_neither_use_nor_create(service):
    service.add("I prefer metric units")
    temp = {TEMPORARY_KEY: True}
    out = service.handle_message("Remember that I'm vegan.", conversation_settings=temp)
    assert out.saved == () and "temporary" in out.skipped and out.intents
    assert service.retrieve("which units?", budget_tokens=100, count=words, conversation_settings=temp) == []
    service.update_settings(enabled=False)
    assert "off" in service.handle_message("Remember that I'm vegan.").skipped
    assert service.retrieve("which units?", budget_tokens=100, count=words) == []
    service.update_settings(enabled=True)
    assert [r.text for r in service.retrieve("which units?", budget_tokens=100, count=words)] == ["I prefer metric units"]
    assert service.memories.count() == 1


def test_suggestions_only_when_turned_on_and_never_twice(service):
    text = "I'm a nurse and I work night shifts. I live in Porto. Can you help me plan meals?"
    assert service.handle_message(text).suggestions == ()
    service.update_settings(suggest=True)
    proposed = service.handle_message(text, message_id=None).suggestions
    assert [s.text for s in proposed] == ["I'm a nurse and I work night shifts", "I live in Porto"]
    service.accept(proposed[1])
    assert [s.text for s in service.handle_message(text).suggestions] == ["I'm a nurse and I work night shifts"]


@pytest.mark.parametrize("text", [
    "I'm tired today.", "I have a question about Python.", "If I were rich I'd buy a boat.",
    "I'm not sure what to cook.", "Am I a good writer?", "I think the answer is 4.",
    "I'm a bit confused by this error.", "My character is a wizard who lives in a tower.",
    "I love it!", "I'm looking for a new laptop.",
])
def test_suggestions_skip_passing_states_and_questions(text):
    assert suggest(text) == []


@pytest.mark.parametrize("text,fact", [
    ("My name is Rita.", "My name is Rita"),
    ("btw I'm vegetarian.", "I'm vegetarian"),
    ("I work as a pharmacist.", "I work as a pharmacist"),
    ("My dog is called Rex.", "My dog is called Rex"),
    ("I speak Portuguese and a little German.", "I speak Portuguese and a little German"),
    ("I have two daughters.", "I have two daughters"),
    ("I'm allergic to shellfish.", "I'm allergic to shellfish"),
])
def test_suggestions_find_lasting_self_statements(text, fact):
    assert [s.text for s in suggest(text)] == [fact]


def test_reference_chat_history_searches_other_saved_chats_only():
    store = Store(":memory:")
    service = MemoryService(store)
    old = store.create_conversation("trip")
    store.add_message(old.id, Role.USER, "We planned a trip to the Azores in May with a whale-watching tour.", parent_id=None)
    temp = store.create_conversation("temp", settings={TEMPORARY_KEY: True})
    store.add_message(temp.id, Role.USER, "Secret whale-watching plan in a temporary chat.", parent_id=None)
    gone = store.create_conversation("deleted")
    store.add_message(gone.id, Role.USER, "Deleted chat about whale-watching.", parent_id=None)
    store.delete_conversation(gone.id)
    now = store.create_conversation("now")
    store.add_message(now.id, Role.USER, "What about the whale-watching tour?", parent_id=None)
    ask = dict(budget_tokens=200, count=words, conversation_id=now.id)
    assert [r.kind for r in service.retrieve("whale-watching tour", **ask)] == []
    service.update_settings(reference_history=True)
    found = service.retrieve("whale-watching tour", **ask)
    assert [(r.kind, r.conversation_id) for r in found] == [(SourceKind.PAST_CHAT, old.id)]
    assert "Azores" in found[0].text


def test_deleting_a_used_memory_leaves_the_answer_readable():
    store = Store(":memory:")
    service = MemoryService(store)
    memory = service.add("I prefer metric units")
    conv = store.create_conversation()
    question = store.add_message(conv.id, Role.USER, "How far is a marathon?", parent_id=None)
    retrieved = service.retrieve("How far is a marathon in my units?", budget_tokens=100, count=words)
    out = asyncio.run(ContextAssembler(words).assemble(ContextRequest(
        window=2048, new_message=question.content, new_message_id=question.id, retrieved=retrieved)))
    assert out.report.memory_ids == (memory.id,)
    service.mark_used(out.report.memory_ids)
    answer = store.add_message(conv.id, Role.ASSISTANT, "42.195 km.", parent_id=question.id,
                               meta={"context": out.report.to_dict()})
    assert service.get(memory.id).times_used == 1

    service.delete(memory.id)
    again = store.get_message(answer.id)
    report = report_from_meta(again.meta)
    assert again.content == "42.195 km." and report.memory_ids == (memory.id,)
    assert service.get_many(report.memory_ids) == {}
    # The answer stays readable, but forgetting scrubs the memory's text from its provenance
    # (engine/privacy.py): the ids stay, the copy goes.
    assert "I prefer metric units" not in str(again.meta) and "[forgotten]" in report.rendered_prompt


def test_remember_this_action_keeps_its_source():
    store = Store(":memory:")
    service = MemoryService(store)
    conv = store.create_conversation()
    msg = store.add_message(conv.id, Role.USER, "I am training for the Lisbon half marathon", parent_id=None)
    saved = service.remember_message(msg.id)
    assert (saved.origin, saved.source_message_id, saved.source_conversation_id) == (Origin.ACTION, msg.id, conv.id)
    long = store.add_message(conv.id, Role.ASSISTANT, "word " * 5000, parent_id=msg.id)
    with pytest.raises(MemoryRefused):
        service.remember_message(long.id)
    assert service.remember_message(long.id, text="The plan has 5 runs a week").text == "The plan has 5 runs a week"
