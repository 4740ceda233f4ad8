"""Titles name the question's topic (issue 34): no markup, never the answer describing itself,
a neutral title for a message met with care, and no two chats both reading "New chat"."""

from __future__ import annotations

import asyncio

from wren.engine.events import TitleUpdate
from wren.engine.titles import CARE_TITLE, FALLBACK, choose, clean, keyword_title, plausible

HURTING = "I feel low lately and sometimes think about hurting myself"


def run(coro):
    return asyncio.run(coro)


async def collect(stream):
    return [event async for event in stream]


def test_markup_and_meta_titles_are_not_kept():
    # a table row, as a model echoing its answer's first line wrote it
    assert clean("| Day | Trip Type |") == "Day Trip Type"
    assert clean("|---|---|\n| Day | Trip |") == "Day Trip"
    assert clean("> Kyoto temples") == "Kyoto temples"
    assert clean("- <b>Kyoto</b> temples") == "Kyoto temples"
    question = "Plan five weekend trips near Kyoto"
    assert not plausible("Here's a bulleted list of five", f"{question}\nHere's a bulleted list of five trips", question)
    assert choose("Here's a bulleted list of five", question, "Here's a bulleted list of five trips:") == \
        keyword_title(question)
    # a form word the question itself uses is its topic
    assert choose("Packing list for Kyoto", "What goes on a packing list for Kyoto?") == "Packing list for Kyoto"
    assert choose("Kyoto weekend trips", question) == "Kyoto weekend trips"


def test_the_first_title_is_asked_from_the_question(make_engine):
    asked = []

    def answer(prompt: str) -> str:
        if "name chats" in prompt:
            asked.append(prompt)
            return "Kyoto weekend trips"
        return "| Day | Trip Type |\n|---|---|\n| Sat | Nara |. More follows."

    async def main():
        engine = make_engine(answer)
        await engine.settings.set("titles.model", "always")
        conv = await engine.conversations.create()
        events = await collect(engine.chat.send(conv.id, "Plan five weekend trips near Kyoto"))
        await engine.close()
        return [e.title for e in events if isinstance(e, TitleUpdate)]

    titles = run(main())
    assert titles[0] == "Kyoto weekend trips"
    assert asked and "Trip Type" not in asked[0] and "Answer:" not in asked[0]


def test_a_message_met_with_care_gets_a_neutral_title(make_engine):
    async def main():
        engine = make_engine(lambda prompt: "Feel low lately sometimes think" if "name chats" in prompt
                             else "I'm really glad you told me. You matter.")
        await engine.settings.set("titles.model", "always")
        conv = await engine.conversations.create()
        events = await collect(engine.chat.send(conv.id, HURTING))
        saved = (await engine.conversations.get(conv.id)).title
        await engine.close()
        return [e.title for e in events if isinstance(e, TitleUpdate)], saved

    titles, saved = run(main())
    assert titles == [CARE_TITLE] and saved == CARE_TITLE


def test_two_untitled_chats_never_both_read_new_chat(make_engine):
    async def main():
        engine = make_engine("Hello!")
        first = await engine.conversations.create()
        second = await engine.conversations.create()
        a = await collect(engine.chat.send(first.id, "???"))
        b = await collect(engine.chat.send(second.id, "!!!"))
        names = [(await engine.conversations.get(c.id)).title for c in (first, second)]
        await engine.close()
        return a + b, names

    events, names = run(main())
    assert names == [FALLBACK, f"{FALLBACK} 2"]
    assert [e.title for e in events if isinstance(e, TitleUpdate)] == names
