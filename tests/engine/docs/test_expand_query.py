"""Query expansion (engine/library/expand.py) through a real Send and the real library, the
model scripted: off by default; on for a Send (SendOptions.expand_query, `wren ask
--expand-query`) or by the library.expand_query setting, the model's phrasings are searched
too and find a passage the question's own words miss; the request is greedy and capped; a
model that fails or stalls leaves the question's own search and the Send still answers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from wren.engine.events import Delta, Failed, Finished
from wren.engine.library import expand
from wren.engine.library.expand import EXPAND_SETTING, EXPAND_TOKENS, MAX_PHRASINGS, PHRASING_CHARS, phrasings
from wren.engine.records import SendOptions
from wren.engine.terminal.ask import request_from
from wren.engine.terminal.main import build_parser

QUESTION = "Why does my oven show a warning?"  # no word of it is in kiln.md
ANSWER = "Check the wiring."


def folder_with_kiln(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "kiln.md").write_text("# Kiln\n\n## Errors\n\nError E-3 means the thermocouple failed.\n")
    (folder / "cake.txt").write_text("Bake the lemon cake for forty minutes.\n")
    return folder


def replying(phrased: str):
    """The scripted model: `phrased` to the expansion request, ANSWER to the question."""
    def reply(prompt: str) -> str:
        return phrased if "search queries" in prompt else ANSWER
    return reply


def send(make_engine, tmp_path: Path, reply, options: SendOptions, setting: bool | None = None):
    tmp_path.mkdir(exist_ok=True)

    async def main():
        engine = make_engine(reply, db_path=tmp_path / "wren.db")
        engine.library.index.embedder = lambda: None  # words only: the question alone finds nothing
        try:
            if setting is not None:
                await engine.settings.set(EXPAND_SETTING, setting)
            await engine.library.add([str(folder_with_kiln(tmp_path))])
            await engine.library.sync()
            conv = await engine.conversations.create()
            events = [e async for e in engine.chat.send(conv.id, QUESTION, options)]
            given = [Path(p.path).name for p in engine.library.given(conv.id)]
            return events, given, list(engine.library.last_expansion), [p for m in engine.scripted.loaded for p in m.prompts]
        finally:
            await engine.close()

    return asyncio.run(main())


def answered(events) -> str:
    assert any(isinstance(e, Finished) for e in events) and not any(isinstance(e, Failed) for e in events)
    return "".join(e.text for e in events if isinstance(e, Delta))


def test_off_by_default_the_model_is_not_asked(make_engine, tmp_path: Path):
    events, given, also, prompts = send(make_engine, tmp_path, replying("thermocouple failed"),
                                        SendOptions(documents=True))
    assert answered(events) == ANSWER and given == [] and also == []
    assert not any("search queries" in p for p in prompts)


def test_the_models_phrasings_find_what_the_question_misses(make_engine, tmp_path: Path):
    events, given, also, prompts = send(make_engine, tmp_path, replying("1. E-3 thermocouple failed\n2. kiln error"),
                                        SendOptions(documents=True, expand_query=True))
    assert also == ["E-3 thermocouple failed", "kiln error"]
    assert given == ["kiln.md"] and answered(events) == ANSWER
    asked = [p for p in prompts if "search queries" in p]
    assert len(asked) == 1 and QUESTION in asked[0]
    assert "thermocouple failed" in prompts[-1]  # the passage it found reached the answer's prompt


def test_the_setting_turns_it_on_and_a_send_can_turn_it_off(make_engine, tmp_path: Path):
    _, given, also, _ = send(make_engine, tmp_path, replying("thermocouple"), SendOptions(documents=True), True)
    assert also == ["thermocouple"] and given == ["kiln.md"]
    _, given, also, prompts = send(make_engine, tmp_path / "off", replying("thermocouple"),
                                   SendOptions(documents=True, expand_query=False), True)
    assert also == [] and given == [] and not any("search queries" in p for p in prompts)


def test_a_long_reply_is_capped(make_engine, tmp_path: Path):
    lines = [f"thermocouple query number {i} " + "x" * 300 for i in range(8)]
    _, given, also, _ = send(make_engine, tmp_path, replying("\n".join(lines)),
                             SendOptions(documents=True, expand_query=True))
    # the scripted model stops at the token cap, so fewer lines may arrive; never more than kept
    assert 1 <= len(also) <= MAX_PHRASINGS and all(len(a) <= PHRASING_CHARS for a in also)
    assert given == ["kiln.md"]


def test_the_request_is_greedy_and_capped_in_tokens():
    seen = []

    async def complete(chat, params):
        seen.append((chat, params))
        return "- a\n- thermocouple\n* \"thermocouple\"\nWhy does my oven show a warning?\nkiln"

    found = asyncio.run(expand.expand(complete, QUESTION))
    assert found == ["thermocouple", "kiln"]  # too short, repeated or the question itself: left out
    (chat, params), = seen
    assert params.temperature == 0.0 and params.max_tokens == EXPAND_TOKENS
    assert chat[-1] == {"role": "user", "content": QUESTION}


def test_a_failing_or_stalling_model_leaves_the_plain_search():
    async def fails(chat, params):
        raise RuntimeError("the model went away")

    async def stalls(chat, params):
        await asyncio.sleep(30)
        return "thermocouple"

    async def main():
        return await expand.expand(fails, QUESTION), await expand.expand(stalls, QUESTION, seconds=0.2)

    assert asyncio.run(main()) == ([], [])
    assert asyncio.run(expand.expand(None, QUESTION)) == []  # no model to ask


def test_a_send_whose_expansion_fails_still_answers(make_engine, tmp_path: Path, monkeypatch):
    monkeypatch.setattr(expand, "EXPAND_SECONDS", 1.0)

    def reply(prompt: str) -> str:
        if "search queries" in prompt:
            raise RuntimeError("the expansion broke")
        return ANSWER

    events, given, also, _ = send(make_engine, tmp_path, reply, SendOptions(documents=True, expand_query=True))
    assert answered(events) == ANSWER and also == [] and given == []


def test_phrasings_drop_bullets_numbers_and_labels():
    text = ("Here are some search queries:\nQuery 1: kiln error codes\n2) thermocouple failure\n• E-3\n\n"
            "“kiln error codes”")
    assert phrasings(text, "x") == ["kiln error codes", "thermocouple failure", "E-3"]


@pytest.mark.parametrize("argv, expected", [([], None), (["--expand-query"], True)])
def test_wren_ask_takes_expand_query(argv, expected):
    args = build_parser().parse_args(["ask", *argv, "why?"])
    assert request_from(args, "why?", "", None).expand_query is expected
    assert build_parser().parse_args(["docs", "search", "q", *(["--expand"] if argv else [])]).expand is bool(argv)


def test_wren_docs_search_expand_prints_what_the_phrasings_found(make_engine, tmp_path: Path, monkeypatch, capsys):
    import json

    from wren.engine.terminal import main as terminal_main

    engine = make_engine(replying("Query 1: thermocouple failed"), db_path=tmp_path / "wren.db")
    engine.library.index.embedder = lambda: None
    asyncio.run(engine.library.add([str(folder_with_kiln(tmp_path))]))
    asyncio.run(engine.library.sync())
    monkeypatch.setattr(terminal_main, "_open_engine", lambda one_shot=False: engine)
    assert terminal_main.main(["docs", "search", QUESTION, "--expand", "--json"]) == 0
    out, err = capsys.readouterr()
    (hit,) = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert hit["path"].endswith("kiln.md") and "thermocouple failed" in hit["text"]
    assert "also searched: thermocouple failed" in err


def test_the_question_and_its_phrasings_are_embedded_in_one_call():
    """One batch of the real embedder for a question and its phrasings (blank ones skipped),
    each vector the one the question alone would get."""
    from wren.engine.library.retrieve import embed_queries
    from wren.engine.memory.embed import load_embedder

    real = load_embedder()
    if real is None:
        pytest.skip("the embeddings package is not installed")
    calls: list[list[str]] = []

    class Counting:
        name = real.name

        def embed(self, texts):
            calls.append(list(texts))
            return real.embed(texts)

    texts = [QUESTION, "  ", "oven warning light meaning", "thermocouple error code"]
    got = embed_queries(Counting(), texts)
    assert calls == [[QUESTION, "oven warning light meaning", "thermocouple error code"]]
    assert got[1] is None and all(v is not None and v[0] == real.name for i, v in enumerate(got) if i != 1)
    for text, vector in zip(texts, got):
        if vector is not None:
            assert abs(float(vector[1] @ real.embed([text])[0]) - 1.0) < 1e-4
    assert embed_queries(None, texts) == [None] * 4
