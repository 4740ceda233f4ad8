"""`wren memories …` and `wren context …` handlers, run in-process on a WREN_HOME per test."""

from __future__ import annotations

import argparse
import asyncio
import json

import pytest

from wren.engine import paths
from wren.engine.context import ContextAssembler, ContextRequest, MemorySummaries
from wren.engine.errors import InvalidRequest, NotFound
from wren.engine.memory import MemoryService
from wren.engine.records import Role
from wren.engine.store import Store
from wren.engine.terminal.memory import register


def wren(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="wren")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    result = args.func(args)
    return asyncio.run(result) if asyncio.iscoroutine(result) else result


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_add_list_search_edit_forget_clear(capsys):
    assert wren("memories", "add", "I prefer metric units", "--json") == 0
    first = json_lines(capsys.readouterr().out)[0]
    assert first["text"] == "I prefer metric units" and first["origin"] == "manual"
    wren("memories", "add", "My dog is called Max")
    assert "My dog is called Max" in capsys.readouterr().out

    wren("memories", "list", "--json")
    assert [m["text"] for m in json_lines(capsys.readouterr().out)] == ["My dog is called Max", "I prefer metric units"]
    wren("memories", "search", 'units NEAR "metric', "--json")
    assert [m["id"] for m in json_lines(capsys.readouterr().out)] == [first["id"]]

    wren("memories", "edit", str(first["id"]), "I prefer imperial units", "--json")
    assert json_lines(capsys.readouterr().out)[0]["text"] == "I prefer imperial units"
    wren("memories", "forget", str(first["id"]), "--json")
    assert json_lines(capsys.readouterr().out)[0]["forgotten"]["id"] == first["id"]
    with pytest.raises(NotFound):
        wren("memories", "forget", str(first["id"]))

    with pytest.raises(InvalidRequest, match="this would delete the one memory; run `wren memories clear --yes`"):
        wren("memories", "clear")
    wren("memories", "clear", "--yes", "--json")
    assert json_lines(capsys.readouterr().out) == [{"cleared": 1}]
    wren("memories", "clear", "--yes")
    assert capsys.readouterr().out == "forgot no memories\n"
    wren("memories", "list")
    assert capsys.readouterr().out == ""


def test_a_huge_memory_is_refused(capsys):
    with pytest.raises(InvalidRequest, match="short fact"):
        wren("memories", "add", "x" * 100 * 1024)


def test_settings_toggle(capsys):
    wren("memories", "settings", "--memory", "off", "--reference-history", "on", "--json")
    data = json_lines(capsys.readouterr().out)[0]
    assert data["enabled"] is False and data["reference_history"] is True and data["suggest"] is False
    wren("memories", "settings")
    assert "enabled            off" in capsys.readouterr().out


def test_context_prints_the_last_report_and_marks_forgotten_memories(capsys):
    store = Store(paths.database_path())
    service = MemoryService(store)
    memory = service.add("I prefer metric units")
    conv = store.create_conversation()
    q = store.add_message(conv.id, Role.USER, "How far is a marathon?", parent_id=None)
    items = service.retrieve("marathon distance in my units", budget_tokens=100, count=lambda t: len(t.split()))
    out = asyncio.run(ContextAssembler(lambda t: len(t.split()), summaries=MemorySummaries()).assemble(
        ContextRequest(window=2048, new_message=q.content, new_message_id=q.id, retrieved=items,
                       system_prompt="You are Wren.")))
    answer = store.add_message(conv.id, Role.ASSISTANT, "42.195 km", parent_id=q.id,
                               meta={"context": out.report.to_dict()})
    service.delete(memory.id)
    store.close()

    assert wren("context", str(conv.id), "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["message_id"] == answer.id and data["forgotten_memory_ids"] == [memory.id]
    assert data["prompt_tokens"] == out.report.prompt_tokens
    wren("context", str(conv.id))
    text = capsys.readouterr().out
    # forgetting scrubbed the memory's text from the answer's provenance (engine/privacy.py)
    assert f"#{memory.id}  [forgotten since]" in text and "I prefer metric units" not in text
    assert "--- rendered prompt ---" in text and "You are Wren." in text

    empty = Store(paths.database_path())
    other = empty.create_conversation().id
    empty.close()
    with pytest.raises(NotFound, match="no answer with a context report"):
        wren("context", str(other))


def test_a_search_that_finds_nothing_says_so_and_an_empty_one_is_refused(capsys):
    wren("memories", "add", "My dog is called Max")
    capsys.readouterr()
    assert wren("memories", "search", "zebra") == 0
    said = capsys.readouterr()
    assert said.out == "" and said.err == "no memory matches 'zebra'\n"
    assert wren("memories", "search", "zebra", "--json") == 0  # JSON: no lines, nothing else
    assert capsys.readouterr() == ("", "")
    with pytest.raises(InvalidRequest, match="the search is empty"):
        wren("memories", "search", "  ")
