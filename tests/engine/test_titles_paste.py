"""A chat that starts with a paste (a log, code, a traceback, a long text) is titled from the
typed question, wherever it stands; a paste with no question is named for what it is; no
title is made of timestamps or bare numbers."""

from __future__ import annotations

import asyncio
import re

import pytest

from wren.engine.events import TitleUpdate
from wren.engine.pasted import describe_paste, split_paste
from wren.engine.titles import keyword_title, title_request

LOG = "\n".join(f"2026-11-28 03:00:{i:02d} ERROR db.pool: connection refused (attempt {i}) pid=48211"
                for i in range(12))
TRACE = ('Traceback (most recent call last):\n  File "app.py", line 14, in <module>\n    main()\n'
         '  File "app.py", line 9, in main\n    print(users["alice"])\nKeyError: \'alice\'')
CODE = ("```python\ndef parse_config(path):\n    with open(path) as f:\n        return yaml.safe_load(f)\n"
        "```")
ARTICLE = ("The committee met on Tuesday to review the proposed budget for next year, and most members "
           "asked for the road repairs to come before the new library wing. ") * 4


@pytest.mark.parametrize(("message", "title"), [
    # the review's case: a question, then the log it asks about
    (f"What does this log say?\n{LOG}", "Log from 2026-11-28"),
    (f"{LOG}\n\nWhat does this log say?", "Log from 2026-11-28"),
    # a question with a topic of its own, before or after the paste
    (f"Why is the database pool refusing connections?\n{LOG}", "Database pool refusing connections"),
    (f"{CODE}\nWhy does this raise a KeyError on missing files?", "Raise KeyError missing files"),
    ("Here's my config:\n```yaml\nserver:\n  port: 8080\n```\nWhy doesn't the port change after a restart?",
     "Port change restart"),
    ("I'm getting this when deploying.\nHow do I fix it?\n\n    npm ERR! code ERESOLVE\n"
     "    npm ERR! ERESOLVE unable to resolve dependency tree\n    npm ERR! While resolving: app@1.0.0",
     "Getting deploying fix"),
    # a question that only points at its paste: the paste names the chat, with the question's verb
    (f"Can you fix this?\n{TRACE}", "Fix KeyError traceback"),
    (f"Explain this\n{CODE}", "Explain Python code for parse_config"),
    # a long pasted text and a short request: the text's topic, not the answer's form
    (f"{ARTICLE}\n\nSummarize this in three bullet points", "Committee met Tuesday review proposed"),
    # pastes with no question at all
    (LOG, "Log from 2026-11-28"),
    (TRACE, "KeyError traceback"),
    (CODE, "Python code for parse_config"),
])
def test_a_pasted_message_is_titled_from_its_question(message, title):
    assert keyword_title(message) == title


def test_no_title_is_made_of_timestamps_or_numbers():
    for message in (f"What does this log say?\n{LOG}", LOG, "Why does cron run at 03:00:00 every day?",
                    "2026-11-28 03:00:12\n2026-11-28 03:00:13\n2026-11-28 03:00:14\n2026-11-28 03:00:15"):
        title = keyword_title(message)
        assert not re.search(r"\b\d{2}\b(?!-)", title.replace("2026-11-28", "")), title
        assert any(c.isalpha() for c in title), title
    assert keyword_title("Why does cron run at 03:00:00 every day?") == "Cron run every day"


def test_plain_questions_are_titled_as_before():
    assert keyword_title("How do I keep basil alive indoors?") == "Keep basil alive indoors"
    # several typed lines and no paste: all of it is the question
    assert keyword_title("Hi!\nWhat's the best way to learn Spanish verbs?") == "Learn Spanish verbs"
    # a long message of the user's own, with no short request beside it, is not a paste
    letter = "I have a problem with my landlord.\n\n" + "He keeps entering the flat without notice. " * 8
    assert split_paste(letter) == (letter, "")
    assert keyword_title(letter) == "Problem landlord keeps entering flat"


def test_split_paste_finds_the_question_on_either_side():
    assert split_paste(f"What does this log say?\n{LOG}") == ("What does this log say?", LOG)
    asked, paste = split_paste(f"{CODE}\n\nIs this thread safe?")
    assert asked == "Is this thread safe?" and paste == CODE
    asked, paste = split_paste(f"Dear team,\n\n{ARTICLE}\n\nThanks,\nSam\n\nMake this email shorter")
    assert asked == "Make this email shorter" and paste.strip() == ARTICLE.strip()
    assert split_paste(LOG) == ("", LOG)


def test_describe_paste_names_its_kind():
    assert describe_paste(LOG) == "Log from 2026-11-28"
    assert describe_paste("INFO starting worker\nWARN slow disk\nINFO ready") == "Log excerpt"
    assert describe_paste(TRACE) == "KeyError traceback"
    assert describe_paste('```json\n{"a": 1}\n```') == "JSON data"
    assert describe_paste(ARTICLE) == ""


def test_the_model_is_asked_from_the_question_first():
    content = title_request(f"{LOG}\n\nWhat does this log say?", "")[1]["content"]
    assert content.startswith("Question: What does this log say? (pasted) 2026-11-28")


def test_a_chat_started_with_a_paste_gets_its_title(make_engine):
    async def main():
        engine = make_engine("The pool ran out of connections.")
        await engine.settings.set("titles.model", "off")
        conv = await engine.conversations.create()
        events = [e async for e in engine.chat.send(conv.id, f"What does this log say?\n{LOG}")]
        saved = (await engine.conversations.get(conv.id)).title
        await engine.close()
        return [e.title for e in events if isinstance(e, TitleUpdate)], saved

    titles, saved = asyncio.run(main())
    assert titles == ["Log from 2026-11-28"] and saved == "Log from 2026-11-28"


def test_a_very_long_paste_is_read_at_its_ends():
    huge = "\n".join(f"2026-11-28 03:{i // 60 % 60:02d}:{i % 60:02d} INFO handled request {i}" for i in range(30_000))
    assert keyword_title(f"{huge}\nWhy are the request handlers slow tonight?") == "Request handlers slow tonight"
    assert keyword_title(f"What does this log say?\n{huge}") == "Log from 2026-11-28"
