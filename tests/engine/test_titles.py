"""Titles written by the engine beside a new chat's first answer (engine/titles.py)."""

from __future__ import annotations

import asyncio

from wren.engine.events import Delta, Finished, FinishReason, TitleUpdate
from wren.engine.titles import choose, clean, drifted, first_sentence, keyword_title, plausible


def run(coro):
    return asyncio.run(coro)


async def collect(stream):
    return [event async for event in stream]


LONG = ("Basil likes warm sun. Put the basil pot on a bright windowsill, water the basil when the soil is dry, "
        "and pinch the basil tips so it grows bushy. Basil hates cold drafts.")


def reply(title: str, answer: str = LONG):
    return lambda prompt: title if "name chats" in prompt else answer


def test_title_arrives_before_finished_for_a_long_answer(make_engine):
    async def main():
        engine = make_engine(reply("Basil care indoors"))
        await engine.settings.set("titles.model", "always")  # the scripted model has one slot
        conv = await engine.conversations.create()
        events = await collect(engine.chat.send(conv.id, "How do I keep basil alive indoors?"))
        saved = (await engine.conversations.get(conv.id)).title
        await engine.close()
        return events, saved

    events, saved = run(main())
    kinds = [type(e) for e in events]
    titles = [e for e in events if isinstance(e, TitleUpdate)]
    assert 1 <= len(titles) <= 2  # the first title, and at most one revision
    assert kinds.index(TitleUpdate) < kinds.index(Finished)
    assert kinds.index(Delta) < kinds.index(TitleUpdate)
    assert isinstance(events[-1], Finished) and events[-1].reason is FinishReason.STOP
    assert titles[0].title == "Basil care indoors"
    assert saved == titles[-1].title


def test_implausible_model_title_falls_back_to_the_question(make_engine):
    async def main():
        engine = make_engine(reply("I'm a dedicated vegan and proud"))
        await engine.settings.set("titles.model", "always")
        conv = await engine.conversations.create()
        events = await collect(engine.chat.send(conv.id, "Is being vegetarian healthy for teenagers?"))
        await engine.close()
        return [e.title for e in events if isinstance(e, TitleUpdate)]

    titles = run(main())
    assert titles[0] == "Vegetarian healthy teenagers"


def test_revised_once_when_the_answer_drifts(make_engine):
    drift = ("Sure. Sourdough starter needs flour and water; feed the sourdough starter daily, keep the "
             "starter warm, and bake sourdough bread when the starter doubles. Flour matters: rye flour helps.")

    def answer(prompt: str) -> str:
        if "name chats" in prompt:
            return "Bread baking help" if "Sourdough starter needs flour" in prompt else "Weekend plans"
        return drift

    async def main():
        engine = make_engine(answer)
        await engine.settings.set("titles.model", "always")
        conv = await engine.conversations.create()
        events = await collect(engine.chat.send(conv.id, "Any ideas for my weekend plans?"))
        again = await collect(engine.chat.send(conv.id, "And then?"))
        saved = (await engine.conversations.get(conv.id)).title
        await engine.close()
        return events, again, saved

    events, again, saved = run(main())
    titles = [e.title for e in events if isinstance(e, TitleUpdate)]
    assert titles == ["Weekend plans", "Bread baking help"]
    assert saved == "Bread baking help"
    assert not [e for e in again if isinstance(e, TitleUpdate)]  # only a new chat's first answer


def test_no_title_for_titled_or_temporary_chats(make_engine):
    async def main():
        engine = make_engine(reply("Basil care"))
        named = await engine.conversations.create("My basil")
        temp = await engine.conversations.create(temporary=True)
        a = await collect(engine.chat.send(named.id, "How do I keep basil alive?"))
        b = await collect(engine.chat.send(temp.id, "How do I keep basil alive?"))
        title = (await engine.conversations.get(named.id)).title
        await engine.close()
        return a + b, title

    events, title = run(main())
    assert not [e for e in events if isinstance(e, TitleUpdate)]
    assert title == "My basil"


def test_stopped_answer_still_gets_a_title(make_engine):
    async def main():
        engine = make_engine(reply("Basil care", LONG * 20), delay=0.01)
        await engine.settings.set("titles.model", "always")
        conv = await engine.conversations.create()
        events = []
        async for event in engine.chat.send(conv.id, "How do I keep basil alive indoors?"):
            events.append(event)
            if isinstance(event, Delta) and len(events) == 3:
                engine.chat.stop(conv.id)
        saved = (await engine.conversations.get(conv.id)).title
        await engine.close()
        return events, saved

    events, saved = run(main())
    assert events[-1].reason is FinishReason.CANCELLED
    assert saved  # the model's title or the question's key words


def test_one_slot_model_names_the_chat_from_the_question_at_once(make_engine):
    async def main():
        engine = make_engine(reply("Basil care"))  # titles.model "auto": the scripted model has no spare slot
        conv = await engine.conversations.create()
        events = await collect(engine.chat.send(conv.id, "How do I keep basil alive indoors?"))
        prompts = list(engine.scripted.loaded[0].prompts)
        await engine.close()
        return events, prompts

    events, prompts = run(main())
    kinds = [type(e) for e in events]
    assert [e.title for e in events if isinstance(e, TitleUpdate)] == ["Keep basil alive indoors"]
    assert kinds.index(TitleUpdate) == len(kinds) - 2  # just before Finished
    assert len(prompts) == 1  # no side request delays the answer


def test_cleaning_and_checks():
    assert clean('Title: "Basil Care Indoors".') == "Basil Care Indoors"
    assert clean("In two sentences, the title could be: Paris trip ideas") == "Paris trip ideas"
    assert clean("**Sourdough basics**\nmore") == "Sourdough basics"
    assert clean("Trip to Rome: A three-day adventure to Italy") == "Trip to Rome"
    assert clean("How to Grow More Plants in a Short Time") == "How to Grow More Plants"  # cut, not on "in"
    assert len(clean("one two three four five six seven eight").split()) == 6
    assert not plausible("A classic, yet utterly uninspired title", "How do I cook rice?")
    assert not plausible("I'm a dedicated vegan", "Is being vegetarian healthy?")
    assert not plausible("Weekend hiking", "How do I cook rice?")  # shares no content word
    assert plausible("Cooking rice", "How do I cook rice?")
    assert choose("Title: Cooking rice", "How do I cook rice?") == "Cooking rice"
    assert choose("Hello from Wren.", "How do I cook rice?") == "Cook rice"
    assert keyword_title("How do I keep basil alive indoors?") == "Keep basil alive indoors"
    assert first_sentence("Paris is the capital") is None
    assert first_sentence("Paris is the capital. It is") == "Paris is the capital."
    assert not drifted("How do I keep basil alive?", LONG)
