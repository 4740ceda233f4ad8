"""engine/turn/plan.py: a turn's one-trip read from a real store, and the plan's own
answers (does it fit, the report once the question is stored, whether history folds)."""

from __future__ import annotations

import dataclasses

import pytest

from wren.engine.context import AssembledContext
from wren.engine.context.assemble import ContextOverflow
from wren.engine.context.report import ContextPart, ContextReport, PartKind, PartState
from wren.engine.errors import NotFound
from wren.engine.records import Role
from wren.engine.safety import scan
from wren.engine.store import Store
from wren.engine.turn.plan import LATEST, TurnPlan, TurnSettings, read_settings, read_turn


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "wren.sqlite3")
    yield s
    s.close()


def test_a_turn_after_the_shown_branch_reads_its_history_and_every_setting_in_one_go(store):
    conv = store.create_conversation("garden", settings={"system_prompt": "Be brief."})
    first = store.add_message(conv.id, Role.USER, "Which roses?", parent_id=None)
    answer = store.add_message(conv.id, Role.ASSISTANT, "Climbers.", parent_id=first.id)
    store.add_message(conv.id, Role.ASSISTANT, "Ramblers.", parent_id=first.id)  # a sibling, now shown
    store.switch_to(answer.id)
    store.set_setting("sampling", {"temperature": 0.3})
    store.set_setting("tools.max_rounds", 2)
    reads = read_turn(store, store, conv.id, LATEST)
    assert reads.parent_id == answer.id and [m.content for m in reads.history] == ["Which roses?", "Climbers."]
    assert reads.conversation.settings == {"system_prompt": "Be brief."}
    assert reads.settings.get("sampling") == {"temperature": 0.3} and reads.settings.get("tools.max_rounds") == 2
    assert reads.settings.get("tools.constrain", True) is True  # not set: the default applies
    after_first = read_turn(store, store, conv.id, first.id)  # an edited question's branch
    assert after_first.parent_id == first.id and [m["content"] for m in after_first.history] == ["Which roses?"]


def test_a_missing_conversation_is_refused_by_its_id(store):
    with pytest.raises(NotFound, match="no conversation with id 99"):
        read_turn(store, store, 99, LATEST)


def test_settings_for_a_chat_not_made_yet_are_the_apps_alone(store):
    store.set_setting("system_prompt", "You are Wren.")
    settings = read_settings(store, None)
    assert settings.conversation == {} and settings.system_prompt == "You are Wren."


def plan(parts: tuple[ContextPart, ...] = (), **fields) -> TurnPlan:
    report = ContextReport(window=100, reserve=10, prompt_tokens=20, exact=True, parts=parts)
    base = TurnPlan(1, "Which roses?", None, scan("Which roses?"), TurnSettings({}, {}), (), 100,
                    AssembledContext([{"role": "user", "content": "Which roses?"}], report), (1, 2, 3))
    return dataclasses.replace(base, **fields)


def test_a_plan_that_fits_says_so_and_one_that_does_not_raises_its_overflow():
    assert plan().fits and plan().check() is not None
    overflow = ContextOverflow("the message is 500 tokens; 90 fit", tokens=500, limit=90)
    refused = plan(assembled=None, overflow=overflow)
    assert not refused.fits
    with pytest.raises(ContextOverflow, match="500 tokens"):
        refused.check()


def test_once_the_question_is_stored_the_report_names_it():
    new = ContextPart(PartKind.NEW_MESSAGE, PartState.INCLUDED, 5, (), "user")
    system = ContextPart(PartKind.SYSTEM, PartState.INCLUDED, 3, text="Be brief.")
    stored = plan((system, new)).for_message(42)
    assert stored.message_id == 42
    assert [p.source_ids for p in stored.report.parts] == [(), (42,)]
    with pytest.raises(dataclasses.FrozenInstanceError):
        stored.message_id = 7  # type: ignore[misc]


def test_history_that_did_not_fit_verbatim_is_what_a_summary_could_fold():
    turn = ContextPart(PartKind.TURN, PartState.INCLUDED, 5, (3,), "user")
    older = ContextPart(PartKind.HISTORY, PartState.DROPPED, 50, (1, 2), items=2)
    assert not plan((turn,)).folds_history and plan((older, turn)).folds_history
