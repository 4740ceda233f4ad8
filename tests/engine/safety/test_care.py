"""A message about self-harm gets care: the model still answers, with a system note asking
for care; the words people see are a resource, per language, checked when read."""

from __future__ import annotations

import asyncio
import json

import pytest

from wren.engine.api import Engine
from wren.engine.errors import InvalidRequest
from wren.engine.events import Delta, Finished, FinishReason, SafetyNotice
from wren.engine.safety.care import CareMessage, load_care, needs_care, parse_care

HURTING = "I don't see the point any more, I want to die"


async def _collect(stream) -> list:
    return [event async for event in stream]


def test_the_model_answers_with_a_care_note_in_its_prompt(make_engine):
    async def main():
        engine: Engine = make_engine("I'm really glad you told me. You matter.")
        conv = await engine.conversations.create()
        events = await _collect(engine.chat.send(conv.id, HURTING))
        cared = engine.scripted.loaded[0].prompts[-1]
        other = await engine.conversations.create()
        await _collect(engine.chat.send(other.id, "What is the capital of France?"))
        plain = engine.scripted.loaded[0].prompts[-1]
        stored = await engine.conversations.messages(conv.id)
        note = engine.safety.care_message().system_note
        await engine.close()
        return events, cared, plain, stored, note

    events, cared, plain, stored, note = asyncio.run(main())
    assert "".join(e.text for e in events if isinstance(e, Delta)) == "I'm really glad you told me. You matter."
    assert isinstance(events[-1], Finished) and events[-1].reason is FinishReason.STOP
    notices = [e for e in events if isinstance(e, SafetyNotice)]
    assert notices and notices[0].category == "content.self_harm" and needs_care(notices)
    assert note in cared and "care" in note
    assert note not in plain
    # The finding and its rule id are kept with the question, for diagnostics.
    assert stored[0].meta["safety"][0]["category"] == "content.self_harm"
    assert stored[0].meta["safety"][0]["rule"]


def test_the_care_message_is_a_resource_in_the_users_language(wren_home):
    english = load_care("en_GB.UTF-8", wren_home)
    assert isinstance(english, CareMessage) and english.language == "en"
    assert english.help and any(line.url.startswith("https://") for line in english.help)
    assert "content.self_harm" in english.categories
    german = load_care("de_AT.UTF-8", wren_home)
    assert german.language == "de" and german.title != english.title
    assert load_care("xx_YY", wren_home).language == "en"  # no such language: English


def test_a_users_own_care_file_replaces_the_shipped_one_and_a_broken_one_is_skipped(wren_home):
    folder = wren_home / "safety" / "care"
    folder.mkdir(parents=True)
    mine = {
        "title": "Local help", "message": "We are here.", "system_note": "Be kind.",
        "help": [{"text": "Call the local line", "url": "tel:+15550100"}],
    }
    (folder / "en.json").write_text(json.dumps(mine))
    assert load_care("en", wren_home).help[0].url == "tel:+15550100"
    (folder / "en.json").write_text("{ not json")
    assert load_care("en", wren_home).title != "Local help"  # the shipped one, not a failure


@pytest.mark.parametrize("change, named", [
    ({"title": ""}, "'title'"),
    ({"help": []}, "'help'"),
    ({"help": [{"text": "x", "url": "javascript:alert(1)"}]}, "help[0].url"),
    ({"categories": "content.self_harm"}, "'categories'"),
])
def test_a_bad_care_file_is_refused_naming_the_field(change, named):
    good = {"title": "T", "message": "M", "system_note": "N", "help": [{"text": "H"}]}
    with pytest.raises(InvalidRequest, match=named.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")):
        parse_care(json.dumps({**good, **change}), "en", "care.json")
